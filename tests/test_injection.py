"""No value from a spec can run a command: hostile strings rendered for every system
profile, checked with `bash -n`, for smuggled directives, and run under recording
launcher stubs (hypothesis). Study names cannot leave results/."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, assume, given, settings
from hypothesis import strategies as st

from scalestudy.core.errors import ScalestudyError, SpecError
from scalestudy.core.grid import expand
from scalestudy.core.load import parse_study
from scalestudy.site.plan import Plan
from scalestudy.site.profiles import available, load_system
from scalestudy.site.render import context, render

PROFILES = available()
FRAGMENTS = [
    "$(touch pwned)", "`touch pwned`", "; touch pwned", "\ntouch pwned\n", "'", '"', "\\",
    "\n#SBATCH --wrap=touch_pwned", "\n#PBS -l select=999", "$HOME", "${IFS}",
    "&& touch pwned", "| touch pwned", "\r", "\t", "*", "~", "!!", "%s", " ", "\x1b[31m",
    "$'\\n'", "\n", "#", "-", "--",
]
# Environment variables and argv items cannot hold NUL (tested apart); the rest goes.
TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00{}"),
               max_size=6)
HOSTILE = st.lists(st.one_of(st.sampled_from(FRAGMENTS), TEXT), min_size=1, max_size=4) \
    .map("".join).filter(lambda s: s.strip() != "")
# A directive is one line by the spec's rules (a newline is refused at load time).
ONE_LINE = HOSTILE.map(lambda s: s.replace("\n", " ").replace("\r", " "))

STUB = r"""#!/bin/bash
# Records how it was called: argv (NUL-separated) and the hostile variable; runs nothing.
{ printf '%s\0' "$(basename "$0")"; for a in "$@"; do printf '%s\0' "$a"; done; } \
    > "$STUB_OUT/argv.$$"
