"""What PBS Pro's and Torque's own numbers mean: the negative exit statuses (JOB_EXEC_*),
the hold types, and a job killed at a resource limit. Pure data and readers, used by
the PBS parser (schedulers.pbs); docs/scheduler-states.md has the table with its sources."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from scalestudy.core.states import Failure

F = Failure

# PBS Pro's negative Exit_status values are its own, not the program's: JOB_EXEC_* in
# OpenPBS's src/include/job.h (v23.06.06), the class each decides and what it means.
PBSPRO_EXITS: dict[int, tuple[Failure, str]] = {
    -1: (F.SCHEDULER, "JOB_EXEC_FAIL1: the job could not start (before its files)"),
    -2: (F.SCHEDULER, "JOB_EXEC_FAIL2: the job could not start (after its files)"),
    -3: (F.SCHEDULER, "JOB_EXEC_RETRY: the job could not start; the server retried it"),
    -4: (F.NODE_FAILURE, "JOB_EXEC_INITABT: its MoM restarted while the job ran"),
    -5: (F.NODE_FAILURE, "JOB_EXEC_INITRST: its MoM restarted; checkpoint kept"),
    -6: (F.NODE_FAILURE, "JOB_EXEC_INITRMG: its MoM restarted; checkpoint kept"),
    -7: (F.SCHEDULER, "JOB_EXEC_BADRESRT: the restart from a checkpoint failed"),
    -10: (F.SCHEDULER, "JOB_EXEC_FAILUID: the user or group is invalid on the node"),
    -11: (F.REQUEUED, "JOB_EXEC_RERUN: the job was requeued (rerun)"),
    -12: (F.REQUEUED, "JOB_EXEC_CHKP: the job was checkpointed and killed"),
    -13: (F.SCHEDULER, "JOB_EXEC_FAIL_PASSWORD: a bad password"),
    -14: (F.NODE_FAILURE, "JOB_EXEC_RERUN_SIS_FAIL: a sister node failed; requeued"),
    -15: (F.REQUEUED, "JOB_EXEC_QUERST: requeued to restart from a checkpoint"),
    -16: (F.REQUEUED, "JOB_EXEC_FAILHOOK_RERUN: a site hook refused the start; requeued"),
    -17: (F.SCHEDULER, "JOB_EXEC_FAILHOOK_DELETE: a site hook refused the start"),
    -18: (F.REQUEUED, "JOB_EXEC_HOOK_RERUN: a site hook requeued the job"),
    -19: (F.SCHEDULER, "JOB_EXEC_HOOK_DELETE: a site hook deleted the job"),
    -20: (F.NODE_FAILURE, "JOB_EXEC_RERUN_MS_FAIL: the job's first node (mother "
                          "superior) was lost"),
    -21: (F.SCHEDULER, "JOB_EXEC_FAIL_SECURITY: the job's tmpdir failed a security check"),
    -22: (F.SCHEDULER, "JOB_EXEC_HOOKERROR: a site hook failed"),
    -23: (F.SCHEDULER, "JOB_EXEC_FAIL_KRB5: no Kerberos credentials"),
    -24: (F.RESOURCE_LIMIT, "JOB_EXEC_KILL_NCPUS_BURST: killed for using more cpus than "
                            "its ncpus (burst)"),
    -25: (F.RESOURCE_LIMIT, "JOB_EXEC_KILL_NCPUS_SUM: killed for using more cpus than "
                            "its ncpus (sum)"),
    -26: (F.OOM, "JOB_EXEC_KILL_VMEM: killed for exceeding its vmem limit"),
    -27: (F.OOM, "JOB_EXEC_KILL_MEM: killed for exceeding its mem limit"),
    -28: (F.RESOURCE_LIMIT, "JOB_EXEC_KILL_CPUT: killed for exceeding its cput limit"),
    -29: (F.WALLTIME, "JOB_EXEC_KILL_WALLTIME: killed for exceeding its walltime"),
    -30: (F.SCHEDULER, "JOB_EXEC_JOINJOB: the sister nodes could not join the job"),
}
# Torque's (Adaptive Computing, TORQUE 6.1 admin guide "Job exit status"): -1..-7 as
# PBS Pro, then its own -8..-14.
TORQUE_EXITS: dict[int, tuple[Failure, str]] = {
    **{code: PBSPRO_EXITS[code] for code in range(-7, 0)},
    -8: (F.SCHEDULER, "JOB_EXEC_CMDFAIL: exec() of the job's command failed"),
    -9: (F.SCHEDULER, "JOB_EXEC_STDOUTFAIL: the job's output files could not be created"),
    -10: (F.OOM, "JOB_EXEC_OVERLIMIT_MEM: killed for exceeding a memory limit"),
    -11: (F.WALLTIME, "JOB_EXEC_OVERLIMIT_WT: killed for exceeding its walltime"),
    -12: (F.RESOURCE_LIMIT, "JOB_EXEC_OVERLIMIT_CPUT: killed for exceeding its cpu time"),
    -13: (F.SCHEDULER, "JOB_EXEC_RETRY_CGROUP: the job's cgroup could not be made"),
    -14: (F.SCHEDULER, "JOB_EXEC_RETRY_PROLOGUE: the prologue failed"),
}
# The end of a finished job's comment where the Exit_status is missing (src/server/
# svr_jobfunc.c, update_job_finish_comment): "... and exceeded resource mem".
COMMENT_EXCEEDED = re.compile(r"exceeded resource (ncpus|vmem|mem|cput|walltime)")
EXCEEDED = {"ncpus": -24, "vmem": -26, "mem": -27, "cput": -28, "walltime": -29}
# Hold_Types letters (qhold -h): who may release the job.
HOLDS = {
    "u": "held by its user (Hold_Types u): release it with `qrls {id}`",
    "o": "held by an operator (Hold_Types o): ask the site's support to release it",
    "s": "held by the system (Hold_Types s){comment}: the site's support must look at "
         "why, then release it (`qrls -h s {id}`), or `qdel {id}` and run it again",
    "p": "held for a bad password (Hold_Types p): `qrls -h p {id}` after fixing it",
}
# A job ended by SIGKILL: the shell's 128 + 9, or PBS's 256 + 9.
KILLED = (137, 265)
_UNITS = {"b": 1, "kb": 1 << 10, "mb": 1 << 20, "gb": 1 << 30, "tb": 1 << 40, "w": 8,
          "kw": 8 << 10, "mw": 8 << 20, "gw": 8 << 30}


def _amount(value: object) -> float | None:
    """A PBS duration (`[[HH:]MM:]SS`) in seconds or a size (`65536kb`) in bytes."""
    text = str(value or "").strip().lower()
    size = re.fullmatch(r"(\d+)([kmgt]?[bw])", text)
    if size:
        return int(size.group(1)) * _UNITS[size.group(2)]
    if re.fullmatch(r"\d+(?::\d+){0,2}", text):
        seconds = 0
        for part in text.split(":"):
            seconds = seconds * 60 + int(part)
        return float(seconds)
    return None


def at_limit(attrs: Mapping[str, Any]) -> tuple[Failure, str] | None:
    """A job killed by SIGKILL that used all of its cput, mem or vmem: the kernel's
    limit took it (PBS sets RLIMIT_CPU for cput on a one-node job; seen on the testbed:
    Exit_status 137, no MoM message), not the MoM's kill."""
    def group(name: str) -> Mapping[str, Any]:  # JSON nests it; text has `name.key`
        nested = attrs.get(name)
        return nested if isinstance(nested, Mapping) else {
            k.split(".", 1)[1]: v for k, v in attrs.items() if k.startswith(f"{name}.")}

    asked, used = group("Resource_List"), group("resources_used")
    for name, failure in (("cput", Failure.RESOURCE_LIMIT), ("mem", Failure.OOM),
                          ("vmem", Failure.OOM)):
        limit, spent = _amount(asked.get(name)), _amount(used.get(name))
        if limit and spent is not None and spent >= limit:
            return failure, (f"killed by SIGKILL at its {name} limit ({name} used "
                             f"{used.get(name)} of {asked.get(name)})")
    return None
