"""The figures only a GPU gives: the bundled workload beside bare PyTorch loops, in one call.

    python benchmarks/gpu_figures.py [--out DIR] [--budget-s 480] [--cpu-smoke]
        [--only cnn_bare cnn_ddp ...]

Steps, in this order (each a child process; its output goes to DIR/steps.log stamped
with the wall clock): the bare CNN loops (torchvision and bundled ResNet-50, the bundled
one in one-rank DDP, torchvision in fp16 with GradScaler); the workload's ResNet-50 under
torchrun (DDP, NCCL; diagnostics on: compute-only timing and the allreduce probe), again
with --gradient-as-bucket-view; the bare GPT loop; the workload's GPT under DDP and
FSDP2, then with --gradient-as-bucket-view and --no-reshard-after-forward; the workload's
ResNet-50 in fp16; the batch-size probe; `scalestudy validate --preflight` of a local
spec (benchmarks/gpu_local.yaml); the measured matmul peak, burst and sustained
(gpu_peak_check.py); the workload with torch.compile. nvidia-smi samples the board power
every 100 ms in the background (DIR/power.csv); each run's NVML energy over its timed
iterations is held against nvidia-smi's mean power over the same wall-clock window. A
step runs only when its estimate fits in what is left of `--budget-s`, so one call ends
in time and says what it skipped. DIR/results.json holds every figure and record
(rewritten after each step); DIR/summary.md the table, also printed last. dev/gpu.md
has the figures of 2026-11-26 and how they were taken.

`--cpu-smoke` runs every step at tiny sizes on the CPU (small CNN, gpt-tiny, gloo), so
the device call cannot fail on a typo; steps that need CUDA say so and are skipped.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from gpu_summary import energy_vs_power, read_power, summarize  # noqa: E402

#: Sizes on the GPU and in the CPU smoke test.
GPU = {"cnn": "resnet50", "image": 224, "cnn_batch": 256, "warmup": 4, "iters": 10,
       "steps": 5, "gpt": "gpt-1.3b", "seq": 1024, "gpt_warmup": 2, "gpt_iters": 8,
       "probe": ["--min-batch", "256", "--max-batch", "8192"], "compile_iters": 4}
SMOKE = {"cnn": "small_cnn", "image": 32, "cnn_batch": 8, "warmup": 1, "iters": 2,
         "steps": 2, "gpt": "gpt-tiny", "seq": 64, "gpt_warmup": 1, "gpt_iters": 2,
         "probe": ["--min-batch", "4", "--max-batch", "32", "--memory-limit-gb", "0.5"],
         "compile_iters": 2}
#: Each step's estimated seconds on the GPU (start-up included) and its hard limit.
ESTIMATE = {"cnn_bare": 70, "cnn_ddp": 40, "cnn_ddp_view": 30, "gpt_bare": 30,
            "gpt_ddp": 35, "gpt_fsdp": 35, "gpt_ddp_view": 35, "gpt_fsdp_keep": 35,
            "cnn_fp16": 30, "probe": 60, "preflight": 10, "peak_check": 45,
            "cnn_compile": 100, "energy_window": 45, "gpt_bare_compile": 70,
            "gpt_fsdp_compile": 80, "gpt_fsdp_compile_keep": 60, "gpt_fsdp_compile_b16": 70,
            "gpt_ddp_compile": 70, "cnn_bare_compile": 100, "cnn_compile_view": 80,
            "gpt_bare_compile_b16": 70}
#: Steps that need CUDA (skipped, and said so, in the CPU smoke test).
CUDA_ONLY = ("cnn_fp16", "peak_check", "energy_window")
STEPS = tuple(ESTIMATE)


class Runner:
    """Runs the steps' child processes under one budget, logging stamped output."""

    def __init__(self, out: Path, scratch: Path, budget_s: float, smoke: bool) -> None:
        self.out, self.scratch, self.smoke = out, scratch, smoke
        self.deadline = time.monotonic() + budget_s
        self.log = (out / "steps.log").open("a", buffering=1)
        self.env = {**os.environ, "PYTHONUNBUFFERED": "1",
                    "PYTHONPATH": os.pathsep.join(
                        p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)}
        if smoke:
            self.env.setdefault("OMP_NUM_THREADS", "1")

    def left(self) -> float:
        """Seconds of the budget left."""
        return self.deadline - time.monotonic()

    def run(self, name: str, cmd: list[str], limit_s: float) -> dict[str, Any]:
        """Run one child; its stamped lines, return code and seconds."""
        limit = max(5.0, min(limit_s, self.left()))
        self.log.write(f"### {name} {time.time():.3f} {' '.join(cmd)}\n")
        print(f"[{time.strftime('%H:%M:%S')}] {name}: {' '.join(cmd)}", flush=True)
        start = time.monotonic()
        proc = subprocess.Popen(cmd, cwd=ROOT, env=self.env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, start_new_session=True)
        lines: list[tuple[float, str]] = []
        reader = threading.Thread(target=self._read, args=(proc, lines), daemon=True)
        reader.start()
        timed_out = False
        try:
            proc.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill(proc)
        reader.join(timeout=10)
        rc = proc.wait()
        seconds = time.monotonic() - start
        tail = [text for _, text in lines[-15:]]
        print(f"    rc {rc}{' (timed out)' if timed_out else ''}, {seconds:.1f} s"
              + ("" if rc == 0 else "\n      " + "\n      ".join(tail)), flush=True)
        return {"rc": rc, "timed_out": timed_out, "seconds": round(seconds, 2),
                "lines": lines, "limit_s": round(limit, 1)}

    def _read(self, proc: subprocess.Popen[str], lines: list[tuple[float, str]]) -> None:
        """Stamp and keep each line of the child's output as it arrives."""
        assert proc.stdout is not None
        for line in proc.stdout:
            now = time.time()
            lines.append((now, line.rstrip("\n")))
            self.log.write(f"{now:.3f} {line.rstrip()}\n")


