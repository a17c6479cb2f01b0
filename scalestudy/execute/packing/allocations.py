"""A packed allocation, the submitting side: write each run's step script, allocation.json
and the allocation's job script, queue it through the one submit loop (execute.submit),
and say first whether this scheduler and engine can pack here at all.

A packed run's journal line names its allocation (results/<study>/allocations/<name>);
its job id is the allocation's. How its state is read back: execute.packing.steps.
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from scalestudy.core.errors import ScalestudyError
from scalestudy.core.grid import Run
from scalestudy.execute import commands
from scalestudy.execute import workspace as ws
from scalestudy.execute.images import digest_for
from scalestudy.execute.journal import Journal
from scalestudy.execute.packing import allocfile
from scalestudy.execute.packing.allocfile import AllocationSpec, AllocationStep
from scalestudy.execute.packing.engines import engine_for
from scalestudy.execute.packing.plan import Allocation
from scalestudy.execute.packing.scripts import can_pack, flux_steps, render_allocation
from scalestudy.execute.submit import submit_recorded
from scalestudy.site.plan import Plan
from scalestudy.site.render import render
from scalestudy.site.schedulers import SubmitError

SCHEMA = "scalestudy.allocation/1"


def root(plan: Plan) -> Path:
    """results/<study>/allocations."""
    return plan.directory / "allocations"


def next_index(plan: Plan) -> int:
    """The number the next allocation of the study takes (a1, a2, ...; never reused)."""
    taken = [int(p.name[1:]) for p in root(plan).glob("a*") if p.name[1:].isdigit()]
    return max(taken, default=0) + 1


def write_allocation(plan: Plan, allocation: Allocation, name: str,
                     archive: bool = True) -> Path:
    """Write the steps' scripts (runs/<id>/job.sh, each run's files of an earlier attempt
    kept in attempts/<n>/ unless `archive` is false: a dry run), allocation.json and the
    allocation's job script; its path."""
    alloc_dir = (root(plan) / name).resolve()
    alloc_dir.mkdir(parents=True, exist_ok=True)
    scheduler = plan.scheduler
    packing = can_pack(scheduler)
    engine = engine_for(packing, plan.study.job.pack_engine)
    # A nested Flux runs each step as the run's own Flux job script (and writes its log).
    study, system = flux_steps(plan.study, plan.system) if engine.flux_jobs else (
        plan.study, plan.system)
    step_log = "flux.log" if engine.flux_jobs else scheduler.logs.name
    steps: list[AllocationStep] = []
    for step in allocation.steps:
        run = step.run
        run_dir = plan.run_dir(run).resolve()
        run_dir.mkdir(parents=True, exist_ok=True)
        if archive:
            ws.archive_attempt(run_dir, plan.campaign)
        ws.write_run(run_dir, run.params())
        script = run_dir / ws.SCRIPT
        ws.write_text_atomic(script, render(
            study, system, run, run_dir, step=not engine.flux_jobs,
            digest=digest_for(study.container_named(run.container))), mode=0o755)
        joined = engine.flux_jobs or scheduler.logs.joins_output
        steps.append({"run_id": run.run_id, "run_dir": str(run_dir), "script": str(script),
                      "nodes": run.nodes, "ranks_per_node": run.ranks_per_node,
                      "limit_s": step.limit_s, "expected_s": step.expected_s,
                      "log": step_log, "err": step_log if joined else "stderr.log"})
    spec: AllocationSpec = {
        "schema": SCHEMA, "study": plan.study.name, "name": name, "engine": engine.name,
        "nodes": allocation.nodes,
        "walltime_s": allocation.walltime_s, "slots_lines": packing.slots_lines,
        "expected_idle_node_s": round(allocation.idle_node_s, 1), "steps": steps}
    ws.write_json_atomic(alloc_dir / allocfile.NAME, spec)
    script = alloc_dir / ws.SCRIPT
    ws.write_text_atomic(script, render_allocation(plan.study, plan.system, allocation, name,
                                                   alloc_dir, sys.executable), mode=0o755)
    return script


@dataclass(frozen=True)
class Queued:
    """One allocation queued: its name (allocations/<name>), job id and plan."""

    name: str
    job_id: str
    allocation: Allocation


def queue_allocations(plan: Plan, allocations: Sequence[Allocation],
                      runner: commands.CommandRunner = commands.run_command
                      ) -> tuple[list[tuple[Run, str]], list[Queued]]:
    """Write and submit each allocation: an intent for each of its runs before the
    submit command, their job lines (the allocation's id) after; (run, job id) of each
    run, and the allocations queued."""
    book = Journal(plan.directory / "jobs.jsonl")
    attempts = book.jobs_per_run()
    done: list[tuple[Run, str]] = []
    placed: list[Queued] = []
    index = next_index(plan)
    for allocation in allocations:
        name = f"a{index}"
        index += 1
        script = write_allocation(plan, allocation, name)
        runs = [s.run for s in allocation.steps]
        try:
            job_id = submit_recorded(plan, book, runs, attempts, script, "pack", runner,
                                     allocation=name, reason=f"a step of allocation {name}")
        except SubmitError as exc:
            raise SubmitError(
                f"{exc}\n{len(done)} run(s) were submitted before this in earlier "
                f"allocations, recorded in {book.path}; run the same command again to "
                "submit the rest") from None
        done.extend((run, job_id) for run in runs)
        placed.append(Queued(name, job_id, allocation))
    return done, placed


def check_engine(plan: Plan) -> None:
    """`run --pack`: the scheduler must be able to pack (and to exclude nodes where the
    spec asks); `job.pack_engine: flux`: it must be able to start Flux in a job, and the
    `flux` command must be there to be started (it travels into the job on PATH)."""
    scheduler = plan.scheduler
    if (plan.study.job.exclude_nodes and scheduler.exclusion is not None
            and scheduler.exclusion.hosts_argv is not None):
        raise ScalestudyError(
            f"run --pack with job.exclude_nodes: a {scheduler.name} allocation cannot "
            "exclude nodes yet (scalestudy names each unpacked job's hosts instead); run "
            "without --pack, or without the exclude list")
    packing = can_pack(scheduler)
    engine = engine_for(packing, plan.study.job.pack_engine)
    if not engine.flux_jobs or packing.job_is_flux_instance:
        return
    if packing.starts_flux is None:
        raise ScalestudyError(
            f"job.pack_engine: flux: scalestudy cannot start a Flux instance inside a "
            f"{scheduler.name} job (it does so in Slurm jobs); set job.pack_engine: "
            "steps, scalestudy's own step runner")
    if shutil.which("flux") is None:
        raise ScalestudyError(
            "job.pack_engine: flux: no `flux` command on PATH; the allocation starts the "
            "one on PATH when the study is submitted: load the site's flux module (or put "
            "flux-core's bin directory on PATH) and run again")
