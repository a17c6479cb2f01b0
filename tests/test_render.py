"""Rendered job scripts: valid bash, values quoted, hostile spec values inert."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from scalestudy.core.grid import Run, expand
from scalestudy.core.load import parse_study
from scalestudy.core.spec import Study
from scalestudy.site.profiles import load_system
from scalestudy.site.program import Program, program
from scalestudy.site.render import render

HOSTILE = ["$(touch pwned)", "`touch pwned`", "a; touch pwned", "x\ntouch pwned",
           "'; touch pwned; '", '"; touch pwned; "', "#SBATCH --wrap=touch", "$HOME $PATH"]


def script_for(spec: str, tmp_path: Path) -> str:
    study = parse_study(spec)
    run = expand(study)[0]
    return render(study, load_system(study.system), run, tmp_path / "runs" / run.run_id)


def test_local_script_is_valid_bash_and_states_the_run(tmp_path: Path) -> None:
    text = script_for("name: r\ngrid: {nodes: [2], ranks_per_node: [3], batch_size: [16]}\n",
                      tmp_path)
    assert subprocess.run(["bash", "-n"], input=text, text=True).returncode == 0
    assert "2 node(s) x 3 rank(s)/node = 6 rank(s)" in text
    assert "per-GPU batch 16, global batch 96" in text
    assert "--nnodes=2 --nproc-per-node=3" in text
    assert "--batch-size 16" in text


STUB = """#!/usr/bin/env bash
# A harmless stand-in for python: records its argv and one variable, runs nothing.
{ for a in "$@"; do printf '%s\\0' "$a"; done; } > "$STUB_OUT/argv.bin"
printf '%s' "${NCCL_DEBUG-}" > "$STUB_OUT/env.bin"
"""


def run_under_stub(spec: str, tmp_path: Path) -> tuple[list[str], str]:
    """Render the spec's first run with a recording stub as python, run the script."""
    stub = tmp_path / "stub-python"
    stub.write_text(STUB)
    stub.chmod(0o755)
    study = parse_study(spec)
    run = expand(study)[0]
    run_dir = tmp_path / "runs" / run.run_id
    run_dir.mkdir(parents=True)
    script = run_dir / "job.sh"
    script.write_text(render(study, load_system(study.system), run, run_dir, python=str(stub)))
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    env = {"PATH": "/usr/bin:/bin", "STUB_OUT": str(tmp_path), "SCALESTUDY_MASTER_PORT": "1"}
    done = subprocess.run(["bash", str(script)], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    argv = (tmp_path / "argv.bin").read_bytes().decode().split("\0")[:-1]
    return argv, (tmp_path / "env.bin").read_text()


@pytest.mark.parametrize("value", HOSTILE)
def test_hostile_env_values_stay_data(value: str, tmp_path: Path) -> None:
    spec = ("name: h\ngrid: {tuning: [evil]}\ntuning:\n  evil:\n    env:\n"
            f"      NCCL_DEBUG: {_yaml_str(value)}\n")
    _, seen = run_under_stub(spec, tmp_path)
    assert seen == value
    assert not list(tmp_path.rglob("pwned"))


@pytest.mark.parametrize("value", HOSTILE)
def test_hostile_command_arguments_reach_the_program_verbatim(value: str, tmp_path: Path) -> None:
    spec = f"name: c\nworkload:\n  kind: command\n  command: [./train, {_yaml_str(value)}]\n"
    argv, _ = run_under_stub(spec, tmp_path)
    assert argv[-2:] == ["./train", value]
    assert "--no-python" in argv
    assert not list(tmp_path.rglob("pwned"))


def test_synthetic_workload_is_launched_as_a_module_by_torchrun(tmp_path: Path) -> None:
    argv, _ = run_under_stub("name: s\ngrid: {nodes: [1], ranks_per_node: [2]}\n", tmp_path)
    assert argv[:2] == ["-m", "torch.distributed.run"]
    assert "--nproc-per-node=2" in argv
    module = argv.index("-m", 2)
    assert argv[module + 1] == "scalestudy.workload"


def test_command_placeholders_get_the_run_values(tmp_path: Path) -> None:
    study = parse_study("name: c\nscaling: strong\n"
                        "grid: {ranks_per_node: [2], global_batch: [64]}\n"
                        "workload: {kind: command, command: 'train --bs {batch_size} "
                        "--gbs {global_batch} --ws {world_size} --out {run_dir}/x'}\n")
    run = expand(study)[0]
    prog = program_of(study, run, tmp_path)
    assert not prog.bundled
    assert list(prog.args) == ["train", "--bs", "32", "--gbs", "64", "--ws", "2", "--out",
                               f"{tmp_path}/x"]


def program_of(study: Study, run: Run, run_dir: Path) -> Program:
    """The run's Program on its (CPU) system."""
    return program(study, load_system(study.system), run, run_dir, "python3")


def _yaml_str(value: str) -> str:
    import json

    return json.dumps(value)  # JSON strings are YAML strings


def test_a_spec_can_bring_its_own_templates(tmp_path: Path) -> None:
    mine = tmp_path / "my-templates"
    mine.mkdir()
    (mine / "local.sh.j2").write_text(
        '#!/bin/bash\n# site template for {{ run.run_id }}\n{% include "_environment.sh.j2" %}\n')
    spec = tmp_path / "study.yaml"
    spec.write_text("name: own\njob: {template_dir: my-templates}\n")
    from scalestudy.study import make_plan

    plan = make_plan(spec, tmp_path / "results")
    run = plan.runs[0]
    text = render(plan.study, plan.system, run, tmp_path / "r")
    assert text.startswith(f"#!/bin/bash\n# site template for {run.run_id}\n")
    assert "export OMP_NUM_THREADS=1" in text  # shipped partials fill the gaps


def test_a_template_error_names_the_template(tmp_path: Path) -> None:
    from scalestudy.core.errors import ScalestudyError
    from scalestudy.study import make_plan

    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "local.sh.j2").write_text("line one\n{{ no_such_variable }}\n")
    spec = tmp_path / "study.yaml"
    spec.write_text("name: own\njob: {template_dir: t}\n")
    plan = make_plan(spec, tmp_path / "results")
    with pytest.raises(ScalestudyError, match=r"local.sh.j2:2: job template error: "
                                              r"'no_such_variable' is undefined"):
        render(plan.study, plan.system, plan.runs[0], tmp_path / "r")


