"""`scalestudy dataset make`, and `validate`/`plan`/`run` refusing bad data before
anything is written (the real CLI in a fresh interpreter)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import run_cli
from tests.test_datasets import user_images, user_shard, user_tokens

CNN = "model: small_cnn\n  image_size: 8\n  num_classes: 10"
GPT = "model: gpt-tiny\n  seq_len: 16"


@pytest.mark.slow
def test_make_tokens_and_images(tmp_path: Path) -> None:
    done = run_cli("dataset", "make", "tokens", "data/tok", "--size", "20000", "--vocab", "32",
                   "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)
    assert got["vocab_size"] == 32 and got["n_tokens"]["train"] == 20000
    assert sorted(p.name for p in (tmp_path / "data" / "tok").iterdir()) == [
        "meta.json", "train.bin", "val.bin"]
    assert np.fromfile(tmp_path / "data" / "tok" / "train.bin", "<u2").size == 20000
    done = run_cli("dataset", "make", "images", "img", "--size", "12", "--shards", "3",
                   "--image-size", "16", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "12 train and 1 val images" in done.stdout
    assert len(list((tmp_path / "img").glob("train-*.tar"))) == 3
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_make_refuses_a_vocabulary_it_cannot_build(tmp_path: Path) -> None:
    done = run_cli("dataset", "make", "tokens", "t", "--vocab", "50000", cwd=tmp_path)
    assert done.returncode == 2 and "--vocab 50000: give 2 to 1024" in done.stderr
    assert list(tmp_path.iterdir()) == []


def test_make_refuses_a_non_empty_directory(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "mine.txt").write_text("keep")
    done = run_cli("dataset", "make", "tokens", "d", cwd=tmp_path)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and "not an empty directory" in done.stderr
    assert [p.name for p in (tmp_path / "d").iterdir()] == ["mine.txt"]


def _spec(tmp_path: Path, model: str, data: str, grid: str = "") -> Path:
    spec = tmp_path / "spec" / "study.yaml"
    spec.parent.mkdir(exist_ok=True)
    spec.write_text(f"name: d\nworkload:\n  {model}\n  data: {data}\n{grid}")
    return spec


def _break_meta(p: Path) -> Path:
    (p / "meta.json").unlink()
    return p


def _break_id(p: Path) -> Path:
    ids = np.fromfile(p / "train.bin", "<u2")
    ids[-1] = 100
    ids.tofile(p / "train.bin")
    return p


def _break_tar(p: Path) -> Path:
    shard = p / "train-000000.tar"
    shard.write_bytes(shard.read_bytes()[:1500])
    return p


def _break_cls(p: Path) -> Path:
    user_shard(p / "train-000001.tar", [1, 2], skip_cls=True)
    return p


BAD = {
    "missing-directory": (GPT, lambda t: t / "nope", "no such directory"),
    "missing-meta": (GPT, lambda t: _break_meta(user_tokens(t / "tok")), "meta.json: missing"),
    "token-id": (GPT, lambda t: _break_id(user_tokens(t / "tok")), "not below vocab_size"),
    "truncated-tar": (CNN, lambda t: _break_tar(user_images(t / "img")), "not a whole tar"),
    "no-cls": (CNN, lambda t: _break_cls(user_images(t / "img")), "has no k00001.cls"),
    "few-shards": (CNN, lambda t: user_images(t / "img", shards=1), "1 train shard(s) for 2"),
    "class-id": ("model: small_cnn\n  image_size: 8\n  num_classes: 3",
                 lambda t: user_images(t / "img"), "not below workload.num_classes 3"),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", list(BAD))
def test_bad_data_is_one_line_exit_2_and_nothing_written(case: str, tmp_path: Path) -> None:
    model, make, words = BAD[case]
    data = make(tmp_path / "spec")
    spec = _spec(tmp_path, model, data.name, "grid:\n  ranks_per_node: [1, 2]\n")
    before = sorted(tmp_path.rglob("*"))
    for command in ("validate", "plan", "run") if case == "few-shards" else ("validate",):
        done = run_cli(command, str(spec), cwd=tmp_path)
        assert done.returncode == 2, (command, done.stdout, done.stderr)
        assert done.stdout == "" and "Traceback" not in done.stderr
        lines = done.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"error: {data}") and words in lines[0]
    assert sorted(tmp_path.rglob("*")) == before  # no results/, no job script


@pytest.mark.slow
def test_good_data_validates_and_its_path_is_absolute_in_the_job(tmp_path: Path) -> None:
    user_images(tmp_path / "spec" / "my images", shards=2)
    spec = _spec(tmp_path, CNN, "{path: my images, workers: 0}",
                 "grid:\n  ranks_per_node: [1, 2]\n  data_stage: [none, shm]\n")
    done = run_cli("validate", str(spec), cwd=tmp_path)
    assert done.returncode == 0 and "ok: 4 runs" in done.stdout, done.stderr
    done = run_cli("run", "--dry-run", str(spec), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    scripts = [p.read_text() for p in (tmp_path / "results" / "d").rglob("job.sh")]
    assert len(scripts) == 4
    where = str(tmp_path / "spec" / "my images")
    assert all(f"--data '{where}' --data-workers 0" in s for s in scripts)
    assert sum("--data-stage shm" in s for s in scripts) == 2


def test_a_cluster_path_is_a_note_not_an_error(tmp_path: Path) -> None:
    spec = _spec(tmp_path, CNN, "/lus-not-here/proj/img", "system: generic-slurm\n")
    done = run_cli("validate", str(spec), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "not visible from this host: not checked here" in done.stderr