def _kill(proc: subprocess.Popen[str]) -> None:
    """End a child this script started, and its own children (its process group)."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=10)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)


def _records(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def bare(runner: Runner, name: str, args: list[str]) -> dict[str, Any]:
    """One gpu_bare.py process: its environment line and one result per variant."""
    cmd = [sys.executable, str(HERE / "gpu_bare.py"), *args]
    done = runner.run(name, cmd, ESTIMATE[name] * 3)
    out: dict[str, Any] = {k: v for k, v in done.items() if k != "lines"}
    out.update(command=" ".join(cmd), results=[],
               output_tail=[text for _, text in done["lines"][-25:]])
    for _, text in done["lines"]:
        if text.startswith("BARE-ENV "):
            out["env"] = json.loads(text[9:])
        elif text.startswith("BARE-RESULT "):
            out["results"].append(json.loads(text[12:]))
    return out


def _window(lines: list[tuple[float, str]], record: dict[str, Any]) -> list[float] | None:
    """Wall-clock window of a workload run's timed iterations: it ends when the last
    `Iter #` line arrives and lasts the rank's summed iteration seconds."""
    stamps = [t for t, text in lines if text.startswith("Iter #")]
    seconds = (record.get("rank_seconds") or [None])[0]
    if not stamps or seconds is None:
        return None
    return [stamps[-1] - seconds, stamps[-1]]


def workload(runner: Runner, name: str, args: list[str], torchrun: bool = True,
             metrics: bool = True) -> dict[str, Any]:
    """The bundled workload (under torchrun, one process) with its metrics record."""
    path = runner.scratch / f"{name}.jsonl"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           "--nproc-per-node=1", "-m"] if torchrun else [sys.executable, "-m"]
    cmd += ["scalestudy.workload", *args]
    if metrics:
        cmd += ["--metrics", str(path)]
    done = runner.run(name, cmd, ESTIMATE[name] * 3)
    records = _records(path)
    out = {k: v for k, v in done.items() if k != "lines"}
    out["command"] = " ".join(cmd)
    out["output_tail"] = [text for _, text in done["lines"][-25:]]
    if records:
        out["record"] = records[-1]
        out["window"] = _window(done["lines"], records[-1])
    return out


