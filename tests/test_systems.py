"""Site profiles: every shipped profile loads and is self-consistent; user profiles load
by path; mistakes in a profile are one clean error. Also checks tests/data/conventions.yaml,
the per-site rules that rendered job scripts are held to.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from urllib.parse import urlparse

import pytest
import yaml

from scalestudy.core.errors import SpecError
from scalestudy.site.joboptions import profile_defaults as own
from scalestudy.site.profiles import SystemProfile, available, load_system, unused_keys
from tests.conftest import ROOT, run_cli

SHIPPED = ["aurora", "el-capitan", "frontier", "generic-flux", "generic-pbs", "generic-slurm",
           "juwels-booster", "local", "perlmutter", "polaris"]
CLUSTERS = [name for name in SHIPPED if name != "local"]
CONVENTIONS = ROOT / "tests" / "data" / "conventions.yaml"
WALLTIME = re.compile(r"^(?:\d+-)?\d{1,3}:[0-5]\d:[0-5]\d$")


def is_https(url: str) -> bool:
    parts = urlparse(url)
    return parts.scheme == "https" and bool(parts.netloc)


@pytest.fixture(scope="module")
def conventions() -> dict:
    return yaml.safe_load(CONVENTIONS.read_text(encoding="utf-8"))


def test_available_lists_every_shipped_profile() -> None:
    names = available()
    assert names == sorted(names)
    assert set(SHIPPED) <= set(names)


@pytest.mark.parametrize("name", SHIPPED)
def test_profile_loads_and_names_its_sources(name: str) -> None:
    profile = load_system(name)
    assert isinstance(profile, SystemProfile)
    assert profile.name == name
    assert profile.description
    assert profile.docs, "a profile lists the pages its facts come from"
    assert all(is_https(url) for url in profile.docs), profile.docs
    assert len(set(profile.docs)) == len(profile.docs)


@pytest.mark.parametrize("name", SHIPPED)
def test_scheduler_and_launcher_agree(name: str) -> None:
    p = load_system(name)
    via = p.launcher_options.torchrun_via
    if p.scheduler == "pbs":
        assert p.launcher == "mpiexec" or (p.launcher == "torchrun" and via == "mpiexec")
    elif p.scheduler == "slurm":
        assert p.launcher in ("srun", "mpirun") or (p.launcher == "torchrun" and via == "srun")
    elif p.scheduler == "flux":
        assert p.launcher == "flux" or (p.launcher == "torchrun" and via == "flux")
    else:
        assert (p.scheduler, p.launcher) == ("local", "torchrun")


@pytest.mark.parametrize(("scheduler", "via"), [("slurm", None), ("flux", None),
                                                 ("slurm", "mpiexec")])
def test_mpiexec_without_a_host_file_is_refused_in_one_line(
        tmp_path: Path, scheduler: str, via: str | None) -> None:
    """MPICH's mpiexec on a Slurm cluster rendered `--hostfile "$PBS_NODEFILE"` and died
    at launch; a scheduler that writes no host file refuses it when the profile loads."""
    profile = yaml.safe_load((ROOT / "scalestudy" / "site" / "systems" /
                              f"generic-{scheduler}.yaml").read_text())
    profile.update(name="mine", launcher="torchrun" if via else "mpiexec")
    profile.setdefault("launcher_options", {})["torchrun_via"] = via
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump(profile))
    with pytest.raises(SpecError) as err:
        load_system(str(path))
    message = str(err.value)
    assert "\n" not in message and "mpiexec reads the job's host file" in message
    assert f"scheduler {scheduler} writes none" in message


@pytest.mark.parametrize(("scheduler", "launcher", "via", "usable"), [
    ("pbs", "srun", None, "mpiexec or mpirun"), ("flux", "srun", None, "flux"),
    ("slurm", "flux", None, "mpirun or srun"), ("pbs", "torchrun", "flux", "mpiexec or mpirun"),
])
def test_a_launcher_its_scheduler_does_not_start_is_refused_in_one_line(
        tmp_path: Path, scheduler: str, launcher: str, via: str | None, usable: str) -> None:
    """Each scheduler names the starters its jobs start ranks with (srun outside Slurm
    dies at launch); a profile naming another is refused as it loads."""
    profile = yaml.safe_load((ROOT / "scalestudy" / "site" / "systems" /
                              f"generic-{scheduler}.yaml").read_text())
    profile.update(name="mine", launcher=launcher)
    profile.setdefault("launcher_options", {})["torchrun_via"] = via
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump(profile))
    with pytest.raises(SpecError) as err:
        load_system(str(path))
    assert str(err.value) == (f"{path}: launcher {via or launcher} does not start ranks in "
                              f"scheduler {scheduler}'s jobs: use {usable}")


def test_validate_refuses_mpiexec_on_slurm_in_one_line(tmp_path: Path, write_spec) -> None:
    profile = yaml.safe_load((ROOT / "scalestudy" / "site" / "systems" /
                              "generic-slurm.yaml").read_text())
    profile.update(name="mpich", launcher="mpiexec")
    (tmp_path / "mpich.yaml").write_text(yaml.safe_dump(profile))
    spec = write_spec("name: s\nsystem: mpich.yaml\ngrid: {nodes: [1]}\n")
    done = run_cli("validate", str(spec), cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "mpiexec reads the job's host file" in lines[0], done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("name", CLUSTERS)
def test_cluster_profile_shape(name: str) -> None:
    p = load_system(name)
    assert p.gpus_per_node > 0, "every shipped cluster profile is a GPU system"
    assert p.max_nodes > 1
    assert p.gpu_binding, "say how a rank gets its GPU"
    if p.cores_per_node is not None:
        assert p.cores_per_node >= p.gpus_per_node
    s = p.scheduler_options
    if s.max_walltime is not None:
        assert WALLTIME.match(s.max_walltime), s.max_walltime
    # every key is the profile's own scheduler's (another's would load with a note)
    assert unused_keys(s, p.scheduler) == {}
    if p.scheduler == "pbs":
        assert own(p).gpus_directive == "none"
        assert p.launcher_options.gpu_bind is None and p.launcher_options.gpus_per_task is None
    else:
        assert p.launcher_options.depth is None


@pytest.mark.parametrize("name", SHIPPED)
def test_quoted_values_need_no_shell_expansion(name: str) -> None:
    # env values and launcher arguments are written shell-quoted: anything that needs
    # $VAR expanded belongs in `setup`.
    p = load_system(name)
    for value in [*p.env.values(), *p.launcher_options.extra_args]:
        assert "$" not in value and "`" not in value, f"{name}: {value!r}"


def test_alcf_mandatory_pbs_terms() -> None:
    for name in ("polaris", "aurora"):
        p = load_system(name)
        s, pbs = p.scheduler_options, own(p)
        assert s.account_required and pbs.filesystems and pbs.place == "scatter"
        assert s.max_walltime is not None
    assert own(load_system("polaris")).select_terms == {"system": "polaris"}


def test_aurora_cpu_list_fits_twelve_ranks_and_skips_reserved_cores() -> None:
    p = load_system("aurora")
    kind, _, spec = p.launcher_options.cpu_bind.partition(":")
    assert kind == "list"
    cores: list[set[int]] = []
    for entry in spec.split(":"):
        first, _, last = entry.partition("-")
        cores.append(set(range(int(first), int(last or first) + 1)))
    assert len(cores) == p.gpus_per_node == 12
    used = set().union(*cores)
    assert len(used) == sum(len(c) for c in cores), "no core in two ranks"
    assert not used & {0, 52, 104, 156}, "cores reserved for the system"
    assert all(max(c) < 52 for c in cores[:6]) and all(min(c) > 52 for c in cores[6:])


def test_slurm_site_directives() -> None:
    perlmutter = load_system("perlmutter")
    assert own(perlmutter).constraint == "gpu"
    juwels = load_system("juwels-booster")
    assert (juwels.scheduler_options.queue, own(juwels).gpus_directive,
            juwels.scheduler_options.account_required) == ("booster", "gres", True)
    frontier = load_system("frontier")
    assert frontier.scheduler_options.account_required
    assert (frontier.launcher_options.gpus_per_task,
            frontier.launcher_options.gpu_bind) == (1, "closest")


def test_generic_profiles_carry_no_site_terms() -> None:
    for name in ("generic-slurm", "generic-pbs"):
        p = load_system(name)
        s = p.scheduler_options
        assert not s.account_required and s.queue is None and not s.extra
        assert own(p).model_dump(exclude_defaults=True) == (
            {"place": "scatter:excl", "gpus_directive": "none"} if p.scheduler == "pbs" else {})
        assert not p.setup and not p.env
        assert p.max_nodes >= 1024


def test_cli_systems_lists_every_profile() -> None:
    done = run_cli("systems", cwd=ROOT)
    assert done.returncode == 0, done.stderr
    listed = {line.split()[0] for line in done.stdout.splitlines() if line.strip()}
    assert set(SHIPPED) <= listed
    for line in done.stdout.splitlines():
        name, scheduler, launcher = line.split()[:3]
        profile = load_system(name)
        assert (scheduler, launcher) == (profile.scheduler, profile.launcher)


def test_user_profile_loads_by_path(tmp_path: Path) -> None:
    path = tmp_path / "mysite.yaml"
    path.write_text(
        "name: mysite\n"
        "scheduler: slurm\n"
        "launcher: srun\n"
        "gpus_per_node: 8\n"
        "cores_per_node: 96\n"
        "max_nodes: 64\n"
        "docs: [https://example.org/userguide]\n"
        "scheduler_options: {queue: gpu, account_required: true, gpus_directive: gres}\n"
        "launcher_options: {gpus_per_task: 1, gpu_bind: closest}\n"
        "env: {NCCL_DEBUG: WARN}\n",
        encoding="utf-8",
    )
    profile = load_system(str(path))
    assert (profile.name, profile.gpus_per_node, profile.max_nodes) == ("mysite", 8, 64)
    assert own(profile).gpus_directive == "gres"
    assert profile.launcher_options.gpu_bind == "closest"
    assert profile.env == {"NCCL_DEBUG": "WARN"}


def test_missing_profile_file_is_a_spec_error(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="not found"):
        load_system(str(tmp_path / "nowhere.yaml"))


@pytest.mark.parametrize("text, key", [
    ("name: bad\nscheduler: slurm\nlauncher: srun\ngpus_per_nod: 4\n", "gpus_per_nod"),
    ("name: bad\nscheduler: pbs\nlauncher: mpiexec\nscheduler_options: {filesystem: home}\n",
     "filesystem"),
])
def test_unknown_key_is_one_clean_spec_error(tmp_path: Path, text: str, key: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(SpecError) as caught:
        load_system(str(path))
    message = str(caught.value)
    assert key in message and str(path) in message
    assert "Traceback" not in message and "pydantic" not in message.lower()


def test_a_schedulers_own_keys_are_checked_by_it(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    # A key of the profile's scheduler is checked by its model; one of another scheduler
    # loads (a profile moved from Slurm to Flux) with one note; one of none is refused.
    head = "name: s\nscheduler: flux\nlauncher: flux\nscheduler_options: "
    path = tmp_path / "moved.yaml"
    path.write_text(head + "{queue: batch, gpus_directive: gres, constraint: gpu}\n",
                    encoding="utf-8")
    profile = load_system(str(path))
    assert profile.scheduler_options.queue == "batch"
    note = capsys.readouterr().err.strip().splitlines()
    assert note == [
        f"note: {path}: scheduler_options.gpus_directive is not used by scheduler flux (it "
        "is pbs and slurm's): remove it",
        f"note: {path}: scheduler_options.constraint is not used by scheduler flux (it is "
        "slurm's): remove it"]
    for text, words in (
            ("{quue: batch}", ["scheduler_options", "quue", "did you mean `queue`?"]),
            ("{partition: batch}", ["partition", "`queue:`"]),
    ):
        path.write_text(head.replace("flux\nlauncher: flux", "slurm\nlauncher: srun") + text
                        + "\n", encoding="utf-8")
        with pytest.raises(SpecError) as caught:
            load_system(str(path))
        assert all(w in str(caught.value) for w in words), str(caught.value)
        assert len(str(caught.value).splitlines()) == 1
    path.write_text(head + "{qoss: high}\n", encoding="utf-8")  # another one's, misspelt
    with pytest.raises(SpecError, match=re.escape(
            "qoss: not a setting of scheduler flux nor of another one: did you mean `qos`?")):
        load_system(str(path))
    path.write_text("name: s\nscheduler: slurm\nlauncher: srun\nscheduler_options: "
                    "{gpus_directive: gpu, qos_names: [debug]}\n", encoding="utf-8")
    with pytest.raises(SpecError, match=r"scheduler_options.*gpus_directive.*gpus-per-node"):
        load_system(str(path))


def test_unknown_system_name_lists_the_valid_ones() -> None:
    with pytest.raises(SpecError) as caught:
        load_system("summit")
    assert all(name in str(caught.value) for name in SHIPPED)


# ---- tests/data/conventions.yaml ----------------------------------------------------------


def test_conventions_cover_every_cluster_profile(conventions: dict) -> None:
    assert set(conventions) == set(CLUSTERS)


@pytest.mark.parametrize("name", CLUSTERS)
def test_convention_entries_are_well_formed(conventions: dict, name: str) -> None:
    site = conventions[name]
    assert set(site) <= {"checks", "forbidden"} and site["checks"]
    for kind in ("checks", "forbidden"):
        for entry in site.get(kind, []):
            assert set(entry) == {"pattern", "source", "why"}, entry
            re.compile(entry["pattern"])
            assert is_https(entry["source"]), entry["source"]
            assert entry["why"].strip()


@pytest.mark.parametrize("name", CLUSTERS)
def test_convention_sources_are_pages_a_profile_cites(conventions: dict, name: str) -> None:
    # The rules come from the same pages as the profiles (the ALCF-wide PBS page and the
    # Slurm/PBS manuals serve several profiles).
    cited = {url for n in CLUSTERS for url in load_system(n).docs}
    site = conventions[name]
    for entry in site["checks"] + site.get("forbidden", []):
        assert entry["source"] in cited, entry["source"]


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))


def test_el_capitan_stops_a_multi_node_job_without_rocm() -> None:
    """Without ROCM_PATH, RCCL would talk TCP sockets between nodes: the job stops and
    says why; one node (no network between ranks) goes on."""
    import subprocess

    setup = "\n".join(load_system("el-capitan").setup) + "\necho reached\n"
    two = subprocess.run(["bash", "-euc", setup], env={"FLUX_JOB_NNODES": "2",
                                                        "PATH": "/usr/bin:/bin"},
                         capture_output=True, text=True, timeout=30)
    assert two.returncode == 1 and "ROCM_PATH is not set" in two.stderr
    assert "reached" not in two.stdout
    one = subprocess.run(["bash", "-euc", setup], env={"FLUX_JOB_NNODES": "1",
                                                        "PATH": "/usr/bin:/bin"},
                         capture_output=True, text=True, timeout=30)
    assert one.returncode == 0 and "reached" in one.stdout


def test_a_qos_named_as_a_partition_is_refused(tmp_path) -> None:
    from scalestudy.core.errors import SpecError
    from scalestudy.site.plan import make_plan

    spec = tmp_path / "f.yaml"
    spec.write_text("name: f\nsystem: frontier\njob: {account: A, partition: debug}\n")
    with pytest.raises(SpecError, match="debug is a QOS, not a partition: write `qos: debug`"):
        make_plan(spec, tmp_path)
    spec.write_text("name: f\nsystem: frontier\njob: {account: A, qos: debug}\n")
    assert make_plan(spec, tmp_path).runs
