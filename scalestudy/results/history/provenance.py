"""Where and under what each run attempt ran, read from what the run left: the workload's
record (versions, GPUs), the job script's env.txt (job id, tuning environment, container,
tags, the program's git commit) and hosts.txt (node list), when it started and ended,
and on a scheduler when it was submitted (the journal), hence its queue wait.
Every ended attempt of a study's run directories, the kept ones (attempts/<n>/) too."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from scalestudy.core.states import RunState
from scalestudy.execute import workspace as ws
from scalestudy.execute.journal import Job, Journal
from scalestudy.execute.status import read_status
from scalestudy.results.analysis import columns as col
from scalestudy.results.analysis.spend import allocation_start
from scalestudy.site import schedulers

#: Variables of the job's environment that are its tuning (communication libraries).
TUNING_PREFIXES: tuple[str, ...] = ("NCCL_", "TORCH_NCCL_", "FI_", "UCX_", "MPICH_",
                                    "OMPI_MCA_", "HOROVOD_", "CUDA_DEVICE_MAX_CONNECTIONS",
                                    "OMP_NUM_THREADS")
#: Where container runtimes name the image.
CONTAINER_VARIABLES: tuple[str, ...] = ("APPTAINER_CONTAINER", "SINGULARITY_CONTAINER",
                                        "SHIFTER_IMAGEREQUEST", "PODMAN_IMAGE",
                                        "ENROOT_ROOTFS")
#: Versions the workload records, under these names in the provenance.
RECORD_VERSIONS: dict[str, str] = {"torch_version": "torch", "python_version": "python"}
ENDED = (RunState.COMPLETED, RunState.FAILED)


@dataclass(frozen=True)
class Attempt:
    """One ended attempt of a run: its parameters, state, record and provenance."""

    params: dict[str, Any]
    number: int
    state: str
    record: dict[str, Any] | None
    provenance: dict[str, Any]
    tags: tuple[str, ...]
    started: datetime | None
    ended: datetime | None
    campaign: str | None = None  # the `run` that started it (None: before campaigns)


def job_id_variables() -> tuple[str, ...]:
    """Where each registered scheduler puts the job id in a job's environment (its
    `in_job.job_id_variable`: SLURM_JOB_ID, PBS_JOBID, FLUX_ENCLOSING_ID, a plugin's own)."""
    return tuple(v for cls in schedulers.classes() if (v := cls.in_job.job_id_variable))


def attempts_of(study_dir: Path) -> list[Attempt]:
    """Every ended attempt under results/<study>/runs, run by run, oldest attempt first;
    on a scheduler, with the submission the journal recorded for it (queue wait)."""
    journal = Path(study_dir) / "jobs.jsonl"
    submitted = {(j.run_id, j.attempt): j for j in Journal(journal).entries()} \
        if journal.is_file() else {}
    out: list[Attempt] = []
    for run_dir in sorted(p for p in Path(study_dir).glob("runs/*") if p.is_dir()):
        params = ws.read_run(run_dir)
        if not params or "run_id" not in params:
            continue
        kept = sorted((p for p in (run_dir / "attempts").glob("*") if p.name.isdigit()),
                      key=lambda p: int(p.name))
        for number, directory in [*((int(p.name), p) for p in kept),
                                  (len(kept) + 1, run_dir)]:
            attempt = read_attempt(params, number, directory,
                                   submitted.get((str(params[col.RUN_ID]), number)))
            if attempt is not None:
                out.append(attempt)
    return out


def read_attempt(params: Mapping[str, Any], number: int, directory: Path,
                 job: Job | None = None) -> Attempt | None:
    """The attempt kept in `directory`, or None while it has not ended; `job`: its
    submission, from the journal."""
    found = read_status(directory)
    if found.state not in ENDED:
        return None
    env = read_env(directory / "env.txt")
    record = dict(found.record) if found.record is not None else None
    tags = tuple(t for t in env.get("SCALESTUDY_TAGS", "").split(",") if t)
    started = _mtime(directory / "env.txt")
    ended = _mtime(directory / "exit_code") or _mtime(directory / ws.STATUS)
    prov = provenance(params, record, env, directory)
    placement = prov["placement"]
    placement[col.STARTED] = started.isoformat() if started else None
    placement[col.ENDED] = ended.isoformat() if ended else None
    # how it ended, for a system's failure rate (results.history.failures)
    placement["elapsed_s"] = found.job_elapsed_s or found.elapsed_s
    if found.state is RunState.FAILED:
        placement["failure"] = found.failure or "unknown"
    if job is not None:
        # the journal's spelling (Flux's ASCII f58), the one status and cancel use
        placement[col.JOB_ID] = job.job_id or placement[col.JOB_ID]
        placement["submitted"] = job.submitted_at
        when = _moment(job.submitted_at)
        if job.allocation:  # packed: the queue wait is the allocation's, the rest the step's
            placement["allocation"] = job.allocation
            began = allocation_start(directory.parents[1] if directory.parent.name == "runs"
                                     else directory.parents[3], job.allocation)
            if when is not None and began is not None:
                placement[col.QUEUE_WAIT_S] = round((began - when).total_seconds(), 3)
                if started is not None:
                    placement["step_wait_s"] = round((started - began).total_seconds(), 3)
        elif when is not None and started is not None:
            placement[col.QUEUE_WAIT_S] = round((started - when).total_seconds(), 3)
    return Attempt(dict(params), number, found.state.value, record, prov, tags, started,
                   ended, ws.read_campaign(directory))