def steps(runner: Runner, sizes: dict[str, Any], cuda: str) -> dict[str, Any]:
    """name -> argument builder of each step."""
    s = sizes
    timing = ["--warmup-iters", str(s["warmup"]), "--iters", str(s["iters"]),
              "--batches-per-iter", str(s["steps"])]
    cnn = ["--model", s["cnn"], "--image-size", str(s["image"]), "--batch-size",
           str(s["cnn_batch"]), "--channels-last", "--device", cuda]
    gpt_batch = str(s["gpt_batch"])
    gpt = ["--model", s["gpt"], "--seq-len", str(s["seq"]), "--batch-size", gpt_batch,
           "--precision", "bf16", "--device", cuda, "--warmup-iters", str(s["gpt_warmup"]),
           "--iters", str(s["gpt_iters"]), "--batches-per-iter", str(s["steps"]),
           "--no-diagnostics", "--peak-tflops", "measure"]
    short = ["--warmup-iters", "2", "--iters", str(s["compile_iters"]),
             "--batches-per-iter", str(s["steps"]), "--no-diagnostics"]
    return {
        "cnn_bare": lambda: bare(runner, "cnn_bare", [
            "cnn", "--model", s["cnn"], "--image-size", str(s["image"]),
            "--batch-size", str(s["cnn_batch"]), "--precision", "bf16", "--channels-last",
            "--warmup", str(s["warmup"]), "--iters", str(s["iters"]), "--steps",
            str(s["steps"]), "--variants", "torchvision", "bundled", "bundled_ddp",
            "torchvision_fp16"]),
        "cnn_ddp": lambda: workload(runner, "cnn_ddp", [*cnn, "--precision", "bf16",
                                                        *timing, "--diagnostics"]),
        "cnn_ddp_view": lambda: workload(runner, "cnn_ddp_view", [
            *cnn, "--precision", "bf16", *timing, "--no-diagnostics",
            "--gradient-as-bucket-view"]),
        "cnn_fp16": lambda: workload(runner, "cnn_fp16", [*cnn, "--precision", "fp16",
                                                          *timing, "--no-diagnostics"]),
        "gpt_bare": lambda: bare(runner, "gpt_bare", [
            "gpt", "--model", s["gpt"], "--seq-len", str(s["seq"]), "--batch-size",
            gpt_batch, "--precision", "bf16", "--warmup", str(s["gpt_warmup"]), "--iters",
            str(s["gpt_iters"]), "--steps", str(s["steps"]), "--measure-peak"]),
        "gpt_ddp": lambda: workload(runner, "gpt_ddp", [*gpt, "--backend", "ddp"]),
        "gpt_fsdp": lambda: workload(runner, "gpt_fsdp", [*gpt, "--backend", "fsdp"]),
        "gpt_ddp_view": lambda: workload(runner, "gpt_ddp_view", [
            *gpt, "--backend", "ddp", "--gradient-as-bucket-view"]),
        "gpt_fsdp_keep": lambda: workload(runner, "gpt_fsdp_keep", [
            *gpt, "--backend", "fsdp", "--no-reshard-after-forward"]),
        "probe": lambda: workload(runner, "probe", [
            "--probe-batch", "--model", s["cnn"], "--image-size", str(s["image"]),
            "--precision", "bf16", "--channels-last", "--device", cuda, "--iters", "1",
            "--batches-per-iter", "2", *s["probe"]], torchrun=False),
        "preflight": lambda: _preflight(runner),
        "peak_check": lambda: _peak_check(runner),
        "cnn_compile": lambda: workload(runner, "cnn_compile", [
            *cnn, "--precision", "bf16", "--compile", *short]),
        "energy_window": lambda: _energy_window(runner),
        "gpt_bare_compile": lambda: bare(runner, "gpt_bare_compile", [
            "gpt", "--model", s["gpt"], "--seq-len", str(s["seq"]), "--batch-size",
            gpt_batch, "--precision", "bf16", "--warmup", str(s["gpt_warmup"]), "--iters",
            str(s["gpt_iters"]), "--steps", str(s["steps"]), "--compile"]),
        "gpt_bare_compile_b16": lambda: bare(runner, "gpt_bare_compile_b16", [
            "gpt", "--model", s["gpt"], "--seq-len", str(s["seq"]), "--batch-size",
            str(2 * int(gpt_batch)), "--precision", "bf16", "--warmup", str(s["gpt_warmup"]),
            "--iters", str(s["gpt_iters"]), "--steps", str(s["steps"]), "--compile"]),
        "gpt_fsdp_compile": lambda: workload(runner, "gpt_fsdp_compile", [
            *gpt, "--backend", "fsdp", "--compile", "--param-dtype", "compute"]),
        "gpt_fsdp_compile_keep": lambda: workload(runner, "gpt_fsdp_compile_keep", [
            *gpt, "--backend", "fsdp", "--compile", "--param-dtype", "compute",
            "--no-reshard-after-forward"]),
        "gpt_fsdp_compile_b16": lambda: workload(runner, "gpt_fsdp_compile_b16", [
            *_batch(gpt, 2 * int(gpt_batch)), "--backend", "fsdp", "--compile",
            "--param-dtype", "compute", "--no-reshard-after-forward"]),
        "gpt_ddp_compile": lambda: workload(runner, "gpt_ddp_compile", [
            *gpt, "--backend", "ddp", "--compile", "--gradient-as-bucket-view"]),
        "cnn_bare_compile": lambda: bare(runner, "cnn_bare_compile", [
            "cnn", "--model", s["cnn"], "--image-size", str(s["image"]),
            "--batch-size", str(s["cnn_batch"]), "--precision", "bf16", "--channels-last",
            "--warmup", str(s["warmup"]), "--iters", str(s["iters"]), "--steps",
            str(s["steps"]), "--variants", "torchvision", "bundled_ddp", "--compile"]),
        "cnn_compile_view": lambda: workload(runner, "cnn_compile_view", [
            *cnn, "--precision", "bf16", "--compile", *timing, "--no-diagnostics",
            "--gradient-as-bucket-view"]),
    }


