"""Record real Flux outputs for the parser tests, from the testbed of scripts/flux-testbed.

    scripts/flux-testbed start >/dev/null
    .venv/bin/python tests/data/flux/record.py          # about a minute

Every command runs as the instance's user through `scripts/flux-testbed exec`, with
FLUX_F58_FORCE_ASCII=1 (ids `f6q9bC2j`, not `ƒ6q9bC2j`) unless a case says otherwise.
Each FILE is the command's exact stdout; FILE.meta.json holds its argv (as run inside
`exec`), exit_code, stderr and, where it helps, a note. The scripts submitted are kept
in scripts/. SOURCES.md says what each file is.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
TESTBED = ROOT / "scripts" / "flux-testbed"
ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "FLUX_F58_FORCE_ASCII": "1"}


def run(argv: list[str], cwd: Path, env: dict[str, str] | None = None,
        timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """ARGV as the instance's user, from cwd, in a plain environment."""
    return subprocess.run([str(TESTBED), "exec", "--", *argv], cwd=cwd, env=env or ENV,
                          capture_output=True, text=True, timeout=timeout)


def save(path: str, argv: list[str], proc: subprocess.CompletedProcess[str],
         note: str | None = None) -> subprocess.CompletedProcess[str]:
    """Write stdout to HERE/path and the rest to HERE/path.meta.json."""
    out = HERE / path
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(proc.stdout, encoding="utf-8")
    meta: dict[str, object] = {"argv": argv, "exit_code": proc.returncode,
                               "stderr": proc.stderr}
    if note:
        meta["note"] = note
    Path(f"{out}.meta.json").write_text(json.dumps(meta, indent=2, ensure_ascii=False) + "\n",
                                        encoding="utf-8")
    return proc


