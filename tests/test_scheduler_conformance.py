"""What every registered scheduler must do, whoever wrote it: one set of checks, run over
`schedulers.classes()` (the built-ins, and every plugin installed in the environment).

The checks follow what the `Scheduler` base class promises its callers: a name it is
found by, a template that renders a job for one and for two nodes, argv that are lists
of words with the script last, parsers that read the scheduler's own answers, answer
an empty reply and refuse a failed one. The slow test installs plugins/scalestudy-lsf
with pip into a folder of its own and runs these checks, and the plugin's own tests,
against that installed copy.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest

from scalestudy.core.errors import ScalestudyError, SubmitError
from scalestudy.core.grid import expand
from scalestudy.core.load import parse_study
from scalestudy.core.spec import Job
from scalestudy.site import launchers, schedulers
from scalestudy.site.profiles import SystemProfile
from scalestudy.site.render import job_request, render
from scalestudy.site.schedulers import Scheduler
from tests.conftest import ROOT

CLASSES = schedulers.classes()
QUEUED = [cls for cls in CLASSES if cls.queued]
PLUGIN = ROOT / "plugins" / "scalestudy-lsf"
BUILT_IN = {"schedulers": {"flux", "local", "pbs", "slurm"},
            "launchers": {"flux", "mpiexec", "mpirun", "srun"}}
# What each queued scheduler's submit command prints when it queued a job, in the form
# its parse_submit documents (the LSF plugin's: its README).
SUBMITTED = {"slurm": "12345\n", "pbs": "1234.pbs-server\n", "flux": "f2A9hZ4Tb\n",
             "lsf": "Job <4242> is submitted to queue <pbatch>.\n"}


def _ids(cls: type[Scheduler]) -> str:
    return cls.name


def _launcher(cls: type[Scheduler]) -> str:
    """mpirun where the scheduler's jobs start ranks with it, else the first it names."""
    usable = cls.launchers
    return "mpirun" if usable is None or "mpirun" in usable else sorted(usable)[0]


def _scripts(cls: type[Scheduler], tmp_path: Path) -> list[tuple[Path, str, list[str]]]:
    """The job scripts of a 1-node and a 2-node run on a profile for this scheduler, with
    each run's directive lines; mpirun starts the ranks where the scheduler's jobs can
    start them with it, else the first starter it names."""
    system = SystemProfile.model_validate({
        "name": f"conform-{cls.name}", "scheduler": cls.name, "launcher": _launcher(cls),
        "gpus_per_node": 4, "cores_per_node": 16, "max_nodes": 2})
    study = parse_study(f"name: conform\nsystem: conform-{cls.name}\n"
                        "grid: {nodes: [1, 2], ranks_per_node: [2]}\n"
                        "job: {account: proj, walltime: '00:10:00'}\n",
                        str(tmp_path / "conform.yaml"))
    made = []
    for run in expand(study):
        run_dir = tmp_path / "runs" / run.run_id
        run_dir.mkdir(parents=True)
        path = run_dir / "job.sh"
        path.write_text(render(study, system, run, run_dir, python="python3"))
        lines = (schedulers.get(cls.name).directives(job_request(study, system, run, run_dir))
                 if cls.queued else [])
        made.append((path, path.read_text(), lines))
    return made


@pytest.mark.parametrize("cls", CLASSES, ids=_ids)
def test_a_scheduler_is_found_by_its_name_and_says_what_it_can(cls: type[Scheduler]) -> None:
    assert cls.name and isinstance(schedulers.get(cls.name), cls)
    assert cls.template, "a job template: a file in templates/ or template_source"
    options = cls.options  # the spec's job.<name>: section
    assert issubclass(options, schedulers.Options) and options.model_config.get("strict")
    assert options.model_config.get("extra") == "forbid", "a misspelt key is an error"
    assert all(f.description for f in options.model_fields.values()), "each says what it asks"
    assert cls.name not in Job.model_fields, "its section cannot hide a key of job:"
    assert cls.queue_key is None or cls.queue_key in options.model_fields
    needed = schedulers.get(cls.name).needed_commands()
    assert bool(needed) == cls.queued, "preflight looks for the commands of a queue"