def _batch(args: list[str], batch: int) -> list[str]:
    """`args` with --batch-size set to `batch`."""
    at = args.index("--batch-size")
    return [*args[:at + 1], str(batch), *args[at + 2:]]


def _energy_window(runner: Runner) -> dict[str, Any]:
    """benchmarks/gpu_energy_window.py: short NVML windows against a long one."""
    return _script(runner, "energy_window", "gpu_energy_window.py", "ENERGY-WINDOW ",
                   "figures")


def _script(runner: Runner, name: str, script: str, tag: str, key: str) -> dict[str, Any]:
    """Run benchmarks/SCRIPT as step `name`; its `tag` line's JSON under `key`."""
    done = runner.run(name, [sys.executable, str(HERE / script)], ESTIMATE[name] * 3)
    out: dict[str, Any] = {k: v for k, v in done.items() if k != "lines"}
    for _, text in done["lines"]:
        if text.startswith(tag):
            out[key] = json.loads(text[len(tag):])
    return out


def _preflight(runner: Runner) -> dict[str, Any]:
    """`scalestudy validate --preflight` of benchmarks/gpu_local.yaml on this host."""
    cmd = [sys.executable, "-c", "import sys; from scalestudy.cli import main; "
           "sys.argv[0] = 'scalestudy'; sys.exit(main())", "validate", "--preflight",
           str(HERE / "gpu_local.yaml")]
    done = runner.run("preflight", cmd, ESTIMATE["preflight"] * 3)
    return {"rc": done["rc"], "seconds": done["seconds"], "command": "scalestudy validate "
            "--preflight benchmarks/gpu_local.yaml",
            "output": [text for _, text in done["lines"]]}


def _peak_check(runner: Runner) -> dict[str, Any]:
    """benchmarks/gpu_peak_check.py: the measured matmul peak, burst and sustained."""
    return _script(runner, "peak_check", "gpu_peak_check.py", "PEAK-CHECK ", "peaks")


