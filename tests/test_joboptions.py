"""Each scheduler's own `job:` options: the new sections (`job.slurm: {...}`), the old flat
keys still read with one note, the errors a user sees (file:line, did-you-mean), and what
a scheduler words itself: preflight's account check and the variables env.txt records."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest

from scalestudy.core.errors import SpecError
from scalestudy.core.load import parse_study
from scalestudy.site import envrecord, joboptions, schedulers
from scalestudy.site import preflight as pf
from scalestudy.site.plan import make_plan
from scalestudy.site.render import job_request
from scalestudy.site.schedulers import Scheduler
from scalestudy.site.schedulers.slurm import Slurm

NEW = "job: {account: A, slurm: {qos: debug, constraint: gpu, partition: [p1, p2]}}\n"
OLD = "job: {account: A, qos: debug, constraint: gpu, partition: [p1, p2]}\n"


def plan_of(tmp_path: Path, job: str, system: str = "perlmutter", name: str = "s.yaml"):  # type: ignore[no-untyped-def]
    spec = tmp_path / name
    spec.write_text(f"name: o\nsystem: {system}\ngrid: {{nodes: [1, 2]}}\n{job}")
    return make_plan(spec, tmp_path / "results")


def directives(plan) -> list[str]:  # type: ignore[no-untyped-def]
    run = plan.runs[0]
    return plan.scheduler.directives(job_request(plan.study, plan.system, run,
                                                 plan.run_dir(run)))


def test_the_new_and_the_old_form_ask_the_same_and_the_old_one_is_noted_once(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    new = plan_of(tmp_path, NEW, name="new.yaml")
    assert capsys.readouterr().err == ""
    old = plan_of(tmp_path, OLD, name="old.yaml")
    plan_of(tmp_path, OLD, name="old.yaml")
    noted = capsys.readouterr().err.splitlines()
    assert noted == [f"note: {tmp_path / 'old.yaml'}:4: job.partition is now "
                     "job.slurm.partition; job.qos is now job.slurm.qos; job.constraint is "
                     "now job.slurm.constraint; the old form is still read"]
    assert directives(new) == directives(old)
    assert [r.run_id for r in new.runs] == [r.run_id for r in old.runs]  # results found
    assert {"#SBATCH -q debug", "#SBATCH -C gpu", "#SBATCH -p p1"} <= set(directives(new))
    slurm = new.scheduler
    assert joboptions.label(new.study, slurm, "qos") == "job.slurm.qos"
    assert joboptions.label(old.study, slurm, "qos") == "job.qos"
    assert joboptions.where(new.study, slurm, "qos") == f"{tmp_path / 'new.yaml'}:4: job.slurm.qos"


def test_a_profile_default_sits_below_the_spec(tmp_path: Path) -> None:
    plan = plan_of(tmp_path, "job: {account: A}\n")  # perlmutter's profile: constraint gpu
    assert "#SBATCH -C gpu" in directives(plan)
    plan = plan_of(tmp_path, "job: {account: A, slurm: {constraint: cpu}}\n")
    assert "#SBATCH -C cpu" in directives(plan) and "#SBATCH -C gpu" not in directives(plan)


def test_one_study_carries_the_sections_of_several_schedulers(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    job = "job: {account: A, slurm: {qos: debug}, pbs: {queue: prod, filesystems: 'home:eagle'}}\n"
    on_slurm, on_pbs = plan_of(tmp_path, job), plan_of(tmp_path, job, system="polaris")
    # each system's plan says once which section its runs do not read
    assert capsys.readouterr().err.splitlines() == [
        f"note: {tmp_path / 's.yaml'}:4: job.pbs not used: system 'perlmutter' uses slurm "
        "(its options go under job.slurm)",
        f"note: {tmp_path / 's.yaml'}:4: job.slurm not used: system 'polaris' uses pbs "
        "(its options go under job.pbs)"]
    assert "#SBATCH -q debug" in directives(on_slurm)
    assert not any("filesystems" in line for line in directives(on_slurm))
    assert {"#PBS -q prod", "#PBS -l filesystems=home:eagle"} <= set(directives(on_pbs))


@pytest.mark.parametrize(("job", "said"), [
    ("job: {slurn: {qos: x}}\n",
     "4: job.slurn: not a key of job nor a registered scheduler (did you mean `slurm`?); "
     "registered schedulers: flux, local, pbs, slurm"),
    ("job: {slurm: {qso: x}}\n", "4: job.slurm.qso: unknown key (did you mean `qos`?)"),
    ("job: {pbs: {queue: 'a b'}}\n", "4: job.pbs.queue"),  # checked, though not the system's
    ("job: {qos: a, slurm: {qos: b}}\n",
     "4: job.slurm.qos: job.qos gives it too (the old form): remove job.qos"),
    ("job: {filesystems: 'home:eagle'}\n",
     "4: job.filesystems: system 'perlmutter' uses slurm, which has no filesystems; "
     "filesystems is a pbs option: remove it"),
])
def test_what_a_wrong_option_says(tmp_path: Path, job: str, said: str) -> None:
    with pytest.raises(SpecError) as caught:
        plan_of(tmp_path, job)
    assert f"{tmp_path / 's.yaml'}:{said}" in str(caught.value)


def test_a_spec_keeps_its_sections_raw_until_a_system_is_known() -> None:
    study = parse_study("name: o\njob: {slurm: {qos: high}, nosuch: {x: 1}}\n")
    assert study.job.sections == {"slurm": {"qos": "high"}, "nosuch": {"x": 1}}
    dumped = study.job.model_dump()  # as a spec writes it, and read back the same
    assert dumped["slurm"] == {"qos": "high"} and "sections" not in dumped
    assert type(study.job).model_validate(dumped) == study.job
    with pytest.raises(SpecError, match=r"job\.acount: unknown key"):
        parse_study("name: o\njob: {acount: A}\n")


class _Registered:
    """A scheduler class in the registry while a test runs."""

    def __init__(self, cls: type[Scheduler]) -> None:
        self.cls = cls

    def __enter__(self) -> type[Scheduler]:
        schedulers.names()  # the built-ins first
        schedulers._REGISTRY[self.cls.name] = self.cls
        return self.cls

    def __exit__(self, *exc: object) -> None:
        del schedulers._REGISTRY[self.cls.name]


@pytest.fixture
def myq() -> Iterator[type[Scheduler]]:
    """A scheduler of a plugin's: Slurm's commands under another name and wording."""
    cls = type("MyQ", (Slurm,), {
        "name": "myq", "in_job": dataclasses.replace(Slurm.in_job, env_prefixes=("MYQ_",)),
        "accounts": schedulers.Accounts("myq accounts --mine", "MyQ holds such jobs for ever")})
    with _Registered(cls) as registered:
        yield registered


def test_preflight_words_the_account_check_as_its_scheduler_does(
        tmp_path: Path, myq: type[Scheduler]) -> None:
    (tmp_path / "myq.yaml").write_text("name: myq\nscheduler: myq\nlauncher: srun\n"
                                       "max_nodes: 4\n")
    plan = plan_of(tmp_path, "job: {account: nope, myq: {qos: high}}\n", system="myq.yaml")
    found = pf.check(plan, pf.Facts(user="u", host="h", accounts={"proj": {""}}))
    assert [p.text for p in found.problems if "account" in p.text] == [
        f"{tmp_path / 's.yaml'}:4: job.account: account nope is not one that user u may "
        "charge (myq accounts --mine lists: proj): set job.account to one of them, or ask "
        "your centre to add u to nope; MyQ holds such jobs for ever"]


def test_env_txt_records_the_prefixes_of_every_registered_scheduler(
        myq: type[Scheduler]) -> None:
    prefixes = envrecord.prefixes()
    assert {"SLURM_", "PBS_", "FLUX_", "MYQ_"} <= set(prefixes)
    assert prefixes.index("MYQ_") < prefixes.index("APPTAINER_")
    assert "MYQ_*" in envrecord.case_pattern()
    assert "MYQ_*" not in envrecord._case_pattern((), ())  # from the registry, not a list