printf '%s' "${HOSTILE_VAR-}" > "$STUB_OUT/env.$$"
"""
# Site setup lines (module load ...) and tools a login node has: no-ops here.
BASH_ENV = "command_not_found_handle() { return 0; }\nmodule() { return 0; }\n"


def _study(profile: str, arg: str, env_value: str, directive: str, description: str) -> dict:
    system = load_system(profile)
    job: dict = {"walltime": "00:10:00", "account": "proj1"}
    if system.scheduler != "local":
        job["extra_directives"] = [directive]
    return {"name": "inj", "description": description, "system": profile,
            "workload": {"kind": "command", "command": ["./train", arg, "--flag", arg]},
            "tuning": {"evil": {"env": {"HOSTILE_VAR": env_value}}},
            "grid": {"tuning": ["evil"]}, "job": job}


def _directive_block(script: str) -> list[str]:
    """The lines a scheduler reads as directives: those before the first command."""
    lines = []
    for line in script.split("\n")[1:]:
        if line.strip() and not line.startswith("#"):
            break
        lines.append(line)
    return lines


def _run_with_stubs(script: Path, work: Path) -> list[list[str]]:
    stubs = work / "stubs"
    stubs.mkdir()
    for name in ("srun", "mpiexec", "mpirun", "torchrun", "aprun", "python-stub"):
        (stubs / name).write_text(STUB)
        (stubs / name).chmod(0o755)
    # `scontrol show hostnames` on a login node: one host here.
    (stubs / "scontrol").write_text("#!/bin/bash\necho n1\n")
    (stubs / "scontrol").chmod(0o755)
    # `flux` in a batch job: its hosts and id here, and `flux run` recorded like srun.
    (stubs / "flux").write_text(
        '#!/bin/bash\ncase $1 in hostlist) echo n1;; job) echo 7;; getattr) echo f7;;\n'
        '*) ' + STUB.split("\n", 1)[1].replace("\n", "\n    ") + ';;\nesac\n')
    (stubs / "flux").chmod(0o755)
    (work / "bash_env").write_text(BASH_ENV)
    (work / "nodefile").write_text("n1\n")
    out = work / "out"
    out.mkdir()
    env = {"PATH": f"{stubs}:/usr/bin:/bin", "STUB_OUT": str(out), "BASH_ENV": str(work /
           "bash_env"), "SCALESTUDY_MASTER_PORT": "1", "SLURM_JOB_ID": "7",
           "SLURM_JOB_NODELIST": "n1", "PBS_NODEFILE": str(work / "nodefile"),
           "PBS_JOBID": "7.pbs", "PBS_O_WORKDIR": str(script.parent), "HOME": str(work),
           "CRAY_LD_LIBRARY_PATH": "", "LD_LIBRARY_PATH": ""}
    done = subprocess.run(["bash", str(script)], cwd=script.parent, env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    calls = []
    for path in sorted(out.glob("argv.*")):
        pid = path.suffix
        argv = path.read_bytes().decode().split("\0")[:-1]
        calls.append([*argv, "ENV=" + (out / f"env{pid}").read_bytes().decode()])
    return calls


@pytest.mark.parametrize("profile", PROFILES)
@settings(max_examples=12, deadline=None, derandomize=True,
          phases=[Phase.explicit, Phase.reuse, Phase.generate],  # shrinking costs minutes
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(arg=HOSTILE, env_value=HOSTILE, directive=ONE_LINE, description=HOSTILE)
def test_hostile_values_stay_data_on_every_system(profile: str, arg: str, env_value: str,
                                                  directive: str, description: str) -> None:
    try:
        study = parse_study(json.dumps(_study(profile, arg, env_value, directive, description),
                                       ensure_ascii=False))
    except SpecError:
        assume(False)  # refused cleanly at load time: nothing rendered, nothing to inject
        return
    # The values as the loader read them (YAML folds some line breaks, e.g. U+2028).
    arg = study.workload.command[1]
    env_value = str(study.tuning["evil"].env["HOSTILE_VAR"])
    directive = study.job.extra_directives[0] if study.job.extra_directives else "#"
    system = load_system(profile)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        run = expand(study)[0]
        run_dir = work / "results" / "inj" / "runs" / run.run_id
        run_dir.mkdir(parents=True)
        stub_python = str(work / "stubs" / "python-stub")
        text = render(study, system, run, run_dir, python=stub_python)
        script = run_dir / "job.sh"
        script.write_text(text)
        assert subprocess.run(["bash", "-n", str(script)], capture_output=True).returncode == 0
        # Exactly the rendered directives, in the block the scheduler reads, and no
        # directive-looking line anywhere else (a value never starts a line).
        directives = context(study, system, run, run_dir, python=stub_python)["directives"]
        prefixes = ("#SBATCH", "#PBS", "# flux:")
        block = [ln for ln in _directive_block(text) if ln.startswith(prefixes)]
        assert block == directives
        assert sum(1 for ln in text.split("\n") if ln.lstrip().startswith(prefixes)) \
            == len(directives)
        if system.scheduler != "local":
            assert directives[-1] in (f"#SBATCH {directive}", f"#PBS {directive}",
                                      f"# flux: {directive}")
        calls = _run_with_stubs(script, work)
        assert not list(work.rglob("pwned")) and not list(work.rglob("touch_pwned"))
        program = [c for c in calls if arg in c]
        assert program, calls
        # Each value arrives as one argv item, unchanged, and the variable verbatim.
        last = program[-1]
        assert last[last.index("./train"):-1] == ["./train", arg, "--flag", arg]
        assert last[-1] == "ENV=" + env_value


def test_a_nul_byte_in_a_value_is_a_clean_error(tmp_path: Path) -> None:
    spec = _study("local", "a\x00b", "ok", "x", "d")
    try:
        study = parse_study(json.dumps(spec))
    except SpecError:
        return  # refused at load time
    run = expand(study)[0]
    with pytest.raises(ScalestudyError, match="NUL"):
        render(study, load_system("local"), run, tmp_path)


def test_a_lone_surrogate_is_a_clean_error(tmp_path: Path) -> None:
    # the loader refuses it with its place (workload.command[1]); render would too
    with pytest.raises(ScalestudyError, match=r"workload\.command\[1\]: .*lone surrogate"):
        study = parse_study('name: s\nworkload: {kind: command, command: [echo, "\\ud800"]}\n')
        render(study, load_system("local"), expand(study)[0], tmp_path)


@pytest.mark.parametrize("name", ["..", "../x", "a/../../b", "/etc", "a/b", ".hidden", "~",
                                  "a\nb", "a" * 65, ""])
def test_a_study_name_cannot_leave_results(name: str) -> None:
    with pytest.raises(SpecError, match="name"):
        parse_study(json.dumps({"name": name}))


@settings(max_examples=200, deadline=None)
@given(name=st.text(max_size=70))
def test_any_accepted_name_stays_under_results(name: str) -> None:
    try:
        study = parse_study(json.dumps({"name": name}))
    except SpecError:
        return
    results = Path("/srv/results")
    plan = Plan(study, load_system("local"), [], results)
    where = Path(os.path.normpath(plan.directory))
    assert where.parent == results and where.name == study.name