def _gpu_memory_gib() -> float | None:
    """Total memory of GPU 0 from nvidia-smi (no CUDA context in this process)."""
    try:
        text = subprocess.run(["nvidia-smi", "--query-gpu=memory.total",
                               "--format=csv,noheader,nounits", "-i", "0"],
                              capture_output=True, text=True, timeout=30).stdout
        return float(text.split()[0]) / 1024
    except (OSError, ValueError, IndexError, subprocess.SubprocessError):
        return None


#: nvidia-smi's sampling period (ms): 100 ms puts 8 instant samples in the shortest window.
POWER_MS = 100
POWER_FIELDS = "timestamp,power.draw,power.draw.instant,clocks.sm,utilization.gpu,memory.used"


def start_power(out: Path) -> tuple[subprocess.Popen[bytes], Any] | None:
    """nvidia-smi sampling the board power every POWER_MS into out/power.csv (the full
    field list, or timestamp and power.draw where this driver lacks the others), its
    output line-buffered (stdbuf) so that stopping it loses nothing."""
    if shutil.which("nvidia-smi") is None:
        return None
    line_buffered = ["stdbuf", "-oL"] if shutil.which("stdbuf") else []
    for fields in (POWER_FIELDS, "timestamp,power.draw"):
        sink = (out / "power.csv").open("wb")
        proc = subprocess.Popen([*line_buffered, "nvidia-smi", f"--query-gpu={fields}",
                                 "--format=csv", "-i", "0", "-lms", str(POWER_MS)],
                                stdout=sink, stderr=subprocess.DEVNULL)
        time.sleep(1.5)
        if proc.poll() is None:
            return proc, sink
        sink.close()
    return None


def stop_power(power: tuple[subprocess.Popen[bytes], Any] | None) -> None:
    """Stop the sampler this script started (SIGINT, as Ctrl-C ends its loop)."""
    if power is None:
        return
    proc, sink = power
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        proc.terminate()
        proc.wait(timeout=5)
    sink.close()


def main() -> None:
    """Run the steps that fit, write results.json and summary.md, print the table."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "gpu-figures")))
    p.add_argument("--budget-s", type=float, default=480.0)
    p.add_argument("--cpu-smoke", action="store_true")
    p.add_argument("--only", nargs="+", choices=STEPS, default=list(STEPS))
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="gpu-figures-"))
    runner = Runner(args.out, scratch, args.budget_s, args.cpu_smoke)
    memory = None if args.cpu_smoke else _gpu_memory_gib()
    sizes = dict(SMOKE if args.cpu_smoke else GPU)
    sizes["gpt_batch"] = 2 if args.cpu_smoke else 8  # fits an H100's 80 GB too
    cuda = "cpu" if args.cpu_smoke else "cuda"
    results: dict[str, Any] = {"sizes": sizes, "gpu_memory_gib": memory, "steps": {},
                               "skipped": {}, "smoke": args.cpu_smoke,
                               "started": time.time()}
    power = None if args.cpu_smoke else start_power(args.out)
    table = steps(runner, sizes, cuda)
    try:
        for name in args.only:
            if args.cpu_smoke and name in CUDA_ONLY:
                results["skipped"][name] = "needs CUDA"
                continue
            factor = 0.3 if args.cpu_smoke else 1.0
            if runner.left() < ESTIMATE[name] * factor:
                results["skipped"][name] = (f"budget: {runner.left():.0f} s left, the step "
                                            f"needs about {ESTIMATE[name]} s")
                print(f"skipped {name}: {results['skipped'][name]}", flush=True)
                continue
            results["steps"][name] = table[name]()
            _write(args.out / "results.json", results)
    finally:
        stop_power(power)
        shutil.rmtree(scratch, ignore_errors=True)
    samples = read_power(args.out / "power.csv")
    results["power_samples"] = len(samples)
    results["energy_vs_power"] = energy_vs_power(results["steps"], samples)
    _write(args.out / "results.json", results)
    text = summarize(results)
    (args.out / "summary.md").write_text(text)
    print(text, flush=True)


def _write(path: Path, results: dict[str, Any]) -> None:
    path.write_text(json.dumps(results, indent=1, default=str))


if __name__ == "__main__":
    main()
