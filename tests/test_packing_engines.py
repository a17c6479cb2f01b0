"""The one registry of a packed allocation's engines (execute.packing.engines): a spec may
ask for exactly the registered ones, the engine follows from the scheduler's `packing`,
and an allocation.json naming an engine this release lacks is refused in one line."""

from __future__ import annotations

from pathlib import Path
from typing import get_args

import pytest

from scalestudy.core.spec import Job
from scalestudy.execute.packing.engines import ENGINES, engine_for, main
from scalestudy.site import schedulers


def test_the_spec_offers_exactly_the_registered_engines() -> None:
    assert set(get_args(Job.model_fields["pack_engine"].annotation)) == set(ENGINES)


def test_the_engine_follows_from_what_the_scheduler_offers() -> None:
    slurm, flux = schedulers.get("slurm").packing, schedulers.get("flux").packing
    assert slurm is not None and flux is not None
    assert not engine_for(slurm, "steps").flux_jobs and engine_for(slurm, "flux").flux_jobs
    assert engine_for(flux, "steps").flux_jobs  # its job is a Flux instance already


def test_an_engine_this_release_lacks_is_one_line(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "allocation.json").write_text('{"engine": "newer", "steps": []}')
    assert main([str(tmp_path), "7"]) == 2
    err = capsys.readouterr().err.strip()
    assert "'newer'" in err and "flux, steps" in err and "\n" not in err


def test_a_study_that_packs_on_a_scheduler_that_cannot_is_refused(tmp_path: Path) -> None:
    """`packing = None` (as the LSF plugin's): `validate` names `job.pack`, in one line."""
    from scalestudy.core.load import parse_study
    from scalestudy.site.plan import system_checks
    from scalestudy.site.profiles import SystemProfile
    from scalestudy.site.schedulers.slurm import Slurm

    class NoPack(Slurm):
        name = "nopack"
        packing = None

    schedulers.register(NoPack)
    try:
        system = SystemProfile.model_validate(
            {"name": "np", "scheduler": "nopack", "launcher": "srun", "max_nodes": 2})
        study = parse_study("name: t\nsystem: np\ngrid: {nodes: [1]}\n"
                            "job: {walltime: '00:10:00', pack: true}\n", str(tmp_path / "t.yaml"))
        problems = dict(system_checks(study, system))
    finally:
        del schedulers._REGISTRY["nopack"]
        schedulers._INSTANCES.pop(NoPack, None)
    assert problems[("job", "pack")] == (
        "system 'np' uses nopack, which cannot run runs as steps of one allocation: "
        "remove `pack`")
