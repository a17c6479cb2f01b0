"""No secret reaches the disk: a study run with tokens and a store password in its
environment leaves none of them anywhere under results/ (env.txt is an allowlist with
redaction, scalestudy.site.envrecord)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import run_cli

SPEC = r"""
name: secrets
workload:
  kind: command
  command: [bash, -c, 'echo "Total img/sec on {world_size} GPU(s): 12.5 +-0.5"']
grid: {ranks_per_node: [1, 2]}
job: {walltime: "00:01:00", record_env: [DATABASE_URL, HF_TOKEN, MY_*]}
"""
SECRETS = {"HF_TOKEN": "hf_FAKEtoken0123456789", "WANDB_API_KEY": "wandbFAKEkey42",
           "AWS_SECRET_ACCESS_KEY": "awsFAKEsecret/xyz", "MY_PASSWORD": "myFAKEpass",
           "DATABASE_URL": "postgresql://bob:dbFAKEpass@db.example/x"}


def leaked(results: Path, secrets: list[str]) -> list[str]:
    """Every file under `results` that holds one of `secrets`, with which."""
    found = []
    for path in results.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            found += [f"{path}: {s}" for s in secrets if s.encode() in data]
    return found


def run_with_secrets(tmp_path: Path, write_spec, store: str | None = None) -> Path:
    spec = str(write_spec(SPEC))
    env = dict(SECRETS) | ({"SCALESTUDY_STORE": store} if store else {})
    done = run_cli("run", spec, cwd=tmp_path, env_extra=env)
    assert done.returncode == 0, done.stderr
    assert "2 run(s) completed" in done.stderr
    again = run_cli("run", spec, "--rerun", "all", cwd=tmp_path, env_extra=env)
    assert again.returncode == 0, again.stderr
    results = tmp_path / "results" / "secrets"
    [env_txt, *_] = sorted(results.glob("runs/*/env.txt"))
    recorded = env_txt.read_text()
    assert "DATABASE_URL=postgresql://bob:***@db.example/x" in recorded
    assert "HF_TOKEN=<redacted>" in recorded and "MY_PASSWORD=<redacted>" in recorded
    assert list(results.glob("runs/*/attempts/*/env.txt"))  # the earlier attempts too
    return results


@pytest.mark.slow
def test_tokens_never_reach_the_results(tmp_path: Path, write_spec) -> None:
    results = run_with_secrets(tmp_path, write_spec)
    assert leaked(results, [*SECRETS.values(), "dbFAKEpass"]) == []


@pytest.mark.slow
@pytest.mark.postgres
def test_a_store_password_never_reaches_the_results(tmp_path: Path, write_spec,
                                                     postgres_url: str) -> None:
    scheme, rest = postgres_url.split("://", 1)
    user, _, host = rest.partition("@")
    store = f"{scheme}://{user.split(':')[0]}:pgFAKEpassword@{host}"  # trust: any password
    results = run_with_secrets(tmp_path, write_spec, store)
    assert "SCALESTUDY_STORE=" in (next(results.glob("runs/*/env.txt")).read_text())
    assert leaked(results, ["pgFAKEpassword", *SECRETS.values()]) == []
