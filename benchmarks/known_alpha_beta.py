"""Known truth on the Slurm testbed: a simulated network with a known latency alpha and
cost per byte beta is added to every DDP allreduce (the workload's `sim_latency_ms` and
`sim_ns_per_byte`: each bucket waits alpha·log2 P + beta·2(P−1)/P·S). A real study on
1–4 nodes of 1 and 2 ranks runs each point without and with the simulated network (two
tuning variants, one job at a time); the step times' difference, fitted by the model's
two communication terms, must give alpha and beta back. Then `predict` forecasts the
4-node, 8-rank throughput from the simulated network's runs on 1–2 nodes, and the
measurement must lie inside its interval.

    eval "$(scripts/slurm-testbed start)"
    python benchmarks/known_alpha_beta.py [--alpha-ms 200] [--beta-ns 100] [--repeats 2]
                                          [--out DIR] [--json]

Exit 0 when alpha and beta are recovered within 10 % and the forecast holds, 1 when not,
2 when the testbed is not running. The output also prints the model fitted to the
simulated network's study alone: its alpha and beta include the testbed's own allreduce
(gloo over loopback, several processes sharing 2 cores), which the difference removes.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

from testbeds import slurm_profile  # noqa: E402

from scalestudy.results.analysis.forecast import forecast  # noqa: E402
from scalestudy.results.analysis.modelfit import fit_points  # noqa: E402

TOLERANCE = 0.10
PROFILE = slurm_profile("testbed-known-network")
STUDY = """\
name: known-network
system: profile.yaml
workload: {{model: small_cnn, image_size: 16, num_classes: 10, warmup_iters: 1, iters: 3,
           batches_per_iter: 2}}
grid: {{nodes: [1, 2, 3, 4], ranks_per_node: [1, 2], batch_size: [4],
       tuning: [default, simulated]}}
tuning:
  simulated:
    description: every allreduce also waits alpha·log2 P + beta·2(P−1)/P·S
    options: {{sim_latency_ms: {alpha_ms}, sim_ns_per_byte: {beta_ns}}}