def record(path: str, argv: list[str], cwd: Path, note: str | None = None,
           env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return save(path, argv, run(argv, cwd, env), note)


def job(job_id: str, cwd: Path) -> dict:
    proc = run(["flux", "jobs", "--json", job_id], cwd)
    return json.loads(proc.stdout) if proc.returncode == 0 else {}


def wait(job_id: str, cwd: Path, states: tuple[str, ...] = ("INACTIVE",),
         timeout: float = 90) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        info = job(job_id, cwd)
        if info.get("state") in states:
            return info
        if time.monotonic() > deadline:
            sys.exit(f"record.py: job {job_id} not in {states} after {timeout:.0f} s: {info}")
        time.sleep(0.3)


def script(work: Path, name: str, body: str, directives: list[str]) -> str:
    """A job script with `# flux:` directives, in work/ (run from there) and scripts/."""
    text = "#!/bin/bash\n" + "".join(f"# flux: {d}\n" for d in directives) + body
    for directory in (work, HERE / "scripts"):
        directory.mkdir(exist_ok=True)
        (directory / name).write_text(text, encoding="utf-8")
        (directory / name).chmod(0o755)
    return name


def submit(case: str, work: Path, argv: list[str], note: str | None = None) -> str:
    proc = record(f"submit/{case}.txt", argv, work, note)
    if proc.returncode != 0:
        sys.exit(f"record.py: {argv} failed: {proc.stderr}")
    return proc.stdout.strip()


def batch_script(work: Path, case: str, body: str, extra: list[str] | None = None) -> str:
    """A one-node batch script named after its case, its output in CASE.out."""
    return script(work, f"{case}.sh", body, [
        f"--job-name=study-{case}", "-N 1", "-t 10m", f"--output={case}.out",
        *(extra or []),
    ])


def main() -> None:
    if run(["flux", "uptime"], HERE).returncode != 0:
        sys.exit("record.py: the testbed is not running: scripts/flux-testbed start")
    for sub in ("submit", "jobs", "cancel", "find", "preflight", "scripts"):
        shutil.rmtree(HERE / sub, ignore_errors=True)
    owner = run(["id", "-un"], HERE).stdout.strip()
    work = Path(tempfile.mkdtemp(prefix="scalestudy-flux-record-"))
    work.chmod(0o755)
    if os.geteuid() == 0:
        shutil.chown(work, user=owner, group=owner)
    record("VERSION", ["flux", "version"], work)

    # Jobs that end by themselves: one batch script per case of FLUX-TESTBED.md.
    ended = {
        "exit0": ("echo hello\nexit 0\n", []),
        "exit3": ("echo failing\nexit 3\n", []),
        "sigkill": ("kill -9 $$\n", []),
        "command-not-found": ("no-such-command-xyz\n", []),
        "timeout": ("sleep 60\n", ["-t 5s"]),
        "unsatisfiable": ("hostname\n", ["-N 5"]),
    }
    ids: dict[str, str] = {}
    for case, (body, extra) in ended.items():
        name = batch_script(work, case, body, extra)
        ids[case] = submit(case, work, ["flux", "batch", name])
    # A task that cannot be started at all: flux-shell's exec fails (an `exec` exception).
    ids["exec-failed"] = submit("exec-failed", work, [
        "flux", "submit", "--job-name=study-exec-failed", "--output=exec-failed.out",
        "/no/such/program"])
    # The same submission without FLUX_F58_FORCE_ASCII: the id as most users see it.
    utf8 = {k: v for k, v in ENV.items() if k != "FLUX_F58_FORCE_ASCII"}
    argv = ["flux", "batch", "exit0.sh"]
    proc = save("submit/exit0-utf8.txt", argv, run(argv, work, utf8),
                note="no FLUX_F58_FORCE_ASCII in the environment, LANG=C.UTF-8")
    ids["exit0-utf8"] = proc.stdout.strip()
    for case, job_id in ids.items():
        wait(job_id, work)
        record(f"jobs/{case}.json", ["flux", "jobs", "--json", job_id], work)
    argv = ["flux", "jobs", "--json", ids["exit0-utf8"]]
    save("jobs/exit0-utf8-locale.json", argv, run(argv, work, utf8),
         note="no FLUX_F58_FORCE_ASCII in the environment, LANG=C.UTF-8")

    # Live states, then cancels: every node taken, a job waiting for nodes, a held job,
    # a job waiting on a dependency.
    name = batch_script(work, "running", "sleep 300\n", ["-N 4", "--exclusive"])
    ids["running"] = submit("running", work, ["flux", "batch", name])
    wait(ids["running"], work, ("RUN",))
    name = batch_script(work, "pending", "hostname\n", ["-N 2"])
    ids["pending"] = submit("pending", work, ["flux", "batch", name])
    wait(ids["pending"], work, ("SCHED",))
    name = batch_script(work, "held", "hostname\n", ["--urgency=0"])
    ids["held"] = submit("held", work, ["flux", "batch", name], note="--urgency=0: held")
    wait(ids["held"], work, ("SCHED", "PRIORITY"))
    name = batch_script(work, "dependent", "hostname\n",
                        [f"--dependency=afterok:{ids['running']}"])
    ids["dependent"] = submit("dependent", work, ["flux", "batch", name])
    wait(ids["dependent"], work, ("DEPEND",))
    time.sleep(1)
    for case in ("running", "pending", "held", "dependent"):
        record(f"jobs/{case}-live.json", ["flux", "jobs", "--json", ids[case]], work)
    live = [ids[c] for c in ("running", "pending", "held", "dependent")]
    record("jobs/multi-live.json", ["flux", "jobs", "--json", *live], work)
    record("jobs/all-live.json", ["flux", "jobs", "--json"], work,
           note="no -a: active jobs only")

    record("cancel/pending.txt", ["flux", "cancel", ids["pending"]], work)
    record("cancel/held.txt", ["flux", "cancel", ids["held"]], work)
    record("cancel/running.txt", ["flux", "cancel", ids["running"]], work,
           note="the dependent job (afterok on this one) can then never run")
    for case in ("pending", "held", "running", "dependent"):
        wait(ids[case], work)
        record(f"jobs/{case}.json", ["flux", "jobs", "--json", ids[case]], work)

    # Cancelling what cannot be cancelled.
    record("cancel/inactive.txt", ["flux", "cancel", ids["exit0"]], work)
    record("cancel/unknown.txt", ["flux", "cancel", "f2222222222"], work,
           note="a well-formed id no job has")
    record("cancel/not-an-id.txt", ["flux", "cancel", "12345.pbslab"], work)
    name = batch_script(work, "cancel-mixed", "sleep 300\n")
    ids["cancel-mixed"] = submit("cancel-mixed", work, ["flux", "batch", name])
    wait(ids["cancel-mixed"], work, ("RUN",))
    record("cancel/mixed.txt", ["flux", "cancel", ids["cancel-mixed"], ids["exit3"]], work,
           note="first id running, second inactive (exit3)")
    wait(ids["cancel-mixed"], work)
    record("jobs/cancel-mixed.json", ["flux", "jobs", "--json", ids["cancel-mixed"]], work,
           note="cancelled just after it reached RUN; an earlier recording of this case "
                "gave returncode 1, waitstatus 256 (this one 143): a cancelled job's "
                "returncode depends on timing")

    # Find by name: two jobs with one name (a run submitted twice), and a name nobody has.
    name = script(work, "twice.sh", "exit 0\n",
                  ["--job-name=study-c000000042", "-N 1", "--output=twice.out"])
    first = submit("twice-1", work, ["flux", "batch", name])
    second = submit("twice-2", work, ["flux", "batch", name])
    wait(first, work)
    wait(second, work)
    record("find/by-name.json", ["flux", "jobs", "-a", "--name=study-c000000042", "--json"],
           work, note=f"two jobs: {first} and {second}")
    record("find/by-name-active.json", ["flux", "jobs", "--name=study-c000000042", "--json"],
           work, note="no -a: both have ended")
    record("find/no-such-name.json", ["flux", "jobs", "-a", "--name=study-nobody", "--json"],
           work)
    record("find/by-name-ids.txt", ["flux", "jobs", "-a", "-n", "--name=study-c000000042",
                                    "-o", "{id.f58} {name} {state} {result}"], work)

    # Several ids at once, an unknown id, and every job.
    record("jobs/multi-ended.json", ["flux", "jobs", "--json", ids["exit0"], ids["exit3"],
                                     ids["timeout"], ids["running"], ids["pending"]], work)
    record("jobs/unknown.json", ["flux", "jobs", "--json", "f2222222222"], work)
    record("jobs/known-and-unknown.json", ["flux", "jobs", "--json", ids["exit0"],
                                           "f2222222222"], work)
    record("jobs/all.json", ["flux", "jobs", "-a", "--json"], work)

    # Submissions the instance refuses.
    record("submit/unknown-queue.txt", ["flux", "batch", "-q", "nosuch", "exit0.sh"], work)
    record("submit/over-queue-nodes.txt", ["flux", "batch", "-q", "debug", "-N", "3",
                                           "exit0.sh"], work,
           note="debug allows at most 2 nodes (the script's own -N 1 is overridden)")
    record("submit/over-queue-time.txt", ["flux", "batch", "-q", "debug", "-t", "2h",
                                          "exit0.sh"], work, note="debug allows at most 1 h")
    record("submit/over-time-limit.txt", ["flux", "batch", "-t", "7h", "exit0.sh"], work,
           note="batch (the default queue) allows at most 6 h")
    name = script(work, "bad-directive.sh", "exit 0\n", ["-N 1", "--no-such-option"])
    record("submit/bad-directive.txt", ["flux", "batch", name], work)
    record("submit/no-such-script.txt", ["flux", "batch", "no-such-script.sh"], work)

    # What preflight can ask: queues, their limits, nodes.
    record("preflight/queue-list.txt", ["flux", "queue", "list"], work,
           note="colour codes and UTF-8 ticks although stdout is not a terminal")
    record("preflight/queue-list-policy.txt", ["flux", "queue", "list", "-o", "policy"], work)
    record("preflight/queue-list-fields.txt", [
        "flux", "queue", "list", "-n", "-o",
        "{queue}|{queuem}|{enabled.ascii}|{started.ascii}|{defaults.timelimit}|"
        "{limits.timelimit}|{limits.min.nnodes}|{limits.max.nnodes}|"
        "{limits.max.ncores}|{limits.max.ngpus}"], work,
        note="queuem marks the default queue with *; inf: no limit; seconds")
    record("preflight/queue-status.txt", ["flux", "queue", "status"], work)
    record("preflight/resource-list.txt", ["flux", "resource", "list"], work)
    record("preflight/resource-list-rlist.txt", ["flux", "resource", "list", "-o", "rlist"],
           work)
    record("preflight/config-get-queues.json", ["flux", "config", "get", "queues"], work)
    record("preflight/config-get-policy.json", ["flux", "config", "get", "policy"], work)
    shutil.rmtree(work, ignore_errors=True)
    print(f"record.py: recorded into {HERE}")


if __name__ == "__main__":
    main()
