"""A fourth scheduler, for the tests only: each job a detached process group on this host.

It proves that a scheduler is one module: this class and its template's blocks, nothing
else in scalestudy named or edited (tests/test_fourth_scheduler.py runs a study on it).
A job is `setsid nohup bash job.sh`; its id is the process group's leader, its state
whether /proc still holds a live process of that id; a job that has ended says nothing
of its exit, so the run's own exit_code file decides (as on any scheduler whose
accounting does not say). It runs one node: every job is on this host.
"""

from __future__ import annotations

from collections.abc import Sequence

from scalestudy.site.schedulers import (
    JobRequest,
    JobState,
    JobStatus,
    Scheduler,
    SubmitError,
    check_token,
    register,
)

# The job's id and state: a live process (not a zombie) with that pid, or none.
_STATES = r"""for pid; do
    if [ -r "/proc/$pid/stat" ] && ! awk '{exit $3 == "Z" ? 0 : 1}' "/proc/$pid/stat"; then
        echo "$pid running"
    else
        echo "$pid ended"
    fi
done"""


@register
class Nohup(Scheduler):
    """Jobs as detached process groups on this host (bash, setsid, kill)."""

    name = "nohup"
    prefix = "# nohup:"
    template = "nohup.sh.j2"
    template_source = """{% extends "_job.sh.j2" %}
{% block submit_hint %}
# Submit by hand with: setsid nohup bash {{ (run_dir ~ "/job.sh") | q }} &
{% endblock %}
{% block output %}
exec > {{ (run_dir ~ "/stdout.log") | q }} 2> {{ (run_dir ~ "/stderr.log") | q }}
{% endblock %}
{% block hosts %}
hostname > {{ (run_dir ~ "/hosts.txt") | q }}
{% endblock %}
{% block job_number_value %}$${% endblock %}
"""

    def directives(self, job: JobRequest) -> list[str]:
        """Comment lines that say what the job asked for (nothing reads them)."""
        if job.nodes != 1:
            raise SubmitError(f"the nohup scheduler runs one node, not {job.nodes}")
        return [f"{self.prefix} --job-name={check_token('job name', job.name)}",
                f"{self.prefix} --ranks={job.ranks_per_node}",
                f"{self.prefix} --time={check_token('walltime', job.walltime)}"]

    def submit_argv(self, script: str, extra: Sequence[str] | None = None) -> list[str]:
        """bash starts the script in a session of its own and prints its pid."""
        return ["bash", "-c",
                'setsid nohup bash "$0" > /dev/null 2>&1 < /dev/null & echo "$!"', script]

    def parse_submit(self, exit_code: int, stdout: str, stderr: str) -> str:
        """The pid bash printed."""
        said = stdout.strip()
        if exit_code != 0 or not said.isdigit():
            raise SubmitError(f"nohup submit failed (exit {exit_code}): {stderr or said}")
        return said

    def query_argvs(self, job_ids: Sequence[str]) -> list[list[str]]:
        """One bash loop over the pids."""
        return [["bash", "-c", _STATES, "_", *job_ids]]

    def parse_states(self, argv: Sequence[str], exit_code: int, stdout: str,
                     stderr: str) -> dict[str, JobState]:
        """`PID running|ended` lines."""
        if exit_code != 0:
            raise SubmitError(f"nohup query: exit {exit_code}: {stderr.strip()}")
        states = {}
        for line in stdout.splitlines():
            pid, _, said = line.partition(" ")
            state = JobStatus.RUNNING if said == "running" else JobStatus.COMPLETED
            states[pid] = JobState(pid, state, said)
        return states

    def cancel_argv(self, job_ids: Sequence[str]) -> list[str]:
        """`kill -TERM -- -PGID ...`: each job's whole process group."""
        return ["kill", "-TERM", "--", *(f"-{i}" for i in job_ids)]

    def find_argvs(self, names: Sequence[str]) -> list[list[str]]:
        """No job carries its name where a command can list it."""
        return []

    def needed_commands(self) -> tuple[str, ...]:
        """bash and setsid submit, kill cancels."""
        return ("bash", "setsid", "kill")