repeats: {repeats}
job: {{walltime: "00:10:00"}}
"""


def run_study(out: Path, alpha_ms: float, beta_ns: float,
              repeats: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The study run for real on the testbed, one job at a time (the runs without and
    with the simulated network side by side); the completed runs of each."""
    (out / "profile.yaml").write_text(PROFILE)
    spec = out / "known-network.yaml"
    spec.write_text(STUDY.format(alpha_ms=alpha_ms, beta_ns=beta_ns, repeats=repeats))
    done = subprocess.run([sys.executable, "-c", "from scalestudy.cli import main; main()",
                           "run", str(spec), "--wait", "--max-jobs", "1"],
                          cwd=out, capture_output=True, text=True, check=False,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    if done.returncode != 0:
        raise SystemExit(f"the study failed:\n{done.stdout}\n{done.stderr}")
    return split(pd.read_csv(out / "results" / "known-network" / "runs.csv"))


def split(runs: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(bare, simulated): the completed runs of each tuning variant."""
    runs = runs[runs["state"] == "completed"]
    return runs[runs["tuning"] == "default"], runs[runs["tuning"] == "simulated"]


def step_times(runs: pd.DataFrame) -> pd.Series:
    """Median seconds per step of each layout (nodes, ranks per node)."""
    step = runs["world_size"] * runs["batch_size"] / runs["throughput"]
    return step.groupby([runs["nodes"], runs["ranks_per_node"]]).median()


def recover(bare: pd.DataFrame, simulated: pd.DataFrame, alpha_ms: float,
            beta_ns: float) -> dict[str, object]:
    """alpha and beta from the step times the simulated network added, the model fitted
    to the simulated study alone, and the 4-node forecast from 1–2 nodes."""
    added = (step_times(simulated) - step_times(bare)).dropna()
    layouts = added.index.to_frame(index=False)
    world = (layouts["nodes"] * layouts["ranks_per_node"]).to_numpy(float)
    grad_bytes = float(simulated["grad_bytes"].median())
    buckets = (float(simulated["ddp.buckets"].median()) if "ddp.buckets" in simulated
               else 1.0)
    columns = np.column_stack([buckets * np.log2(world), 2 * (world - 1) / world * grad_bytes])
    (alpha_s, beta_s), *_ = np.linalg.lstsq(columns, added.to_numpy(float), rcond=None)
    p = simulated["world_size"].to_numpy(float)
    batch = simulated["batch_size"].to_numpy(float)
    whole, terms = fit_points(p, batch, p * batch / simulated["throughput"].to_numpy(float),
                              grad_bytes, latency="log")
    if whole is None:
        raise SystemExit(f"no fit: {terms}")
    small = simulated[simulated["nodes"] <= 2]
    points = pd.DataFrame({"gpus": small["world_size"], "throughput": small["throughput"],
                           "per_gpu_batch": small["batch_size"]})
    top = int(p.max())
    asked = forecast(points, [top], gpus_per_node=2, unit="img/s").predictions[0]
    measured = float(simulated.loc[simulated["world_size"] == top, "throughput"].median())
    return {
        "alpha_ms": alpha_ms, "alpha_fit_ms": alpha_s * 1e3,
        "alpha_error": alpha_s * 1e3 / alpha_ms - 1,
        "beta_ns_per_byte": beta_ns, "beta_fit_ns_per_byte": beta_s * 1e9,
        "beta_error": beta_s * 1e9 / beta_ns - 1,
        "buckets": buckets, "grad_bytes": grad_bytes,
        "runs": len(bare) + len(simulated), "world_sizes": sorted({int(v) for v in p}),
        "model_alone": {"terms": terms, "alpha_ms": whole.alpha / buckets * 1e3,
                        "beta_ns_per_byte": whole.c * 1e9,
                        "compute_s": whole.a * float(np.median(batch))},
        "forecast": {"gpus": top, "from": sorted({int(v) for v in small["world_size"]}),
                     "throughput": asked.throughput, "low": asked.low, "high": asked.high,
                     "measured": measured, "inside": asked.low <= measured <= asked.high,
                     "error": asked.throughput / measured - 1},
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--alpha-ms", type=float, default=200.0)
    ap.add_argument("--beta-ns", type=float, default=100.0)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--out", type=Path, default=None,
                    help="where the study runs (default: a new temporary directory)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    if not os.environ.get("SLURM_CONF"):
        print('the Slurm testbed is not running: eval "$(scripts/slurm-testbed start)"',
              file=sys.stderr)
        return 2
    out = args.out or Path(tempfile.mkdtemp(prefix="known-alpha-beta-"))
    out.mkdir(parents=True, exist_ok=True)
    bare, simulated = run_study(out, args.alpha_ms, args.beta_ns, args.repeats)
    got = recover(bare, simulated, args.alpha_ms, args.beta_ns)
    ok = (abs(got["alpha_error"]) <= TOLERANCE and abs(got["beta_error"]) <= TOLERANCE
          and got["forecast"]["inside"])
    if args.json:
        print(json.dumps(got, indent=2))
    else:
        f = got["forecast"]
        print(f"{got['runs']} runs at world sizes {got['world_sizes']} ({out})")
        print("from the step time the simulated network added (simulated − bare):")
        print(f"alpha: set {args.alpha_ms:g} ms, fitted {got['alpha_fit_ms']:.2f} ms "
              f"({got['alpha_error']:+.1%}, per bucket; {got['buckets']:g} bucket(s))")
        print(f"beta:  set {args.beta_ns:g} ns/B, fitted {got['beta_fit_ns_per_byte']:.2f} "
              f"ns/B ({got['beta_error']:+.1%}; {got['grad_bytes'] / 1e6:.2f} MB of "
              "gradients)")
        alone = got["model_alone"]
        print(f"the model fitted to the simulated study alone ({alone['terms']}): alpha "
              f"{alone['alpha_ms']:.2f} ms, beta {alone['beta_ns_per_byte']:.2f} ns/B (the "
              "testbed's own allreduce included)")
        print(f"forecast of {f['gpus']} ranks from {f['from']}: {f['throughput']:.1f} img/s "
              f"[{f['low']:.1f}–{f['high']:.1f}], measured {f['measured']:.1f}: "
              f"{'inside' if f['inside'] else 'OUTSIDE'} ({f['error']:+.1%})")
        print("recovered within 10 %" if ok else "NOT recovered within 10 %")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