@pytest.mark.parametrize("cls", CLASSES, ids=_ids)
def test_its_capabilities_are_the_records_callers_read(cls: type[Scheduler]) -> None:
    """Each capability is its record (optional ones None), each field of the type that
    record says: the regexes compile, the names are names, the argv words."""
    assert isinstance(cls.logs, schedulers.JobLogs) and cls.logs.name
    assert "/" not in cls.logs.name and isinstance(cls.logs.joins_output, bool)
    assert all(isinstance(k, schedulers.Failure) for k in cls.logs.patterns)
    assert isinstance(cls.retry, schedulers.Retry)
    for pattern in (cls.retry.transient, cls.retry.not_queued, cls.retry.number_taken,
                    cls.logs.noise, *cls.logs.patterns.values(),
                    cls.packing.allocation_gone if cls.packing else ""):
        assert isinstance(pattern, str)
        re.compile(pattern)
    in_job = cls.in_job
    assert isinstance(in_job, schedulers.InJob) and isinstance(in_job.env_prefixes, tuple)
    assert all(re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", p) for p in in_job.env_prefixes)
    assert in_job.job_id_variable is None or re.fullmatch(r"[A-Za-z_]\w*",
                                                          in_job.job_id_variable)
    assert all(v is None or (isinstance(v, str) and v.strip())
               for v in (in_job.hostfile, in_job.nodes_command))
    # accounts: a record exactly where preflight has a list to ask
    if schedulers.get(cls.name).accounts_argv("u") is None:
        assert cls.accounts is None, "no list to ask: preflight does not check accounts"
    else:
        assert isinstance(cls.accounts, schedulers.Accounts)
        assert cls.accounts.source, "preflight names the command that lists the accounts"
        assert cls.accounts.unknown
    assert cls.exclusion is None or isinstance(cls.exclusion, schedulers.Exclusion)
    argv = cls.exclusion.hosts_argv if cls.exclusion else None
    assert argv is None or (isinstance(argv, tuple) and argv
                            and all(isinstance(w, str) and w for w in argv))
    assert cls.packing is None or isinstance(cls.packing, schedulers.Packing)
    # the starters its jobs start ranks with are registered ones (None: any)
    assert cls.launchers is None or (isinstance(cls.launchers, frozenset) and cls.launchers
                                     and cls.launchers <= set(launchers.starters()))


@pytest.mark.parametrize("cls", CLASSES, ids=_ids)
def test_its_template_renders_a_job_of_one_and_of_two_nodes(
        cls: type[Scheduler], tmp_path: Path) -> None:
    scripts = _scripts(cls, tmp_path)
    for _, text, lines in scripts:
        assert subprocess.run(["bash", "-n"], input=text, text=True).returncode == 0
        assert all(line.startswith(cls.prefix) and line in text for line in lines)
        if cls.in_job.job_id_variable:  # the script's rendezvous port: from the job's id
            assert cls.in_job.job_id_variable in text
    if cls.queued:
        assert scripts[0][2] != scripts[1][2], "the directives ask for the nodes"


@pytest.mark.parametrize("cls", CLASSES, ids=_ids)
def test_what_it_offers_a_packed_allocation_renders_one(cls: type[Scheduler],
                                                        tmp_path: Path) -> None:
    """`packing`: None (`run --pack` is refused in one line), or the node file, and an
    allocation script of its 1- and 2-node runs that bash reads."""
    from scalestudy.execute.packing.plan import pack
    from scalestudy.execute.packing.scripts import can_pack, render_allocation

    scheduler = schedulers.get(cls.name)
    if cls.packing is None or not cls.queued:
        with pytest.raises(ScalestudyError, match="cannot run steps here"):
            can_pack(scheduler)
        return
    assert isinstance(cls.packing, schedulers.Packing) and cls.packing.nodes_command
    assert not (cls.packing.job_is_flux_instance and cls.packing.starts_flux)
    system = SystemProfile.model_validate({
        "name": f"conform-{cls.name}", "scheduler": cls.name, "launcher": _launcher(cls),
        "gpus_per_node": 4, "cores_per_node": 16, "max_nodes": 2})
    study = parse_study(f"name: conform\nsystem: conform-{cls.name}\n"
                        "grid: {nodes: [1, 2], ranks_per_node: [2]}\n"
                        "job: {account: proj, walltime: '00:10:00', pack: true}\n",
                        str(tmp_path / "conform.yaml"))
    (allocation,) = pack(expand(study), lambda run: 60.0, 600)
    text = render_allocation(study, system, allocation, "a1", tmp_path / "a1", "python3")
    assert subprocess.run(["bash", "-n"], input=text, text=True).returncode == 0
    assert cls.packing.nodes_command in text and "scalestudy.execute.allocation" in text


@pytest.mark.parametrize("cls", QUEUED, ids=_ids)
def test_its_commands_are_lists_of_words(cls: type[Scheduler], tmp_path: Path) -> None:
    sched = schedulers.get(cls.name)
    script = str(_scripts(cls, tmp_path)[0][0])
    for extra in (None, ["--from-the-profile"]):
        argv = sched.submit_argv(script, extra)
        # execute.commands puts one job's own options just before the script
        assert argv[-1] == script and argv[0] in sched.needed_commands()
        assert extra is None or extra[0] in argv
    argvs = [sched.submit_argv(script), *sched.query_argvs(["1", "2"]),
             sched.cancel_argv(["1"]), *sched.find_argvs(["conform-a"])]
    assert sched.query_argvs(["1"])
    assert all(argv and all(isinstance(w, str) for w in argv) for argv in argvs)


@pytest.mark.parametrize("cls", QUEUED, ids=_ids)
def test_its_parsers_read_its_answers_and_refuse_a_failure(
        cls: type[Scheduler]) -> None:
    sched = schedulers.get(cls.name)
    for argv in sched.query_argvs(["1"]):
        assert sched.parse_states(argv, 0, "", "") == {}
        with pytest.raises(SubmitError):
            sched.parse_states(argv, 1, "", "error: the scheduler is on fire")
    with pytest.raises(SubmitError):
        sched.parse_submit(1, "", "error: the scheduler is on fire")
    assert sched.cancel_failed(0, "", "") is None
    assert sched.cancel_failed(1, "", "error: the scheduler is on fire")
    for argv in sched.find_argvs(["conform-a"]):
        assert sched.parse_found(argv, "") == {}
    if cls.name not in SUBMITTED:
        pytest.skip(f"no answer of {cls.name}'s submit command here: add one to SUBMITTED")
    job_id = sched.parse_submit(0, SUBMITTED[cls.name], "")
    assert job_id and job_id == job_id.strip() and sched.short_id(job_id)


def test_the_built_ins_are_named_in_the_entry_point_groups() -> None:
    """What pyproject.toml names, as the installed metadata says it (an editable install
    of this checkout: CI's; another checkout's metadata says nothing of this one)."""
    try:
        dist = metadata.distribution("scalestudy")
    except metadata.PackageNotFoundError:
        pytest.skip("scalestudy is not installed (run from its source tree): no metadata")
    url = json.loads(dist.read_text("direct_url.json") or "{}").get("url", "")
    if Path(unquote(urlparse(url).path)).resolve() != ROOT.resolve():
        pytest.skip(f"the scalestudy installed here is another checkout's ({url})")
    for group, names in BUILT_IN.items():
        listed = {p.name for p in dist.entry_points if p.group == f"scalestudy.{group}"}
        assert names <= listed, f"reinstall (pip install -e .): {group} lists {listed}"


@pytest.mark.parametrize("module", [schedulers, launchers], ids=["scheduler", "launcher"])
def test_a_plugin_that_does_not_load_is_one_error_naming_its_package(
        module: object, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    info = tmp_path / "broken_plugin-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-plugin\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(
        f"[{module.GROUP}]\nbroken = broken_plugin_module:Thing\n")  # type: ignore[attr-defined]
    (tmp_path / "broken_plugin_module.py").write_text("raise ImportError('no torch here')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(module, "_LOADED", [])
    if module is schedulers:
        monkeypatch.setattr(schedulers, "_REGISTRY", dict(schedulers._REGISTRY))
    else:
        monkeypatch.setattr(launchers, "_PLUGINS", {})
    with pytest.raises(ScalestudyError, match=r"plugin 'broken' .*package broken-plugin.* "
                                              r"ImportError: no torch here; fix or uninstall"):
        module.names()  # type: ignore[attr-defined]


def test_no_word_of_the_lsf_plugin_inside_the_package() -> None:
    """The fifth scheduler touches no file of scalestudy (nor its shipped templates)."""
    word = re.compile(r"\b(?:lsf|jsrun|bsub|bjobs|bkill)\b", re.I)
    found = [f"{path.relative_to(ROOT)}:{n}" for folder in ("scalestudy", "templates")
             for path in sorted((ROOT / folder).rglob("*")) if path.is_file()
             and path.suffix in (".py", ".j2", ".yaml", ".md", ".json")
             for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
             if word.search(line)]
    assert found == []


@pytest.mark.slow
def test_the_plugin_installs_with_pip_and_passes_the_same_tests(tmp_path: Path) -> None:
    """`pip install` of plugins/scalestudy-lsf (a copy: no build files in the checkout)
    into a folder of its own; a fresh interpreter lists its entry points, and pytest
    runs this module's checks and the plugin's tests against the installed copy."""
    source, target = tmp_path / "src", tmp_path / "site"
    shutil.copytree(PLUGIN, source, ignore=shutil.ignore_patterns(
        "tests", "build", "__pycache__", "*.egg-info"))
    done = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps",
                           "--no-build-isolation", "--target", str(target), str(source)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    env = {**os.environ, "PYTHONPATH": os.pathsep.join((str(target), str(ROOT)))}
    listed = subprocess.run(
        [sys.executable, "-c", "import json, scalestudy_lsf; from importlib.metadata import "
         "entry_points as e; print(json.dumps([scalestudy_lsf.__file__, "
         "[p.name for p in e(group='scalestudy.schedulers')], "
         "[p.name for p in e(group='scalestudy.launchers')]]))"],
        capture_output=True, text=True, env=env, timeout=120)
    where, scheduler_names, launcher_names = json.loads(listed.stdout)
    assert where.startswith(str(target)) and "lsf" in scheduler_names
    assert "jsrun" in launcher_names
    tests = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-m", "not slow",
         "-rA", __file__, str(PLUGIN / "tests")],
        capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
    assert tests.returncode == 0, tests.stdout[-3000:]
    assert "PASSED tests/test_scheduler_conformance.py::test_its_parsers_read_its_answers_" \
           "and_refuse_a_failure[lsf]" in tests.stdout