def _moment(text: str | None) -> datetime | None:
    """An ISO time (the journal's) as an aware datetime (UTC where it names no zone)."""
    try:
        value = datetime.fromisoformat(text or "")
    except ValueError:
        return None
    return value if value.tzinfo else value.replace(tzinfo=timezone.utc)


def provenance(params: Mapping[str, Any], record: Mapping[str, Any] | None,
               env: Mapping[str, str], directory: Path) -> dict[str, Any]:
    """Versions, hardware, placement and configuration of one attempt (what is known)."""
    record = record or {}
    versions = {name: record[key] for key, name in RECORD_VERSIONS.items() if record.get(key)}
    versions.update(record.get(col.PROVENANCE, {}).get("versions", {}))
    if env.get("SCALESTUDY_VERSION"):
        versions["scalestudy"] = env["SCALESTUDY_VERSION"]
    if env.get("SCALESTUDY_MPI_VERSION"):  # the launcher's `--version`, from the job
        versions["mpi"] = env["SCALESTUDY_MPI_VERSION"].strip()
    if env.get("SCALESTUDY_CONTAINER_RUNTIME_VERSION"):  # the ranks' container runtime
        versions["container_runtime"] = env["SCALESTUDY_CONTAINER_RUNTIME_VERSION"].strip()
    hardware = dict(record.get(col.PROVENANCE, {}).get("hardware", {}))
    if record.get(col.DEVICE):
        hardware.setdefault("device", record[col.DEVICE])
    hosts = _lines(directory / "hosts.txt") or [str(h) for h in record.get("hosts") or []]
    job_id = next((env[v] for v in job_id_variables() if env.get(v)), None)
    # the image the ranks ran in (scalestudy's own container axis), else the one the whole
    # job ran in (the runtime's variable, seen when the job script itself was inside)
    container = env.get("SCALESTUDY_CONTAINER_IMAGE") or next(
        (env[v] for v in CONTAINER_VARIABLES if env.get(v)), None)
    out: dict[str, Any] = {
        "versions": versions, "hardware": hardware,
        "placement": {"nodes": hosts, "job_id": job_id},
        "configuration": {
            "system": env.get("SCALESTUDY_SYSTEM") or params.get(col.SYSTEM),
            "tuning": params.get(col.TUNING),
            **({"system_file": env["SCALESTUDY_SYSTEM_FILE"]}
               if env.get("SCALESTUDY_SYSTEM_FILE") else {}),
            "environment": {k: v for k, v in sorted(env.items())
                            if k.startswith(TUNING_PREFIXES)},
            **({"container": container} if container else {}),
            **({"container_runtime": env["SCALESTUDY_CONTAINER_RUNTIME"]}
               if env.get("SCALESTUDY_CONTAINER_RUNTIME") else {}),
            **({"container_digest": env["SCALESTUDY_CONTAINER_DIGEST"]}
               if env.get("SCALESTUDY_CONTAINER_DIGEST") else {}),
            **({"program_commit": env["SCALESTUDY_PROGRAM_COMMIT"]}
               if env.get("SCALESTUDY_PROGRAM_COMMIT") else {}),
        },
    }
    return out


def read_env(path: Path) -> dict[str, str]:
    """env.txt (`env | sort`) as a mapping; a value's later lines (a variable holding a
    newline) are dropped, as the line format cannot tell them apart."""
    out: dict[str, str] = {}
    for line in _lines(path):
        name, sep, value = line.partition("=")
        if sep and name.replace("_", "").isalnum() and not name[:1].isdigit():
            out[name] = value
    return out


def _lines(path: Path) -> list[str]:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    return [line for line in text.splitlines() if line.strip()]


def _mtime(path: Path) -> datetime | None:
    try:
        return datetime.fromtimestamp(path.stat().st_mtime, timezone.utc)
    except OSError:
        return None
