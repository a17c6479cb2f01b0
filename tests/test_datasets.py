"""site/datasets.py and site/datagen.py: datasets checked before submit, and the
generator's output read back with plain numpy, tarfile and Pillow (not scalestudy's
reader)."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from scalestudy.site import datagen
from scalestudy.site.datasets import Need, problems, visible

IMAGES = Need(world=2, tokens=False, num_classes=10)
TOKENS = Need(world=2, tokens=True, seq_len=16)


def user_tokens(path: Path, n: int = 4096, vocab: int = 100, dtype: str = "uint16") -> Path:
    """A token dataset as a user's own numpy code writes it (nanoGPT's prepare.py way)."""
    path.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    for split in ("train", "val"):
        rng.integers(0, vocab, size=n).astype(dtype).tofile(path / f"{split}.bin")
    meta = {"vocab_size": vocab, **({"dtype": dtype} if dtype != "uint16" else {})}
    (path / "meta.json").write_text(json.dumps(meta))
    return path


def user_shard(file: Path, labels: list[int], size: int = 8, first_key: int = 0,
               skip_cls: bool = False) -> None:
    """A WebDataset shard as a user's own tarfile + Pillow code writes it."""
    with tarfile.open(file, "w") as tar:
        for i, label in enumerate(labels):
            buffer = io.BytesIO()
            Image.fromarray(np.full((size, size, 3), 40 * label, np.uint8)).save(buffer, "PNG")
            members = [(f"k{first_key + i:05d}.png", buffer.getvalue())]
            if not (skip_cls and i == len(labels) - 1):
                members.append((f"k{first_key + i:05d}.cls", str(label).encode()))
            for name, data in members:
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))


def user_images(path: Path, shards: int = 2) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    for s in range(shards):
        user_shard(path / f"train-{s:06d}.tar", [s, 1, 2], first_key=10 * s)
    user_shard(path / "val-000000.tar", [3, 4], first_key=100)
    return path


def test_datasets_written_by_the_user_pass(tmp_path: Path) -> None:
    assert problems(user_tokens(tmp_path / "tok"), TOKENS) == []
    assert problems(user_tokens(tmp_path / "tok32", vocab=70000, dtype="uint32"),
                    TOKENS) == []
    assert problems(user_images(tmp_path / "img"), IMAGES) == []


def _one(found: list[str], where: Path, *words: str) -> None:
    assert len(found) == 1, found
    assert found[0].startswith(f"{where}: ") and "\n" not in found[0]
    assert ";" in found[0]  # what; how to fix
    for word in words:
        assert word in found[0]


def test_missing_directory(tmp_path: Path) -> None:
    _one(problems(tmp_path / "nope", TOKENS), tmp_path / "nope", "no such directory")


def test_missing_meta_json(tmp_path: Path) -> None:
    path = user_tokens(tmp_path / "tok")
    (path / "meta.json").unlink()
    _one(problems(path, TOKENS), path / "meta.json", "missing", "vocab_size")


def test_token_id_at_vocab_size(tmp_path: Path) -> None:
    path = user_tokens(tmp_path / "tok", vocab=100)
    ids = np.fromfile(path / "val.bin", dtype="<u2")
    ids[1234] = 100
    ids.tofile(path / "val.bin")
    _one(problems(path, TOKENS), path / "val.bin", "token id 100 at position 1234",
         "vocab_size 100")


def test_too_few_tokens_for_a_window_per_rank(tmp_path: Path) -> None:
    path = user_tokens(tmp_path / "tok", n=100)
    _one(problems(path, Need(world=8, tokens=True, seq_len=16)), path / "train.bin",
         "per rank")


@pytest.mark.parametrize("cut", [700, 1500, 2100], ids=["in-data", "in-header", "in-next-header"])
def test_truncated_tar(cut: int, tmp_path: Path) -> None:
    path = user_images(tmp_path / "img", shards=3)
    shard = path / "train-000001.tar"  # a middle shard: only its headers are listed
    shard.write_bytes(shard.read_bytes()[:cut])
    _one(problems(path, IMAGES), shard, "not a whole tar file")


def test_member_without_cls(tmp_path: Path) -> None:
    path = user_images(tmp_path / "img")
    shard = path / "train-000001.tar"
    user_shard(shard, [1, 2], first_key=10, skip_cls=True)
    _one(problems(path, IMAGES), shard, "k00011 has no k00011.cls")


def test_fewer_shards_than_ranks(tmp_path: Path) -> None:
    path = user_images(tmp_path / "img", shards=2)
    _one(problems(path, Need(world=4, tokens=False, num_classes=10)), path,
         "2 train shard(s) for 4 ranks")


