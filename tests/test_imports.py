"""results.imports and `history import`: outputs of nccl-tests, Horovod's synthetic
benchmarks, torchtitan and MLPerf Training, published by their users (sources in
tests/data/imports/SOURCES.md), read as those tools print them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from scalestudy.core.errors import ScalestudyError
from scalestudy.results.imports import parse
from tests.conftest import run_cli

DATA = Path(__file__).parent / "data" / "imports"


def test_nccl_tests_text_multi_node_h100() -> None:
    rows = parse(DATA / "nccl_tests_allreduce_2node_h100.txt", "nccl-tests")
    assert len(rows) == 31 and rows[0].point["message_bytes"] == 8
    last = rows[-1]
    assert last.point == {"collective": None, "world_size": 16, "nodes": 2,
                          "message_bytes": 8589934592, "dtype": "float", "redop": "sum"}
    assert (last.value, last.unit) == (338.82, "GB/s busbw")  # the better of oop / in-place
    assert last.details["busbw_in_place_GBps"] == 337.35
    assert last.details["gpu_model"] == "NVIDIA H100 80GB HBM3"
    assert last.details["avg_busbw_GBps"] == 70.742


def test_nccl_tests_text_and_json_say_the_same() -> None:
    text = parse(DATA / "nccl_tests_allreduce_2node_gh200_v2.18.txt", "nccl-tests")
    data = parse(DATA / "nccl_tests_allreduce_2node_gh200_v2.18_schema_v2.json", "nccl-tests")
    assert [(r.point, r.value) for r in text] == [(r.point, r.value) for r in data]
    assert text[0].point["collective"] == "all_reduce" and text[0].point["world_size"] == 2
    assert text[-1].details["nccl"] == data[-1].details["nccl"] == "2.30.7"
    assert data[-1].details["busbw_out_of_place_GBps"] == 22.86


@pytest.mark.parametrize(("name", "gpus", "total", "per_gpu", "model"), [
    ("horovod_synthetic_pytorch_4gpu.log", 4, 432.8, 108.2, "resnet50"),
    ("horovod_synthetic_tf2_16gpu_2node.log", 16, 9170.8, 573.2, "ResNet50"),
    ("horovod_synthetic_tf2_8gpu_horovodrun_prefixed.log", 8, 4800.1, 600.0, "ResNet50"),
])
def test_horovod_synthetic_benchmarks(name: str, gpus: int, total: float, per_gpu: float,
                                      model: str) -> None:
    [row] = parse(DATA / name, "horovod")
    assert row.point == {"model": model, "world_size": gpus, "batch_size": 32,
                         "global_batch": 32 * gpus}
    assert (row.value, row.unit, row.details["per_gpu"]) == (total, "img/s", per_gpu)


def test_torchtitan_logs_new_and_old() -> None:
    [new] = parse(DATA / "torchtitan_llama3_debug_8xh200_tflops.log", "torchtitan")
    assert new.point == {"model": "llama3 debugmodel", "world_size": 8}
    assert new.details["steps"] == 10 and new.details["tflops_per_gpu"] == 24.22
    assert new.value == new.details["tokens_per_s_per_gpu"] * 8 and new.unit == "tokens/s"
    [old] = parse(DATA / "torchtitan_llama3_8b_8xh200_tps_mfu_older.log", "torchtitan")
    assert old.point == {"model": "llama3 8B", "world_size": 8}
    assert old.details["tflops_per_gpu"] is None and 0.3 < old.details["mfu"] < 0.5
    [given] = parse(DATA / "torchtitan_llama3_8b_8xh200_tps_mfu_older.log", "torchtitan",
                    gpus=16)
    assert given.point["world_size"] == 16


def test_mlperf_time_to_train() -> None:
    [row] = parse(DATA / "mlperf_v4.0_asustek_llama2_70b_lora_result_0.txt", "mlperf")
    assert row.point == {"model": "llama2_70b_lora", "world_size": None, "nodes": 1,
                         "global_batch": 8}
    assert row.unit == "minutes to train" and row.value == pytest.approx(29.554, abs=1e-3)
    assert row.details["status"] == "success" and row.details["org"] == "ASUSTeK"


def test_a_file_of_another_format_says_so(tmp_path: Path) -> None:
    with pytest.raises(ScalestudyError, match="no horovod results in it"):
        parse(DATA / "mlperf_v4.0_asustek_llama2_70b_lora_result_0.txt", "horovod")
    with pytest.raises(ScalestudyError, match="one of nccl-tests, horovod"):
        parse(DATA / "horovod_synthetic_pytorch_4gpu.log", "vasp")


def test_history_import_places_them_beside_the_studies(tmp_path: Path) -> None:
    env = {"SCALESTUDY_STORE": str(tmp_path / "h.sqlite"), "COLUMNS": "220"}
    done = run_cli("history", "import", str(DATA / "horovod_synthetic_tf2_16gpu_2node.log"),
                   "--format", "horovod", "--system", "oci-a100", "--tag", "published",
                   cwd=tmp_path, env_extra=env)
    assert done.returncode == 0 and "1 measurement(s) (horovod)" in done.stdout
    again = run_cli("history", "import", str(DATA / "horovod_synthetic_tf2_16gpu_2node.log"),
                    "--format", "horovod", "--system", "oci-a100", "--tag", "published",
                    cwd=tmp_path, env_extra=env)
    assert again.returncode == 0
    assert run_cli("history", "import", str(DATA / "nccl_tests_allreduce_2node_h100.txt"),
                   "--format", "nccl-tests", cwd=tmp_path, env_extra=env).returncode == 0
    rows = json.loads(run_cli("history", "--json", cwd=tmp_path, env_extra=env).stdout)
    hvd = [r for r in rows if r["source"] == "horovod"]
    assert len(hvd) == 1  # imported twice, stored once
    assert hvd[0]["throughput"] == 9170.8 and hvd[0]["throughput_per_gpu"] == 9170.8 / 16
    assert hvd[0]["provenance"]["source"]["format"] == "horovod"
    assert hvd[0]["provenance"]["source"]["sha256"] and hvd[0]["tags"] == ["published"]
    nccl = [r for r in rows if r["source"] == "nccl-tests"]
    assert len(nccl) == 31 and nccl[-1]["throughput"] is None
    assert nccl[-1]["metrics"]["value"] == 338.82 and nccl[-1]["unit"] == "GB/s busbw"
    table = run_cli("history", cwd=tmp_path, env_extra=env).stdout
    assert "horovod" in table and "nccl-tests" in table and "GB/s busbw" in table
    bad = run_cli("history", "import", str(DATA / "SOURCES.md"), "--format", "mlperf",
                  cwd=tmp_path, env_extra=env)
    assert bad.returncode == 2 and "no mlperf results in it" in bad.stderr


def test_compare_a_study_with_imported_results(tmp_path: Path) -> None:
    """Published Horovod numbers at 8 and 16 GPUs beside a study's own runs: compare
    aligns them point by point (the log does not say its nodes: --nodes does)."""
    from tests.test_collect import make_run, params, record

    env = {"SCALESTUDY_STORE": str(tmp_path / "h.sqlite")}
    for name, nodes in (("horovod_synthetic_tf2_8gpu_horovodrun_prefixed.log", 1),
                        ("horovod_synthetic_tf2_16gpu_2node.log", 2)):
        done = run_cli("history", "import", str(DATA / name), "--format", "horovod",
                       "--name", "oci", "--nodes", str(nodes), cwd=tmp_path, env_extra=env)
        assert done.returncode == 0, done.stderr
    ours = tmp_path / "results" / "mine"
    for nodes in (1, 2):
        p = params(nodes=nodes, rpn=8, batch=32, study="mine", model="ResNet50")
        make_run(ours, p, metrics=record(p, 560.0 * 8 * nodes))
    from scalestudy.results.collect import collect

    collect(ours, [params(nodes=n, rpn=8, batch=32, study="mine", model="ResNet50")
                   for n in (1, 2)])
    got = run_cli("compare", "history:oci", str(ours), "--json", cwd=tmp_path, env_extra=env)
    assert got.returncode == 0, got.stderr
    points = json.loads(got.stdout)["points"]
    assert [(p["world_size"], p["throughput_a"]) for p in points] == [(8, 4800.1),
                                                                     (16, 9170.8)]
    assert all(p["throughput_b"] == 560.0 * p["world_size"] for p in points)
    missing = run_cli("history", "import", str(DATA / "horovod_synthetic_pytorch_4gpu.log"),
                      "--format", "horovod", "--name", "nonodes", cwd=tmp_path, env_extra=env)
    assert missing.returncode == 0
    refused = run_cli("compare", "history:nonodes", str(ours), cwd=tmp_path, env_extra=env)
    assert refused.returncode == 2 and "import it again with --nodes N" in refused.stderr
