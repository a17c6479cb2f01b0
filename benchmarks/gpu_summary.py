"""gpu_figures.py's arithmetic and table: nvidia-smi's power samples, NVML energy against
them, and the markdown summary of results.json (every figure read from the runs' output;
the only constant is the datasheet peak, named as such).

    python benchmarks/gpu_summary.py DIR   # the table again from DIR/results.json
"""

from __future__ import annotations

import csv
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

#: Dense (no sparsity) bf16 tensor-core peak in TFLOP/s by the GPU's name as torch gives
#: it: NVIDIA's H100 SXM5 / H200 SXM datasheets list 1,979 TFLOP/s "with sparsity".
DATASHEET_DENSE_BF16 = {"NVIDIA H100 80GB HBM3": 989.4, "NVIDIA H200": 989.4}


def _number(text: str) -> float | None:
    try:
        return float(text.strip().split()[0])
    except (ValueError, IndexError):
        return None


def read_power(path: Path) -> list[dict[str, float | None]]:
    """nvidia-smi's CSV samples: {"t": epoch seconds, "power_w", "power_instant_w",
    "sm_mhz", "util_pct", "mem_mib"} (None where this driver gave no value)."""
    if not path.exists():
        return []
    samples = []
    with path.open() as fh:
        for row in csv.reader(fh):
            if not row or row[0].strip().startswith("timestamp"):
                continue
            try:
                stamp = time.mktime(time.strptime(row[0].strip().split(".")[0],
                                                  "%Y/%m/%d %H:%M:%S"))
                stamp += float("0." + row[0].strip().split(".")[1])
            except (ValueError, IndexError):
                continue
            values = [_number(v) for v in row[1:]]
            names = ("power_w", "power_instant_w", "sm_mhz", "util_pct", "mem_mib")
            sample: dict[str, float | None] = {"t": stamp}
            sample.update(dict(zip(names, values, strict=False)))
            samples.append(sample)
    return samples


def _runs(steps: dict[str, Any]) -> list[tuple[str, dict[str, Any], list[float]]]:
    """(label, figures with energy_j, window) of every run that has both."""
    out = []
    for name, step in steps.items():
        record = step.get("record") or {}
        if record.get("energy_j") is not None and step.get("window"):
            out.append((name, {"energy_j": record["energy_j"]}, step["window"]))
        for result in step.get("results", []):
            if result.get("energy_j") is not None and result.get("window"):
                out.append((f"{name}:{result['variant']}", result, result["window"]))
    return out


def energy_vs_power(steps: dict[str, Any], samples: Sequence[dict[str, Any]]
                    ) -> list[dict[str, Any]]:
    """Per run: NVML's energy over the timed window and its mean power, against the mean
    of nvidia-smi's samples inside the same window (power.draw: a 1 s average on recent
    drivers; power.draw.instant where given)."""
    rows = []
    for label, figures, (start, end) in _runs(steps):
        seconds = end - start
        inside = [s for s in samples if start <= s["t"] <= end]
        row: dict[str, Any] = {"run": label, "seconds": round(seconds, 3),
                               "nvml_energy_j": round(figures["energy_j"], 1),
                               "nvml_mean_w": round(figures["energy_j"] / seconds, 1),
                               "smi_samples": len(inside)}
        for key in ("power_w", "power_instant_w", "sm_mhz", "util_pct"):
            values = [s[key] for s in inside if s.get(key) is not None]
            if values:
                row[f"smi_{key}_mean"] = round(sum(values) / len(values), 1)
        if row.get("smi_power_w_mean"):
            row["smi_energy_j"] = round(row["smi_power_w_mean"] * seconds, 1)
            row["nvml_over_smi"] = round(row["nvml_mean_w"] / row["smi_power_w_mean"], 4)
        rows.append(row)
    return rows


