"""workload.data: datasets written here with numpy, Pillow and tarfile (as a user's own
code would) are read in their formats, each sample once per epoch across 1, 2 and 4
replicas, resumably, staged, and every bad input is one DataError naming file and fix."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from scalestudy.workload.data import DataError, formats, sampler, stage
from scalestudy.workload.data.loader import ImageSource, TokenSource, batches, loader
from scalestudy.workload.data.stats import DataStats, fields


def write_tokens(root: Path, tokens: np.ndarray, vocab: int, dtype: str | None = None
                 ) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    tokens.astype(dtype or "uint16").tofile(root / "train.bin")
    tokens[:50].astype(dtype or "uint16").tofile(root / "val.bin")
    meta: dict[str, object] = {"vocab_size": vocab}
    if dtype:
        meta["dtype"] = dtype
    (root / "meta.json").write_text(json.dumps(meta))
    return root


def encode(kind: str, rng: np.random.Generator, size: int = 20) -> bytes:
    pixels = rng.integers(0, 256, (size, size, 3), dtype=np.uint8)
    buf = io.BytesIO()
    if kind == "npy":
        np.save(buf, pixels)
    elif kind == "npyf":
        np.save(buf, pixels.transpose(2, 0, 1).astype(np.float32) / 255)
    else:
        Image.fromarray(pixels).save(buf, format="PNG" if kind == "png" else "JPEG")
    return buf.getvalue()


def write_images(root: Path, shards: int, per_shard: int, kinds: tuple[str, ...] = ("png",),
                 cls: bool = True, seed: int = 0) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    n = 0
    for s in range(shards):
        with tarfile.open(root / f"train-{s:06d}.tar", "w") as tar:
            for _ in range(per_shard):
                kind = kinds[n % len(kinds)]
                ext = "npy" if kind.startswith("npy") else kind
                members = [(f"sample{n:06d}.{ext}", encode(kind, rng))]
                if cls:
                    members.append((f"sample{n:06d}.cls", str(n % 10).encode()))
                for name, data in members:
                    info = tarfile.TarInfo(name)
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
                n += 1
    return root


def token_source(root: Path, seq_len: int, replica: int, dp: int, seed: int = 3
                 ) -> TokenSource:
    return TokenSource(formats.read_tokens(root), seq_len, replica, dp, seed)


def image_source(root: Path, replica: int, dp: int, seed: int = 3) -> ImageSource:
    shards = formats.shard_files(root)
    own = sampler.assign_shards(shards, dp, seed)[replica]
    return ImageSource(tuple(own), {p.name: i for i, p in enumerate(shards)}, 8, 10, seed)


def first_epoch(per_replica: list[list[tuple[list[int], list[int]]]]) -> list[int]:
    """Every replica's ids of epoch 0, all together."""
    return [i for reps in per_replica for ids, epochs in reps
            for i, e in zip(ids, epochs, strict=True) if e == 0]


