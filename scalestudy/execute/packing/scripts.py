"""A packed allocation's scripts: the allocation's own job script (the largest run's
request on the allocation's nodes, then its engine), and the study and profile its steps
are rendered with when a nested Flux runs them. Pure: the caller writes the text."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from scalestudy import __version__
from scalestudy.core.errors import ScalestudyError
from scalestudy.core.grid import job_name
from scalestudy.core.spec import Study
from scalestudy.execute.packing.engines import engine_for
from scalestudy.execute.packing.plan import Allocation
from scalestudy.site import schedulers
from scalestudy.site.profiles import LauncherOptions, SchedulerOptions, SystemProfile
from scalestudy.site.queues import hms
from scalestudy.site.render import environment, job_request, template_dir
from scalestudy.site.schedulers import Packing, Scheduler


def can_pack(scheduler: Scheduler) -> Packing:
    """What the scheduler offers a packed allocation, or an error saying it cannot pack."""
    if scheduler.packing is None:
        raise ScalestudyError(f"run --pack: a {scheduler.name} job cannot run steps here; "
                              "run without --pack")
    return scheduler.packing


def flux_steps(study: Study, system: SystemProfile) -> tuple[Study, SystemProfile]:
    """The study and profile a packed allocation's steps are rendered with when a nested
    Flux instance runs them: each step is then the run's own Flux job script (`# flux:`
    directives for its nodes, time limit and log; `flux run` starting its ranks, one
    core set each, one GPU each where the nodes have GPUs). The site's queue, account
    and directives are the allocation's business, not the nested instance's."""
    job = study.job.model_copy(update={
        "account": None, "queue": None, "partition": None, "qos": None, "constraint": None,
        "filesystems": None, "sections": {}, "extra_directives": []})
    gpus = bool(system.gpus_per_node)
    torchrun = system.launcher == "torchrun"
    nested = system.model_copy(update={
        "scheduler": "flux", "launcher": "torchrun" if torchrun else "flux",
        "scheduler_options": SchedulerOptions(),
        "launcher_options": LauncherOptions(
            cpu_bind="per-task", gpu_bind="per-task" if gpus else None,
            gpus_per_task=1 if gpus else None, torchrun_via="flux" if torchrun else None)})
    return study.model_copy(update={"job": job}), nested


def render_allocation(study: Study, system: SystemProfile, allocation: Allocation, name: str,
                      alloc_dir: Path, python: str) -> str:
    """The job script of a packed allocation: the largest run's request on the
    allocation's nodes for its walltime, then the step runner (`python`: one that imports
    scalestudy, on a filesystem the nodes share)."""
    scheduler = schedulers.get(system.scheduler)
    packing = can_pack(scheduler)
    largest = max((s.run for s in allocation.steps),
                  key=lambda r: (r.nodes, r.ranks_per_node))
    base = job_request(study, system, largest, alloc_dir)
    request = dataclasses.replace(
        base, name=job_name(study.name, f"pack-{name}"), nodes=allocation.nodes,
        ranks_per_node=max(s.run.ranks_per_node for s in allocation.steps),
        walltime=hms(allocation.walltime_s), stdout=str(alloc_dir / "allocation.log"),
        stderr=str(alloc_dir / "allocation.log"))
    template = environment(template_dir(study)).get_template("allocation.sh.j2")
    flux_jobs = engine_for(packing, study.job.pack_engine).flux_jobs
    return template.render(
        directives=scheduler.directives(request), version=__version__, study=study.name,
        name=name, steps=len(allocation.steps), nodes=allocation.nodes,
        alloc_dir=str(alloc_dir), nodes_command=packing.nodes_command,
        job_id_variable=scheduler.in_job.job_id_variable, python=python,
        flux_jobs=flux_jobs, nested_flux=None if packing.job_is_flux_instance
        else packing.starts_flux)