def _f(value: Any, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _conditions(results: dict[str, Any]) -> list[str]:
    steps = results["steps"]
    env = next((step["env"] for step in steps.values() if step.get("env")), {})
    record = next((s["record"] for s in steps.values() if s.get("record")
                   and "provenance" in s["record"]), {})
    versions = record.get("provenance", {}).get("versions", {})
    return [f"- GPU: {env.get('gpu', 'cpu (smoke)')}, {env.get('gpu_memory_gib', '-')} GiB, "
            f"{env.get('sms', '-')} SMs, compute capability {env.get('capability', '-')}",
            f"- torch {env.get('torch')}, CUDA {env.get('cuda')}, cuDNN {env.get('cudnn')}, "
            f"NCCL {env.get('nccl')}, driver {versions.get('cuda_driver', '-')}, "
            f"torchvision {env.get('torchvision')}",
            f"- sizes: {json.dumps(results['sizes'])}"]


def _bare_results(steps: dict[str, Any], prefix: str) -> list[dict[str, Any]]:
    """Every measured bare-loop result of the steps named `prefix`..."""
    return [r for name, step in steps.items() if name.startswith(prefix)
            for r in step.get("results", []) if "throughput" in r]


def _cnn(steps: dict[str, Any]) -> list[str]:
    bare = _bare_results(steps, "cnn_bare")
    ours = (steps.get("cnn_ddp") or {}).get("record")
    lines = ["| ResNet run | precision | img/s | ours (DDP, same compile) / this | J/img | "
             "peak GiB |", "|---|---|---|---|---|---|"]
    workloads = {name: step["record"] for name, step in steps.items()
                 if name.startswith("cnn_") and (step.get("record") or {}).get("throughput")
                 and "batch_size" in step["record"] and name != "cnn_probe"}
    for r in bare:
        compiled = bool(r.get("compile"))
        same = [rec for rec in workloads.values() if bool(rec.get("compile")) == compiled
                and rec["precision"] == r["precision"]]
        best = max(same, key=lambda rec: rec["throughput"], default=None)
        ratio = best["throughput"] / r["throughput"] if best else None
        lines.append(f"| bare {r['variant']}{' compiled' if compiled else ''} "
                     f"({r['model_source']}) | {r['precision']} | "
                     f"{_f(r['throughput'])} | {_f(ratio, 4)} | "
                     f"{_f(r.get('energy_j_per_unit'), 3)} | {_f(r.get('max_memory_gib'))} |")
    for name, rec in workloads.items():
        lines.append(f"| workload {_settings(rec)} ({rec['dist_backend']}, torchrun, 1 rank; "
                     f"{name}) | {rec['precision']} | {_f(rec['throughput'])} | | "
                     f"{_f(rec.get('energy_j_per_sample'), 3)} | |")
    for name, step in steps.items():
        if name.startswith("cnn_") and name != "probe" and step.get("rc") and \
                name not in workloads:
            lines.append(f"| {name} | | failed (rc {step.get('rc')}) | | | |")
    probe = (ours or {}).get("allreduce_probe")
    if probe:
        lines.append(f"\nallreduce probe on {ours['world_size']} rank(s), "
                     f"{ours['dist_backend']}: largest message "
                     f"{probe['bytes'][-1] / 1e6:.1f} MB in {probe['time_s'][-1] * 1e3:.3f} ms"
                     f" = algbw {_f(probe['algbw_GBps'][-1], 1)} GB/s, busbw "
                     f"{_f(probe['busbw_GBps'][-1], 1)} GB/s (x 2(n-1)/n: 0 on one rank); "
                     f"smallest {probe['bytes'][0]} B in {probe['time_s'][0] * 1e6:.1f} us; "
                     f"comm_overhead {_f(ours.get('comm_overhead'), 4)}")
    return lines


def _settings(rec: dict[str, Any]) -> str:
    """The backend and the settings of it that differ from the default."""
    changed = []
    if (rec.get("ddp") or {}).get("gradient_as_bucket_view"):
        changed.append("gradient_as_bucket_view")
    if (rec.get("fsdp") or {}).get("reshard_after_forward") is False:
        changed.append("no reshard_after_forward")
    if (rec.get("fsdp") or {}).get("param_dtype") == "compute":
        changed.append(f"{rec['precision']} parameters")
    if rec.get("compile"):
        changed.append("compiled")
    if rec.get("seq_len"):
        changed.append(f"batch {rec['batch_size']}")
    return rec["backend"] + (f" ({', '.join(changed)})" if changed else "")


def _gpt(steps: dict[str, Any], gpu: str | None) -> list[str]:
    datasheet = DATASHEET_DENSE_BF16.get(gpu or "")
    lines = ["| GPT run | tokens/s | model TFLOP/s | MFU (measured matmul) | "
             f"MFU (datasheet dense {datasheet or '-'}) | ours / bare (same batch, "
             "compile) | J/token |", "|---|---|---|---|---|---|---|"]
    bares = _bare_results(steps, "gpt_bare")
    for bare in bares:
        peak = bare.get("measured_matmul_tflops")
        lines.append(f"| bare loop{' compiled' if bare.get('compile') else ''}, batch "
                     f"{bare['batch_size']} | {_f(bare['throughput'], 0)} | "
                     f"{_f(bare['model_tflops'])} | "
                     f"{_f(bare['model_tflops'] / peak if peak else None, 4)} | "
                     f"{_f(bare['model_tflops'] / datasheet if datasheet else None, 4)} | | "
                     f"{_f(bare.get('energy_j_per_unit'), 4)} |")
    for name, step in steps.items():
        if not name.startswith("gpt_") or name.startswith("gpt_bare"):
            continue
        rec = step.get("record")
        if not rec:
            lines.append(f"| {name} | failed (rc {step.get('rc')}) | | | | | |")
            continue
        tflops = rec["model_tflops_per_gpu"]
        bare = next((b for b in bares if b["batch_size"] == rec["batch_size"]
                     and bool(b.get("compile")) == bool(rec.get("compile"))), None)
        ratio = rec["throughput"] / bare["throughput"] if bare else None
        tokens = rec["throughput"] * sum(rec.get("rank_seconds", [0]))
        per_token = rec["energy_j"] / tokens if rec.get("energy_j") and tokens else None
        lines.append(f"| workload {_settings(rec)} | {_f(rec['throughput'], 0)} | "
                     f"{_f(tflops)} | {_f(rec.get('mfu'), 4)} (peak "
                     f"{_f(rec.get('peak_tflops'))}) | "
                     f"{_f(tflops / datasheet if datasheet else None, 4)} | {_f(ratio, 4)} | "
                     f"{_f(per_token, 4)} |")
    return lines


def summarize(results: dict[str, Any]) -> str:
    """The markdown summary of one gpu_figures.py run."""
    steps = results["steps"]
    env = next((step["env"] for step in steps.values() if step.get("env")), {})
    out = ["# GPU figures" + (" (CPU smoke: sizes are tiny, numbers mean nothing)"
                              if results.get("smoke") else ""), "", *_conditions(results), "",
           *_cnn(steps), "", *_gpt(steps, env.get("gpu")), ""]
    probe = (steps.get("probe") or {}).get("record")
    if probe:
        points = ", ".join(f"{p['batch_size']}: " + (f"{p['throughput']:.0f} img/s"
                                                     if p["fits"] else "OOM")
                           for p in probe["points"])
        out += [f"batch probe ({probe['model']}, {probe['precision']}): largest batch that "
                f"fits {probe['largest_batch_that_fits']}; {points}", ""]
    if results.get("energy_vs_power"):
        out += ["| run | s | NVML J | NVML W | nvidia-smi W (n) | smi instant W | NVML/smi |",
                "|---|---|---|---|---|---|---|"]
        out += [f"| {r['run']} | {r['seconds']} | {r['nvml_energy_j']} | {r['nvml_mean_w']} | "
                f"{r.get('smi_power_w_mean', '-')} ({r['smi_samples']}) | "
                f"{r.get('smi_power_instant_w_mean', '-')} | {r.get('nvml_over_smi', '-')} |"
                for r in results["energy_vs_power"]]
        out.append("")
    window = (steps.get("energy_window") or {}).get("figures")
    if window:
        tick = window["update_interval"]
        out += [f"NVML counter on {window['gpu']}: updates every {_f(tick['median_s'], 4)} s "
                f"(min {_f(tick['min_s'], 4)}, max {_f(tick['max_s'], 4)}); steady matmul "
                f"load {_f(window['long']['watts'])} W over {window['long']['seconds']} s "
                f"({_f(window['long_again_watts'])} W after); short windows' mean power / "
                "the long window's, from the plain delta and from the updates inside the "
                "window (the record's):", "",
                "| window s | updates inside | delta: median, worst | updates: median, worst |",
                "|---|---|---|---|"]
        out += [f"| {w['seconds']} | {w['updates']} | {w['raw']['median']}, "
                f"{w['raw']['worst']} | {w['updates_method']['median']}, "
                f"{w['updates_method']['worst']} |" for w in window["windows"]]
        out.append("")
    peaks = (steps.get("peak_check") or {}).get("peaks")
    if peaks:
        out += [f"measured matmul peak after {peaks['idle_s']} s idle, TFLOP/s: burst "
                f"(3 warm-up, best single product) {peaks['old']['values']}; sustained "
                f"(mfu.py: 0.25 s warm-up, best batch of 20) {peaks['new']['values']}", ""]
    if "preflight" in steps:
        out += ["preflight (rc " + str(steps["preflight"]["rc"]) + "):",
                *("    " + line for line in steps["preflight"]["output"][-6:]), ""]
    failed = [f"{n} rc {s.get('rc')}" for n, s in steps.items() if s.get("rc", 0) != 0]
    out += [f"failed: {', '.join(failed) or 'none'}; skipped: "
            f"{json.dumps(results.get('skipped', {})) or 'none'}"]
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    data = json.loads((Path(sys.argv[1]) / "results.json").read_text())
    print(summarize(data))