def test_class_id_not_below_num_classes(tmp_path: Path) -> None:
    path = user_images(tmp_path / "img")
    _one(problems(path, Need(world=1, tokens=False, num_classes=4)), path / "val-000000.tar",
         "class 4", "num_classes 4")


def test_tokens_for_a_cnn_and_images_for_a_transformer(tmp_path: Path) -> None:
    _one(problems(user_tokens(tmp_path / "tok"), IMAGES), tmp_path / "tok", "holds tokens")
    _one(problems(user_images(tmp_path / "img"), TOKENS), tmp_path / "img", "holds images")


def test_a_cluster_path_is_not_visible_here(tmp_path: Path) -> None:
    assert visible(tmp_path / "missing") and not visible(Path("/lus-not-here/x/data"))


def test_generated_tokens_read_back_with_numpy(tmp_path: Path) -> None:
    meta = datagen.write_atomic_dir(tmp_path / "tok",
                                    lambda d: datagen.write_tokens(d, 200_000, 16, seed=3))
    on_disk = json.loads((tmp_path / "tok" / "meta.json").read_text())
    assert on_disk == json.loads(json.dumps(meta))
    train = np.fromfile(tmp_path / "tok" / "train.bin", dtype="<u2")
    val = np.fromfile(tmp_path / "tok" / "val.bin", dtype="<u2")
    assert on_disk["dtype"] == "uint16" and on_disk["vocab_size"] == 16
    assert on_disk["n_tokens"] == {"train": len(train), "val": len(val)} == {
        "train": 200_000, "val": 20_000}
    assert train.max() < 16
    # The entropy figure against a direct computation from the seeded chain
    p, pi = datagen.markov_chain(16, seed=3)
    direct = -sum(pi[i] * p[i, j] * np.log(p[i, j]) for i in range(16) for j in range(16))
    assert on_disk["entropy_nats"] == pytest.approx(direct, abs=1e-6)
    assert np.allclose(pi @ p, pi)
    # ...and against the tokens themselves: the empirical conditional entropy of the
    # written pairs is the rate (within sampling error), far below ln(vocab)
    pairs = np.zeros((16, 16))
    np.add.at(pairs, (train[:-1], train[1:]), 1)
    cond = pairs / pairs.sum(axis=1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        empirical = -np.nansum(pairs / pairs.sum() * np.log(cond))
    assert empirical == pytest.approx(on_disk["entropy_nats"], abs=0.03)
    assert on_disk["entropy_nats"] < 0.8 * np.log(16)


def test_generated_images_read_back_with_tarfile_and_pillow(tmp_path: Path) -> None:
    datagen.write_atomic_dir(tmp_path / "img",
                             lambda d: datagen.write_images(d, 40, 16, shards=4, seed=1))
    names = sorted(p.name for p in (tmp_path / "img").iterdir())
    assert names == [*(f"train-{i:06d}.tar" for i in range(4)),
                     *(f"val-{i:06d}.tar" for i in range(4))]
    seen = 0
    for shard in (tmp_path / "img").glob("train-*.tar"):
        with tarfile.open(shard) as tar:
            members = tar.getmembers()
            assert [m.name.rsplit(".", 1)[1] for m in members] == ["png", "cls"] * (
                len(members) // 2)
            for image_m, cls_m in zip(members[::2], members[1::2], strict=True):
                assert image_m.name[:-4] == cls_m.name[:-4]
                label = int(tar.extractfile(cls_m).read().decode("ascii"))
                image = np.asarray(Image.open(tar.extractfile(image_m)).convert("RGB"),
                                   dtype=float)
                assert image.shape == (16, 16, 3)
                quads = [image[r * 8:(r + 1) * 8, c * 8:(c + 1) * 8].mean()
                         for r in (0, 1) for c in (0, 1)]
                assert int(np.argmax(quads)) == label  # the fixed rule
                seen += 1
    assert seen == 40
    assert problems(tmp_path / "img", Need(world=4, tokens=False, num_classes=4)) == []


def test_generated_npy_images(tmp_path: Path) -> None:
    datagen.write_atomic_dir(tmp_path / "img",
                             lambda d: datagen.write_images(d, 8, 8, 2, 0, fmt="npy"))
    with tarfile.open(tmp_path / "img" / "train-000000.tar") as tar:
        first = tar.getmembers()[0]
        assert first.name.endswith(".npy")
        array = np.load(io.BytesIO(tar.extractfile(first).read()))
    assert array.shape == (8, 8, 3) and array.dtype == np.uint8


def test_a_failed_write_leaves_nothing(tmp_path: Path) -> None:
    def fail(d: Path) -> dict[str, object]:
        (d / "train.bin").write_bytes(b"12")
        raise OSError("disk full")

    with pytest.raises(OSError):
        datagen.write_atomic_dir(tmp_path / "out", fail)
    assert list(tmp_path.iterdir()) == []