@pytest.mark.parametrize("dp", [1, 2, 4])
def test_every_token_window_once_per_epoch(tmp_path: Path, dp: int) -> None:
    root = write_tokens(tmp_path / "tok", np.arange(1, 330) % 97, 100)
    n = sampler.windows(329, 8)  # 41 windows of 9 tokens, every 8
    assert n == 41
    per = [batches(token_source(root, 8, r, dp), 3, 0, 41 // dp // 3 + 2) for r in range(dp)]
    seen = first_epoch(per)
    assert sorted(seen) == list(range(n))  # all, none twice
    # batches run on into the next epoch without dropping a partial one
    assert any(0 in epochs and 1 in epochs for reps in per for _, epochs in reps)


@pytest.mark.parametrize("dp", [1, 2, 4])
def test_every_image_once_per_epoch(tmp_path: Path, dp: int) -> None:
    root = write_images(tmp_path / "img", shards=4, per_shard=5)
    per = [batches(image_source(root, r, dp), 3, 0, 20 // dp // 3 + 2) for r in range(dp)]
    expected = [(s << 32) + k for s in range(4) for k in range(5)]
    assert sorted(first_epoch(per)) == expected


def test_the_order_is_the_same_with_workers_and_reshuffled_each_epoch(tmp_path: Path
                                                                      ) -> None:
    root = write_images(tmp_path / "img", shards=4, per_shard=5)
    plain = batches(image_source(root, 0, 1), 4, 0, 10)
    assert batches(image_source(root, 0, 1), 4, 0, 10, workers=2) == plain
    ids = [i for b, _ in plain for i in b]
    assert ids[:20] != ids[20:40] and sorted(ids[:20]) == sorted(ids[20:40])
    tok = write_tokens(tmp_path / "tok", np.arange(400) % 50, 50)
    tokens = batches(token_source(tok, 8, 0, 1), 7, 0, 14)  # 49 windows: 2 epochs
    ids = [i for b, _ in tokens for i in b]
    assert ids[:49] != ids[49:98] and sorted(ids[:49]) == sorted(ids[49:98])
    assert batches(token_source(tok, 8, 1, 2), 4, 0, 6, workers=3) == batches(
        token_source(tok, 8, 1, 2), 4, 0, 6)


def test_resuming_at_a_step_continues_the_same_order(tmp_path: Path) -> None:
    tok = write_tokens(tmp_path / "tok", np.arange(400) % 50, 50)
    whole = batches(token_source(tok, 8, 1, 2), 4, 0, 12)
    assert batches(token_source(tok, 8, 1, 2), 4, 5, 7) == whole[5:]
    img = write_images(tmp_path / "img", shards=3, per_shard=4)
    whole = batches(image_source(img, 0, 1), 5, 0, 6)
    assert batches(image_source(img, 0, 1), 5, 3, 3, workers=2) == whole[3:]
    other_seed = batches(token_source(tok, 8, 1, 2, seed=4), 4, 0, 12)
    assert other_seed != batches(token_source(tok, 8, 1, 2), 4, 0, 12)


@pytest.mark.parametrize("dtype", ["uint16", "uint32"])
def test_token_windows_are_input_and_next_token_target(tmp_path: Path, dtype: str) -> None:
    tokens = np.arange(70_000, 70_000 + 100) if dtype == "uint32" else np.arange(100)
    root = write_tokens(tmp_path / "tok", tokens, int(tokens.max()) + 1, dtype)
    source = token_source(root, 10, 0, 1)
    data, target, _, nbytes, ids, _ = next(iter(loader(source, 2, 0, 2, False)))
    for row, window in enumerate(ids.tolist()):
        expected = torch.tensor(tokens[window * 10: window * 10 + 11], dtype=torch.int64)
        assert torch.equal(data[row], expected[:-1]) and torch.equal(target[row], expected[1:])
    assert int(nbytes) == 2 * 11 * (4 if dtype == "uint32" else 2)


def test_png_jpg_and_npy_members_decode_to_the_same_image_size(tmp_path: Path) -> None:
    root = write_images(tmp_path / "img", 1, 8, kinds=("png", "jpg", "npy", "npyf"))
    data, target, decode, nbytes, _, _ = next(iter(loader(image_source(root, 0, 1), 8, 0, 2,
                                                          False)))
    assert data.shape == (8, 3, 8, 8) and data.dtype == torch.float32
    assert float(data.min()) >= 0.0 and float(data.max()) <= 1.0
    assert sorted(target.tolist()) == list(range(8))
    assert float(decode) > 0 and int(nbytes) > 8 * 100


def test_png_pixels_arrive_unchanged_at_their_own_size(tmp_path: Path) -> None:
    root = tmp_path / "img"
    root.mkdir()
    pixels = np.random.default_rng(1).integers(0, 256, (8, 8, 3), dtype=np.uint8)
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, format="PNG")
    with tarfile.open(root / "train-000000.tar", "w") as tar:
        for name, data in (("a.png", buf.getvalue()), ("a.cls", b"7\n")):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    data, target, *_ = next(iter(loader(image_source(root, 0, 1), 1, 0, 2, False)))
    assert int(target[0]) == 7
    assert torch.allclose(data[0], torch.from_numpy(pixels).permute(2, 0, 1).float() / 255)


def test_staged_shards_are_what_the_loop_reads(tmp_path: Path) -> None:
    root = write_images(tmp_path / "img", shards=2, per_shard=3)
    source = image_source(root, 0, 1)
    staged = stage.stage(source.files(), "local", 0,
                         {stage.LOCAL_STORAGE: str(tmp_path / "local")})
    assert staged.seconds > 0 and staged.nbytes == sum(p.stat().st_size for p in source.files())
    assert staged.directory is not None and staged.directory.parent == tmp_path / "local"
    root.rename(tmp_path / "gone")  # the originals are no longer there
    got = batches(source.relocated(staged.mapping), 3, 0, 4)
    assert sorted(i for b, _ in got[:2] for i in b) == [0, 1, 2, 1 << 32, (1 << 32) + 1,
                                                        (1 << 32) + 2]
    staged.remove()
    assert not (tmp_path / "local").exists() or not any((tmp_path / "local").iterdir())


def test_staging_without_room_leaves_nothing(tmp_path: Path) -> None:
    root = write_images(tmp_path / "img", shards=1, per_shard=1)
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(DataError, match=r"cannot stage the dataset there.*data_stage none"):
        stage.stage(formats.shard_files(root), "local", 0, {stage.LOCAL_STORAGE: str(blocker)})


def test_bad_token_datasets_say_file_and_fix(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="no such directory"):
        formats.kind_of(tmp_path / "absent")
    root = write_tokens(tmp_path / "tok", np.arange(100) % 60, 50)
    (root / "meta.json").unlink()
    with pytest.raises(DataError, match=r"meta.json: missing; write meta.json"):
        formats.read_tokens(root)
    root = write_tokens(tmp_path / "tok", np.arange(100) % 60, 50)
    with pytest.raises(DataError, match=r"train.bin: token id 5\d at position 5\d is >= "
                       r"vocab_size 50 of meta.json; re-tokenise"):
        batches(token_source(root, 99, 0, 1), 1, 0, 1)
    (root / "meta.json").write_text('{"vocab_size": 64, "dtype": "int8"}')
    with pytest.raises(DataError, match="dtype 'int8' is not uint16 or uint32"):
        formats.read_tokens(root)
    with pytest.raises(DataError, match=r"1 window\(s\) of 100 tokens for 2 data-parallel"):
        sampler.check_windows(sampler.windows(100, 99), 2, root / "train.bin", 99)


def test_bad_image_shards_say_file_and_fix(tmp_path: Path) -> None:
    root = write_images(tmp_path / "nocls", shards=1, per_shard=2, cls=False)
    with pytest.raises(DataError, match=r"train-000000.tar: sample 'sample000000' has no "
                       r"sample000000.cls; add"):
        batches(image_source(root, 0, 1), 1, 0, 1)
    root = write_images(tmp_path / "cut", shards=1, per_shard=3)
    shard = root / "train-000000.tar"
    shard.write_bytes(shard.read_bytes()[:1800])  # inside the second sample
    with pytest.raises(DataError, match=r"train-000000\.tar: truncated or corrupt tar.*write "
                       r"the shard again"):
        batches(image_source(root, 0, 1), 3, 0, 1)
    root = write_images(tmp_path / "few", shards=2, per_shard=1)
    with pytest.raises(DataError, match=r"2 train-NNNNNN\.tar shard\(s\) for 4 data-parallel"):
        sampler.assign_shards(formats.shard_files(root), 4, 0)
    src = ImageSource(tuple(formats.shard_files(root)), {"train-000000.tar": 0,
                                                         "train-000001.tar": 1}, 8, 1, 0)
    with pytest.raises(DataError, match=r"\.cls is 1, not below --num-classes 1"):
        batches(src, 2, 0, 1)
    with pytest.raises(DataError, match=r"neither train\.bin"):
        formats.kind_of(tmp_path)


def test_a_workers_data_error_reaches_the_training_process_as_one_line(tmp_path: Path
                                                                       ) -> None:
    root = write_images(tmp_path / "nocls", shards=1, per_shard=2, cls=False)
    from scalestudy.workload.data.loader import _original

    with pytest.raises(DataError) as caught:
        batches(image_source(root, 0, 1), 1, 0, 1, workers=1)
    message = str(_original(caught.value))
    assert "\n" not in message and message.endswith("add the class as ASCII digits beside "
                                                    "each image")


@pytest.mark.slow
def test_record_fields_per_node_and_synthetic() -> None:
    assert fields([None, None], 0.1, 1.0, 1) == {"data_kind": "synthetic"}
    ranks = [DataStats("images", "/d", 0, "local", timed_steps=10, wait_s=0.2, decode_s=0.5,
                       bytes_read=4_000_000_000, samples_seen=120, epochs=2, stage_s=s,
                       stage_bytes=10) for s in (1.0, 3.0)]
    ranks[1].wait_s = 0.4
    out = fields(ranks, 0.1, 2.0, 2, model_parallel=1)
    assert out["input_wait_s"] == pytest.approx(0.03)
    assert out["input_wait_max_s"] == pytest.approx(0.04)
    assert out["input_wait_fraction"] == pytest.approx(0.3)
    assert out["decode_s"] == pytest.approx(0.05)
    assert out["read_GBps"] == pytest.approx(8e9 / 2.0 / 2 / 1e9)
    assert (out["stage_s"], out["stage_bytes"], out["samples_seen"], out["epoch"]) == (
        3.0, 20, 240, 2)


def test_the_local_storage_of_a_profile_expands_its_variables_on_the_node() -> None:
    """Frontier's `/mnt/bb/$USER` reaches the job as written: the workload expands it, and
    a variable the job lacks stays as it is instead of stopping the job script."""
    from scalestudy.workload.data.stage import root_for

    env = {"SCALESTUDY_LOCAL_STORAGE": "/mnt/bb/$USER/${PROJ}", "USER": "ada", "PROJ": "x1"}
    assert root_for("local", env) == Path("/mnt/bb/ada/x1")
    assert root_for("local", {"SCALESTUDY_LOCAL_STORAGE": "/mnt/bb/$USER"}) == \
        Path("/mnt/bb/$USER")
    assert root_for("local", {"TMPDIR": "/scratch/t"}) == Path("/scratch/t")


@pytest.mark.slow
def test_workers_under_a_deep_tmpdir_hand_their_batches_over(tmp_path: Path) -> None:
    # A run directory's $TMPDIR can be deeper than a Unix socket's path may be: the
    # workers' file-descriptor hand-over failed there ("AF_UNIX path too long") and the
    # step waited for ever. Run in a fresh interpreter: the temp dir is read once.
    import os
    import subprocess
    import sys

    deep = tmp_path / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    tok = write_tokens(tmp_path / "tok", np.arange(400) % 50, 50)
    script = ("import sys; from pathlib import Path; "
              "from tests.test_workload_data import token_source, batches; "
              "got = batches(token_source(Path(sys.argv[1]), 8, 0, 1), 4, 0, 6, workers=1); "
              "plain = batches(token_source(Path(sys.argv[1]), 8, 0, 1), 4, 0, 6); "
              "assert got == plain and len(got) == 6, got; print('ok')")
    done = subprocess.run([sys.executable, "-c", script, str(tok)], capture_output=True,
                          text=True, timeout=120, cwd=Path(__file__).parents[1],
                          env={**os.environ, "TMPDIR": str(deep)})
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]