def test_options_and_the_lr_policy_reach_the_workload(tmp_path: Path) -> None:
    study = parse_study("""
name: o
grid: {backend: [ddp, horovod], nodes: [2]}
workload:
  model: small_cnn
  channels_last: true
  bucket_cap_mb: 50
  compression: fp16
  lr: {base: 0.1, reference_batch: 64, warmup_iters: 3}
""")
    ddp, hvd = expand(study)
    ddp_args = list(program_of(study, ddp, tmp_path).args)
    hvd_args = list(program_of(study, hvd, tmp_path).args)
    assert ddp_args and hvd_args
    assert "--channels-last" in ddp_args and "--channels-last" in hvd_args
    assert ddp_args[ddp_args.index("--bucket-cap-mb") + 1] == "50.0"
    assert "--compression" not in ddp_args and "--bucket-cap-mb" not in hvd_args
    assert hvd_args[hvd_args.index("--compression") + 1] == "fp16"
    # global batch 2 x 32 = 64 = the reference batch: lr = base
    assert ddp_args[ddp_args.index("--lr") + 1] == "0.1"
    assert ddp_args[ddp_args.index("--lr-warmup-iters") + 1] == "3"


def test_command_placeholders_include_lr_and_options(tmp_path: Path) -> None:
    study = parse_study("""
name: c
grid: {nodes: [4], batch_size: 32, precision: [bf16]}
workload:
  kind: command
  command: train --lr {lr} --warmup {lr_warmup_iters} --prec {precision} --gb {global_batch}
  lr: {base: 0.1, reference_batch: 256, scaling: linear}
""")
    (run,) = expand(study)
    argv = list(program_of(study, run, tmp_path).args)
    assert argv == ["train", "--lr", "0.05", "--warmup", "0", "--prec", "bf16", "--gb", "128"]


CWD_STUB = """#!/bin/bash
# A launcher (or python) that runs nothing: records where it was started and the run dir.
printf '%s\\n%s\\n' "$PWD" "${SCALESTUDY_RUN_DIR-unset}" > "$STUB_OUT/$(basename "$0").where"
"""


