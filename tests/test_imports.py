"""results.history.imports and `history import`: outputs of nccl-tests, Horovod's synthetic
benchmarks, torchtitan and MLPerf Training, published by their users (sources in
tests/data/imports/SOURCES.md), read as those tools print them."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import pytest

from scalestudy.core.errors import ScalestudyError
from scalestudy.results.history.imports import parse
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
    assert new.point == {"model": "llama3 debugmodel", "world_size": 8, "batch_size": 8,
                         "global_batch": 64}
    assert new.details["nccl"] == "2.27.5" and new.status == "completed"
    assert new.ended == datetime(2025, 11, 25, 19, 45, 4, 83000, tzinfo=timezone.utc)
    assert new.details["steps"] == 10 and new.details["tflops_per_gpu"] == 24.22
    assert new.value == new.details["tokens_per_s_per_gpu"] * 8 and new.unit == "tokens/s"
    [old] = parse(DATA / "torchtitan_llama3_8b_8xh200_tps_mfu_older.log", "torchtitan")
    assert old.point == {"model": "llama3 8B", "world_size": 8, "batch_size": 1,
                         "global_batch": 8}
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


@pytest.mark.slow
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


@pytest.mark.slow
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
    from scalestudy.results.analysis.collect import collect

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


@pytest.mark.parametrize(("name", "rows", "world", "nodes", "nccl", "first", "last"), [
    # 12 V100s in one process (DGX-2): `time algbw busbw error`, no root column
    ("nccl_tests_allreduce_dgx2_12xv100_old_layout.txt", 31, 12, 1, None,
     (8, 61.03, 0.0), (8589934592, 127453.0, 123.57)),
    # 2 x p3dn over EFA, NCCL's INFO lines and a truncation mark inside the output
    ("nccl_tests_allreduce_2node_p3dn_v100_nccl2.4.8_old_layout.txt", 28, 16, 2, "2.4.8",
     (8, 145.4, 0.0), (1073741824, 228178.0, 8.95)),
])
def test_nccl_tests_older_layout_is_read_by_its_header(name, rows, world, nodes, nccl, first,
                                                       last) -> None:
    found = parse(DATA / name, "nccl-tests")
    assert len(found) == rows  # every row of the table, none dropped
    for row, (size, time_us, busbw) in ((found[0], first), (found[-1], last)):
        assert row.point["message_bytes"] == size and row.details["time_us"] == time_us
        assert row.value == busbw  # the better of out-of-place and in-place, never `error`
        assert row.point["world_size"] == world and row.point["nodes"] == nodes
        assert row.details["layout"] == "no-root" and row.details["nccl"] == nccl
    assert all(r.value is not None and r.value < 1000 for r in found)


def test_an_nccl_tests_header_of_unknown_layout_is_refused(tmp_path: Path) -> None:
    text = (DATA / "nccl_tests_allreduce_2node_h100.txt").read_text()
    odd = tmp_path / "odd.txt"
    odd.write_text(text.replace("busbw #wrong", "busbw  extra #wrong", 1))
    with pytest.raises(ScalestudyError, match="header this release cannot read"):
        parse(odd, "nccl-tests")


def test_mlperf_aborted_run_is_no_time_to_train() -> None:
    [row] = parse(DATA / "mlperf_v1.0_inspur_nf5488a5_bert_aborted_result_1.txt", "mlperf")
    assert row.status == "aborted" and row.value is None
    assert row.details["status"] == "aborted" and "did not reach" in row.details["why"]
    assert row.point["model"] == "bert" and row.point["nodes"] == 1
    assert row.ended == datetime.fromtimestamp(1623981325.263, timezone.utc)


def test_torchtitan_log_of_only_the_warmup_step_is_no_rate(tmp_path: Path) -> None:
    lines = (DATA / "torchtitan_llama3_debug_8xh200_tflops.log").read_text().splitlines()
    cut = next(i for i, line in enumerate(lines) if "step:  2 " in line)
    short = tmp_path / "titan-step1.log"  # the real log, ended after its first step
    short.write_text("\n".join(lines[:cut]) + "\n")
    [row] = parse(short, "torchtitan")
    assert row.status == "warmup_only" and row.value is None
    assert row.details["warmup_tokens_per_s_per_gpu"] == 5756


@pytest.mark.parametrize(("name", "model", "batch", "total", "ended", "nccl"), [
    ("horovod_synthetic_tf2_8gpu_k8s_roce_timestamped_indented.log", "ResNet50", 32, 874.2,
     datetime(2020, 6, 18, 14, 29, 36, tzinfo=timezone.utc), "2.4.8"),
    ("horovod_synthetic_pytorch_4cpu_a64fx_indented.log", "resnet50", 75, 104.5, None, None),
])
def test_horovod_indented_and_timestamped_lines(name, model, batch, total, ended,
                                                nccl) -> None:
    [row] = parse(DATA / name, "horovod")
    assert row.point["model"] == model and row.point["batch_size"] == batch
    assert row.value == total and row.ended == ended and row.details.get("nccl") == nccl


@pytest.mark.slow  # seven CLI commands, a store lost and rebuilt
def test_an_import_is_dated_by_its_log_and_kept_for_a_rebuild(tmp_path: Path) -> None:
    store = tmp_path / "h.sqlite"
    env = {"SCALESTUDY_STORE": str(store)}
    copy = tmp_path / "copy.log"  # a copy made today: its mtime is not when it ran
    copy.write_bytes((DATA / "torchtitan_llama3_debug_8xh200_tflops.log").read_bytes())
    done = run_cli("history", "import", str(copy), "--format", "torchtitan", cwd=tmp_path,
                   env_extra=env)
    assert done.returncode == 0, done.stderr
    assert "dated 2025-11-25 19:45 UTC by the log" in done.stderr
    aborted = run_cli("history", "import",
                      str(DATA / "mlperf_v1.0_inspur_nf5488a5_bert_aborted_result_1.txt"),
                      "--format", "mlperf", cwd=tmp_path, env_extra=env)
    assert "1 aborted (not a result)" in aborted.stdout
    nodate = run_cli("history", "import", str(DATA / "nccl_tests_allreduce_2node_h100.txt"),
                     "--format", "nccl-tests", "--date", "2024-03-01", cwd=tmp_path,
                     env_extra=env)
    assert "dated 2024-03-01 00:00 UTC by --date" in nodate.stderr
    before = json.loads(run_cli("history", "--json", cwd=tmp_path, env_extra=env).stdout)
    [titan] = [r for r in before if r["source"] == "torchtitan"]
    assert titan["ended"].startswith("2025-11-25 19:45:04")
    [bert] = [r for r in before if r["source"] == "mlperf"]
    assert bert["state"] == "failed" and bert["metrics"]["failure"] == "aborted"
    assert bert["metrics"]["value"] is None
    store.unlink()  # the store is lost: results/ brings the imports back
    again = run_cli("history", "ingest", "results", cwd=tmp_path, env_extra=env)
    assert again.returncode == 0, again.stderr
    assert "3 kept import(s)" in again.stdout
    after = json.loads(run_cli("history", "--json", cwd=tmp_path, env_extra=env).stdout)
    key = ("source", "run_id", "state", "ended", "throughput", "model")
    assert sorted(tuple(str(r[k]) for k in key) for r in after) == \
        sorted(tuple(str(r[k]) for k in key) for r in before)


@pytest.mark.slow
def test_a_multi_file_import_is_all_or_nothing(tmp_path: Path) -> None:
    env = {"SCALESTUDY_STORE": str(tmp_path / "h.sqlite")}
    done = run_cli("history", "import", str(DATA / "horovod_synthetic_pytorch_4gpu.log"),
                   str(DATA / "SOURCES.md"), "--format", "horovod", cwd=tmp_path,
                   env_extra=env)
    assert done.returncode == 2 and "SOURCES.md: no horovod results in it" in done.stderr
    assert "Traceback" not in done.stderr
    rows = json.loads(run_cli("history", "--json", cwd=tmp_path, env_extra=env).stdout)
    assert rows == []
    assert not list((tmp_path / "results").glob("imports/*"))


@pytest.mark.parametrize(("prefixed", "source"), [
    ("nccl_tests_allreduce_2node_h100_ompi_tag_output.txt",
     "nccl_tests_allreduce_2node_h100.txt"),
    ("nccl_tests_allreduce_2node_p3dn_v100_hydra_prepend_rank.txt",
     "nccl_tests_allreduce_2node_p3dn_v100_nccl2.4.8_old_layout.txt"),
    ("nccl_tests_allreduce_2node_gh200_v2.18_srun_label.txt",
     "nccl_tests_allreduce_2node_gh200_v2.18.txt"),
    ("nccl_tests_allreduce_dgx2_12xv100_kubectl_prefix.txt",
     "nccl_tests_allreduce_dgx2_12xv100_old_layout.txt"),
])
def test_nccl_tests_captured_with_a_launchers_prefixes(prefixed: str, source: str) -> None:
    """mpirun --tag-output, mpiexec -prepend-rank, srun -l, kubectl logs --prefix: the
    prefixed capture reads exactly as the file without them (hosts, GPUs, every row)."""
    plain = parse(DATA / source, "nccl-tests")
    tagged = parse(DATA / prefixed, "nccl-tests")
    assert len(plain) > 5 and tagged == plain
    assert all(m.status == "completed" for m in tagged)
    assert tagged[0].point["nodes"] == 2 or "dgx2" in source


def test_nccl_tests_under_srun_without_mpi_reads_one_ranks_table(tmp_path: Path) -> None:
    """nccl-tests built without MPI and started by `srun -l -n 2`: each task ran its own
    test and printed its own table; the rank that printed first is read, not both."""
    lines = (DATA / "nccl_tests_allreduce_2node_gh200_v2.18.txt").read_text().splitlines()
    mixed = tmp_path / "two.txt"
    mixed.write_text("".join(f"{r}: {line}\n" for line in lines for r in (0, 1)))
    assert parse(mixed, "nccl-tests") == parse(
        DATA / "nccl_tests_allreduce_2node_gh200_v2.18.txt", "nccl-tests")


def test_a_cut_off_nccl_tests_table_is_no_result(tmp_path: Path) -> None:
    """The capture stopped in the table (no `# Avg bus bandwidth` line): the rows read are
    kept as aborted, and the import says so."""
    text = (DATA / "nccl_tests_allreduce_2node_h100.txt").read_text()
    cut = tmp_path / "cut.txt"
    cut.write_text(text[:text.index("  1073741824")] + "  1073741824     268435456     fl")
    found = parse(cut, "nccl-tests")
    assert found and {m.status for m in found} == {"aborted"}
    assert all("cut off" in m.details["why"] for m in found)
    assert max(m.point["message_bytes"] for m in found) == 536870912
    results = tmp_path / "results"
    done = run_cli("history", "import", "--format", "nccl-tests", "--system", "x",
                   str(cut), "--store", f"sqlite:///{tmp_path / 's.sqlite'}",
                   "--results", str(results), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert f"{len(found)} aborted (not a result)" in done.stderr + done.stdout


def test_an_nccl_tests_row_with_wrong_values_is_flagged(tmp_path: Path) -> None:
    text = (DATA / "nccl_tests_allreduce_2node_gh200_v2.18.txt").read_text()
    row = next(line for line in text.splitlines() if line.lstrip().startswith("134217728"))
    words = row.split()
    assert words[8] == "0"
    bad = tmp_path / "wrong.txt"
    bad.write_text(text.replace(row, row.replace("22.86       0  ", "22.86      17  ")))
    found = {m.point["message_bytes"]: m for m in parse(bad, "nccl-tests")}
    assert found[134217728].status == "wrong_results"
    assert "17 wrong value(s)" in found[134217728].details["why"]
    assert {m.status for b, m in found.items() if b != 134217728} == {"completed"}
