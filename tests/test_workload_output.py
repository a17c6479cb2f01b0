"""Lines other harnesses read, and the tuning environment in the record."""

from __future__ import annotations

import json
import re

from scalestudy.workload import output


def record() -> dict:
    return {"model": "resnet50", "global_batch": 256, "batch_size": 32, "nodes": 2,
            "local_world_size": 4, "world_size": 8, "throughput": 2345.678, "iters": 10,
            "batches_per_iter": 5}


def test_mllog_lines_are_json_after_the_prefix() -> None:
    lines = output.mllog_summary(record())
    events = {}
    for line in lines:
        assert line.startswith(":::MLLOG ")
        event = json.loads(line[len(":::MLLOG "):])
        assert {"namespace", "time_ms", "event_type", "key", "value", "metadata"} <= set(event)
        events[event["key"]] = event
    assert events["global_batch_size"]["value"] == 256
    assert events["number_of_nodes"]["value"] == 2
    assert events["accelerators_per_node"]["value"] == 4
    assert events["tracked_stats"]["value"] == {"throughput": 2345.678}
    assert events["tracked_stats"]["metadata"]["step"] == 50


def test_tf_cnn_and_horovod_lines() -> None:
    assert output.tf_cnn_line(1234.5678) == "total images/sec: 1234.57"
    per_gpu, total = output.horovod_lines(800.0, 16.0, 8)
    assert per_gpu == "Img/sec per GPU: 100.0 +-2.0"
    assert re.fullmatch(r"Total img/sec on 8 GPU\(s\): 800\.0 \+-16\.0", total)


def test_tuning_env_keeps_communication_variables_only() -> None:
    env = {"HOROVOD_FUSION_THRESHOLD": "0", "NCCL_ALGO": "Ring", "PATH": "/bin",
           "OMP_NUM_THREADS": "1", "HOME": "/root", "FI_PROVIDER": "cxi",
           "OMPI_MCA_orte_hnp_uri": "1605632000.0;tcp://192.0.2.2:41171", "OMPI_MCA_ess": "x"}
    assert output.tuning_env(env) == {"FI_PROVIDER": "cxi", "HOROVOD_FUSION_THRESHOLD": "0",
                                      "NCCL_ALGO": "Ring", "OMP_NUM_THREADS": "1"}