@pytest.mark.parametrize("system", ["local", "generic-slurm", "generic-pbs"])
def test_the_program_runs_in_the_spec_directory_on_every_system(system: str,
                                                                 tmp_path: Path) -> None:
    # The spec's directory holds the user's relative paths; its name is hostile.
    project = tmp_path / "my project $(touch pwned); 'x'"
    project.mkdir()
    spec = (f"name: w\nsystem: {system}\n"
            "workload: {kind: command, command: [./train.sh, '{run_dir}']}\n")
    study = parse_study(spec, project / "study.yaml")
    run = expand(study)[0]
    run_dir = tmp_path / "results" / "w" / "runs" / run.run_id
    run_dir.mkdir(parents=True)
    stubs, out = tmp_path / "stubs", tmp_path / "out"
    stubs.mkdir()
    out.mkdir()
    for name in ("python-stub", "srun", "mpiexec"):
        (stubs / name).write_text(CWD_STUB)
        (stubs / name).chmod(0o755)
    (stubs / "scontrol").write_text("#!/bin/bash\necho n1\n")
    (stubs / "scontrol").chmod(0o755)
    (tmp_path / "nodefile").write_text("n1\n")
    script = run_dir / "job.sh"
    script.write_text(render(study, load_system(system), run, run_dir,
                             python=str(stubs / "python-stub")))
    env = {"PATH": f"{stubs}:/usr/bin:/bin", "STUB_OUT": str(out), "SLURM_JOB_ID": "7",
           "SLURM_JOB_NODELIST": "n1", "PBS_NODEFILE": str(tmp_path / "nodefile"),
           "PBS_JOBID": "7.pbs", "SCALESTUDY_MASTER_PORT": "1", "HOME": str(tmp_path)}
    done = subprocess.run(["bash", str(script)], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=30)
    logged = run_dir / "stderr.log"  # PBS: the job writes its own logs
    assert done.returncode == 0, done.stderr + (logged.read_text() if logged.exists() else "")
    [where] = out.glob("*.where")  # the one launcher (torchrun's python, srun, mpiexec)
    assert where.read_text().splitlines() == [str(project), str(run_dir)]
    assert (run_dir / "env.txt").is_file() and (run_dir / "hosts.txt").is_file()
    assert not list(tmp_path.rglob("pwned"))
    assert list(project.iterdir()) == []  # the job's own files stay in the run directory


def test_the_spec_directory_falls_back_to_the_current_one(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    from scalestudy.site.render import workdir

    monkeypatch.chdir(tmp_path)
    study = parse_study("name: w\n")  # no file: "<study>"
    assert workdir(study) == tmp_path.resolve()
    assert workdir(parse_study("name: w\n", "/srv/a/b/study.yaml")) == Path("/srv/a/b")


def test_mpirun_passes_the_run_directory_to_every_rank(tmp_path: Path) -> None:
    from scalestudy.site.render import context

    study = parse_study("name: m\nsystem: generic-slurm\n", tmp_path / "study.yaml")
    system = load_system("generic-slurm").model_copy(update={"launcher": "mpirun"})
    words = context(study, system, expand(study)[0], tmp_path / "r")["launch"]
    assert " -x SCALESTUDY_RUN_DIR " in " ".join(words)


@pytest.mark.parametrize("system", ["local", "generic-slurm", "generic-pbs"])
def test_repeats_made_by_swapping_ids_are_the_scripts_a_render_gives(system: str) -> None:
    from scalestudy.site import render as render_module

    plain = parse_study(f"name: rep\nsystem: {system}\n"
                        "grid: {nodes: [1, 2], batch_size: [8, 16]}\nrepeats: 4\n")
    # a command that uses its repeat: the swap cannot make its scripts
    seeded = parse_study(
        f"name: rep2\nsystem: {system}\ngrid: {{nodes: [1]}}\nrepeats: 3\n"
        "workload: {kind: command, command: [./train.sh, '--seed={repeat}', '{run_id}']}\n")
    profile = load_system(system)
    for study in (plain, seeded):
        for run in expand(study):
            run_dir = Path("/r/runs") / run.run_id
            assert render(study, profile, run, run_dir) == render_module._render(
                study, profile, run, run_dir)
    points = render_module._points(plain, profile).values()
    assert len(points) == 4 and all(p.swaps for p in points)  # proven, then used
    assert not any(p.swaps for p in render_module._points(seeded, profile).values())


def test_each_packed_mpirun_step_has_an_open_mpi_session_base_of_its_own(
        tmp_path: Path) -> None:
    # steps share the allocation's first node and its $TMPDIR: one step's mpirun removing
    # its emptied session directory raced another's creating it ("File exists")
    study = parse_study("name: p\nsystem: generic-pbs\ngrid: {nodes: [1, 2]}\n",
                        tmp_path / "study.yaml")
    profile = load_system("generic-pbs")
    bases = []
    for run in expand(study):
        text = render(study, profile, run, tmp_path / run.run_id, step=True)
        lines = [line for line in text.splitlines()
                 if line.startswith(("export OMPI_MCA_orte_tmpdir_base=",
                                     "export PRTE_MCA_prte_tmpdir_base="))]
        assert len(lines) == 2
        shown = subprocess.run(
            ["bash", "-c", "\n".join(lines) + '\necho "$OMPI_MCA_orte_tmpdir_base '
             '$PRTE_MCA_prte_tmpdir_base"'], env={"TMPDIR": "/var/tmp/pbs.7"},
            capture_output=True, text=True, check=True).stdout.split()
        assert shown == [f"/var/tmp/pbs.7/ss-{run.run_id}"] * 2
        assert 'rm -rf "$OMPI_MCA_orte_tmpdir_base"' in text
        bases.append(shown[0])
        assert "ss-" not in render(study, profile, run, tmp_path / run.run_id)  # one job
    assert len(set(bases)) == 2
