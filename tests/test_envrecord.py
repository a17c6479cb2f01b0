"""env.txt records what shapes performance and never a secret: the job script's own
recorder (templates/_record_env.sh.j2, patterns from scalestudy.site.envrecord), run by bash."""

from __future__ import annotations

import stat
import subprocess
from pathlib import Path

import pytest

from scalestudy.site import envrecord
from scalestudy.site.render import environment

ENV = {
    "NCCL_ALGO": "Ring", "FI_CXI_RX_MATCH_MODE": "hybrid", "OMP_NUM_THREADS": "4",
    "SLURM_JOB_ID": "123", "PATH": "/usr/bin:/bin", "HOME": "/home/u", "USER": "u",
    "HF_TOKEN": "hf_abcdefSECRET", "WANDB_API_KEY": "wandbSECRET",
    "AWS_SECRET_ACCESS_KEY": "awsSECRET", "SSH_AUTH_SOCK": "/tmp/agentSECRET",
    "SCALESTUDY_STORE": "postgresql+psycopg://alice:pgSECRET@db.example:5432/perf",
    "NCCL_DEBUG_FILE": "line one\nline two",
}


def record(tmp_path: Path, env: dict[str, str], extra: tuple[str, ...] = ()) -> dict[str, str]:
    """Run the recorder under bash with exactly `env`; env.txt as a mapping."""
    script = environment().get_template("_record_env.sh.j2").render(
        record_env_pattern=envrecord.case_pattern(extra),
        secret_name_ere=envrecord.SECRET_NAME, redacted=envrecord.REDACTED,
        run_dir=str(tmp_path))
    done = subprocess.run(["/bin/bash", "-c", script], env=env, capture_output=True,
                          text=True, timeout=30)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    path = tmp_path / "env.txt"
    assert not path.stat().st_mode & stat.S_IROTH  # not world-readable
    lines = path.read_text().splitlines()
    assert lines == sorted(lines, key=lambda line: line.partition("=")[0])
    return dict(line.split("=", 1) for line in lines)


def test_only_the_allowlist_is_recorded(tmp_path: Path) -> None:
    got = record(tmp_path, ENV)
    assert {"NCCL_ALGO", "FI_CXI_RX_MATCH_MODE", "OMP_NUM_THREADS", "SLURM_JOB_ID", "PATH",
            "SCALESTUDY_STORE"} <= set(got)
    for dropped in ("HOME", "USER", "HF_TOKEN", "WANDB_API_KEY", "AWS_SECRET_ACCESS_KEY",
                    "SSH_AUTH_SOCK"):
        assert dropped not in got
    assert got["NCCL_DEBUG_FILE"] == "line one line two"  # one variable a line
    assert "SECRET" not in (tmp_path / "env.txt").read_text()


def test_a_url_keeps_everything_but_its_password(tmp_path: Path) -> None:
    got = record(tmp_path, {**ENV, "SCALESTUDY_MIRRORS":
                            "see https://u:p1@h/x and ftp://v:p2@g/y, https://h/z?a=b:c@d"})
    assert got["SCALESTUDY_STORE"] == "postgresql+psycopg://alice:***@db.example:5432/perf"
    assert got["SCALESTUDY_MIRRORS"] == \
        "see https://u:***@h/x and ftp://v:***@g/y, https://h/z?a=b:c@d"


def test_a_named_variable_is_recorded_unless_it_looks_secret(tmp_path: Path) -> None:
    extra = {"MY_SETTING": "7", "MY_API_KEY": "k", "HF_TOKEN": "t", "EXP_A": "1", "EXP_B": "2",
             "NCCL_IB_AUTH_TOKEN": "x", "hf_token": "lower"}
    got = record(tmp_path, {**ENV, **extra},
                 ("MY_SETTING", "MY_API_KEY", "HF_TOKEN", "EXP_*", "hf_token"))
    assert got["MY_SETTING"] == "7" and got["EXP_A"] == "1" and got["EXP_B"] == "2"
    assert got["MY_API_KEY"] == got["HF_TOKEN"] == got["hf_token"] == envrecord.REDACTED
    # an allowlisted prefix does not make a secret-looking name safe
    assert got["NCCL_IB_AUTH_TOKEN"] == envrecord.REDACTED


def test_a_named_pattern_that_is_not_a_name_is_refused() -> None:
    with pytest.raises(ValueError, match="not a variable name"):
        envrecord.case_pattern(["A) rm -rf ~;;"])
