"""The local "scheduler": no queue; `scalestudy.executor` runs each script on this host."""

from __future__ import annotations

from collections.abc import Sequence

from scalestudy.errors import ScalestudyError
from scalestudy.schedulers import JobRequest, JobState, Scheduler, register


@register
class Local(Scheduler):
    """This host: scripts run one after the other, no job ids."""

    name = "local"

    def directives(self, job: JobRequest) -> list[str]:
        """No directives: the script runs directly."""
        return []

    def _no_queue(self) -> ScalestudyError:
        return ScalestudyError("system local has no scheduler: runs execute directly")

    def submit_argv(self, script: str) -> list[str]:
        """Not used: local runs are executed, not submitted."""
        raise self._no_queue()

    def parse_submit(self, exit_code: int, stdout: str, stderr: str) -> str:
        """Not used."""
        raise self._no_queue()

    def query_argvs(self, job_ids: Sequence[str]) -> list[list[str]]:
        """Not used."""
        raise self._no_queue()

    def parse_states(self, argv: Sequence[str], stdout: str) -> dict[str, JobState]:
        """Not used."""
        raise self._no_queue()

    def cancel_argv(self, job_ids: Sequence[str]) -> list[str]:
        """Not used."""
        raise self._no_queue()
