"""Check the goodput model (scalestudy/results/analysis/goodput.py) on the real Slurm
testbed: N seeded trials of one run of the bundled benchmark (gpt-tiny to a fixed number
of steps, 2 ranks, a checkpoint every E steps) whose ranks are SIGKILLed at a known
Poisson rate; after each kill `scalestudy run --rerun failed` starts the run again and it
resumes from its last checkpoint, until it finishes. Per trial, the measured goodput
against the model's prediction from the measured save, restart and start-up times.

What is measured, exactly:
- **failures**: a Poisson process of rate 1/M (M = --mtbf-s) in the job's *running*
  time: the clock runs while the run's job is RUNNING in Slurm and pauses between jobs
  (the dead job's teardown, the next `scalestudy run`, sbatch, the queue), where there
  is nothing to kill. A kill SIGKILLs one rank chosen at random (`srun
  --kill-on-bad-exit=1`, in the profile, then ends the step: without it a rank waiting
  for a dead rank 0 at the rendezvous waits out its 300 s timeout), or cancels the job
  when no rank has started yet. The clock stops once the run's record is written: the
  work is done and the wall clock ends there (the job's teardown is not struck). Seeded
  exponential gaps: trial i's kill times are the same in every repetition.
- **W, the useful time**: the finished record's `train_s`, the training time of the
  steps the run kept (a resumed run adds the checkpoint's to its own): the model's W,
  training without saves or failures.
- **wall clock**: from the first `scalestudy run` to the record's writing (the mtime of
  metrics.jsonl). **Measured goodput** = W / wall clock.
- **C**: the final attempt's `checkpoint_save_s` (the blocked time per save); **τ** =
  E × the mean step time (`train_s` / `steps_trained`).
- **R = R_out + R_in**: R_out from a kill to the next job RUNNING (per restart);
  R_in from that job's start to its first step (the job script's own lines, then
  `startup_s`: launch, imports, rendezvous, the checkpoint load), measured on the final
  attempt (the only one with a record).
- **S, the first start**: the first `run` to its job RUNNING, then R_in without the load;
  **O**: the final attempt's time outside its start-up, steps and saves (the last
  evaluation, gathering and writing the record). Both paid once, measured.

The model: T = goodput.expected_wall(W, save_s=C, mtbf_s=M, restart_s=R_in,
interval_s=τ).wall_s (Daly's exact expectation, a failure may strike a restart too).
Failures strike only in running time, so each of its T/M expected failures also pays
R_out, failure-free; the first start's in-job part may be struck too. Predicted wall
clock = S_out + (M + R_out)(e^(S_in/M) − 1) + T (1 + R_out / M) + O (the downtime
D = R_out of a task that restarts after each failure: E = (M + D)(e^(L/M) − 1)).
**Conditional** on the trial's realised k failures (Poisson luck taken out): S + W +
(W/τ) C + O + k (the model's lost time per failure + R_out).

    eval "$(scripts/slurm-testbed start)"
    python benchmarks/goodput_slurm.py [--trials 20] [--seed 49] [--steps 600]
        [--every-steps 50] [--mtbf-s 120] [--deadline HH:MM] [--json out.json]

Needs the testbed running and root (to read the ranks' /proc entries and kill them).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from scalestudy.results.analysis.goodput import expected_wall  # noqa: E402
from scalestudy.site import datagen  # noqa: E402
from scalestudy.workload.checkpoint import latest  # noqa: E402

PROFILE = """name: testbed-goodput
description: the localhost Slurm testbed (virtual nodes of 2 CPUs)
scheduler: slurm
launcher: srun
max_nodes: 4
cores_per_node: 2
threads_per_rank: 1
launcher_options: {cpu_bind: none, extra_args: [--kill-on-bad-exit=1]}
"""
SPEC = """name: {name}
system: profile.yaml
workload:
  model: {model}
  seq_len: 32
  warmup_iters: 1
  batches_per_iter: 5
  diagnostics: false
  data: {{path: {data}, workers: 0}}
  optimizer: adamw
  lr: 0.003
  checkpoint: {{every_steps: {every}}}
target: {{metric: val_loss, value: 0.01, eval_every: {steps}, max_steps: {steps}}}
grid: {{nodes: [{nodes}], ranks_per_node: [{ranks}], batch_size: [16]}}
job: {{walltime: "00:30:00"}}
"""
POLL_S = 0.25


@dataclass
class Attempt:
    """One job of a trial: when `run` was started, the job seen RUNNING, the ranks'
    launch line, and the kill (None: it finished)."""

    submitted: float
    job_id: str = ""
    running: float | None = None
    launched: float | None = None
    killed: float | None = None
    how: str = ""  # "rank" or "cancel"
    resume_train_s: float = 0.0  # the train_s of the checkpoint the next attempt finds


@dataclass
class Trial:
    """One trial's timeline and final record (seconds, time.time())."""

    index: int
    started: float
    attempts: list[Attempt] = field(default_factory=list)
    finished: float | None = None
    record: dict[str, Any] = field(default_factory=dict)


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """`scalestudy ARGS` as a user runs it."""
    return subprocess.run([sys.executable, "-c", "from scalestudy.cli import main; main()",
                           *args], cwd=cwd,
                          capture_output=True, text=True, timeout=300)


def job_state(job_id: str) -> str | None:
    """The job's state in squeue (None: no longer queued or running)."""
    out = subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%T"], capture_output=True,
                         text=True, timeout=30).stdout.split()
    return out[0] if out else None


def sacct_done(job_id: str) -> bool:
    """Accounting has the job's end (what `scalestudy run` asks before it resubmits)."""
    out = subprocess.run(["sacct", "-j", job_id, "-X", "-n", "-P", "-o", "State"],
                         capture_output=True, text=True, timeout=30).stdout.split()
    return bool(out) and out[0] not in ("PENDING", "RUNNING", "REQUEUED", "SUSPENDED",
                                        "COMPLETING", "CONFIGURING")


def ranks(job_id: str) -> dict[int, float | None]:
    """The job's rank processes (pid -> their launch line's time), from /proc."""
    found: dict[int, float | None] = {}
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            if b"scalestudy.workload" not in argv or Path(argv[0].decode()).name in (
                    "srun", "bash", "sh"):
                continue
            env = dict(kv.split(b"=", 1) for kv in (entry / "environ").read_bytes()
                       .split(b"\0") if b"=" in kv)
        except (OSError, ValueError):
            continue
        if env.get(b"SLURM_JOB_ID") == job_id.encode():
            at = env.get(b"SCALESTUDY_LAUNCHED_AT")
            found[int(entry.name)] = float(at) if at else None
    return found


def latest_job(study: Path) -> str | None:
    """The newest job id in the study's journal."""
    path = study / "jobs.jsonl"
    if not path.exists():
        return None
    ids = [json.loads(line).get("job_id") for line in path.read_text().splitlines()]
    ids = [str(i) for i in ids if i]
    return ids[-1] if ids else None


def submit(work: Path, spec: str, study: Path, previous: str | None) -> str:
    """`scalestudy run --rerun failed` until it has submitted a new job (right after a job
    ends, accounting may not have it yet); the new job's id."""
    for _ in range(60):
        done = cli("run", spec, "--rerun", "failed", "--max-attempts", "1000", cwd=work)
        job = latest_job(study)
        if done.returncode != 0:
            raise RuntimeError(f"scalestudy run: {done.stderr.strip()[-2000:]}")
        if job is not None and job != previous:
            return job
        time.sleep(1.0)
    raise RuntimeError(f"scalestudy run submitted nothing: {done.stdout}{done.stderr}")


def trial(index: int, work: Path, data: Path, args: argparse.Namespace) -> Trial:
    """One trial: run, kill at the Poisson times, run again, until the record is there."""
    rng = random.Random(args.seed * 1000 + index)  # the kill times
    pick = random.Random(args.seed * 1000 + index + 500)  # which rank
    name = f"gp{index:02d}"
    (work / f"{name}.yaml").write_text(SPEC.format(
        name=name, model=args.model, data=data, every=args.every_steps, steps=args.steps,
        nodes=args.nodes, ranks=args.ranks // args.nodes))
    study = work / "results" / name
    result = Trial(index, time.time())
    gap, clock, job = rng.expovariate(1 / args.mtbf_s), 0.0, None
    while True:
        attempt = Attempt(time.time())
        result.attempts.append(attempt)
        job = attempt.job_id = submit(work, f"{name}.yaml", study, job)
        last: float | None = None
        while (state := job_state(job)) is not None:
            now = time.time()
            if state == "RUNNING":
                if attempt.running is None:
                    attempt.running = now
                clock += 0.0 if last is None else now - last
                last = now
                alive = ranks(job)
                if attempt.launched is None and alive:
                    attempt.launched = min((t for t in alive.values() if t), default=None)
                # the record written, the work is done: the wall clock ends there, so
                # the job's teardown is never struck (else `run` would train it again)
                if clock >= gap and not any(study.glob("runs/*/metrics.jsonl")):
                    attempt.killed = time.time()
                    if alive:
                        os.kill(pick.choice(sorted(alive)), signal.SIGKILL)
                        attempt.how = "rank"
                    else:
                        subprocess.run(["scancel", job], timeout=30)
                        attempt.how = "cancel"
                    gap, clock = rng.expovariate(1 / args.mtbf_s), 0.0
                    break
            time.sleep(POLL_S)
        while job_state(job) is not None or not sacct_done(job):
            time.sleep(POLL_S)
        run_dir = next((study / "runs").iterdir())
        metrics = run_dir / "metrics.jsonl"
        if attempt.killed is None:
            if not metrics.exists():
                raise RuntimeError(f"trial {index}: job {job} ended without a record and "
                                   f"was not killed: see {run_dir}")
            result.finished = metrics.stat().st_mtime
            result.record = json.loads(metrics.read_text().splitlines()[-1])
            return result
        found = latest(run_dir / "checkpoint")
        outcome = (found[1].get("outcome") or {}) if found else {}
        attempt.resume_train_s = float(outcome.get("train_s", 0.0))


def median(values: list[float], default: float = 0.0) -> float:
    return statistics.median(values) if values else default


def analyse(trials: list[Trial], mtbf: float, every: int) -> list[dict[str, float]]:
    """Per trial: the measured parts, the measured goodput, the model's (unconditional
    and conditional on the realised failures)."""
    loads = [float(t.record["checkpoint_load_s"]) for t in trials
             if t.record.get("checkpoint_load_s")]
    outs = [a2.running - a1.killed for t in trials
            for a1, a2 in zip(t.attempts, t.attempts[1:], strict=False)
            if a1.killed is not None and a2.running is not None]
    saves = [float(t.record["checkpoint_save_s"]) for t in trials
             if t.record.get("checkpoints")]
    rows = []
    for t in trials:
        r, first, final = t.record, t.attempts[0], t.attempts[-1]
        assert t.finished is not None and final.running is not None
        kills = [a for a in t.attempts if a.killed is not None]
        work = float(r["train_s"])
        steps = int(r["steps_trained"])
        tau = every * work / steps
        save = float(r["checkpoint_save_s"]) if r.get("checkpoints") else median(saves)
        load = float(r.get("checkpoint_load_s") or median(loads))
        prologue = (final.launched - final.running) if final.launched else 0.0
        resumed = r.get("resumed_from_step") is not None
        began = prologue + float(r["startup_s"])  # the final attempt's start, to its first step
        r_in = began + (0.0 if resumed else load)
        s_in = r_in - load
        mine = [a2.running - a1.killed for a1, a2 in zip(t.attempts, t.attempts[1:],
                                                          strict=False)
                if a1.killed is not None and a2.running is not None]
        r_out = statistics.fmean(mine) if mine else median(outs)
        s_out = (first.running or first.submitted) - t.started
        trained_final = work - (kills[-1].resume_train_s if kills and resumed else 0.0)
        other = max(0.0, (t.finished - final.running) - began - trained_final
                    - int(r.get("checkpoints") or 0) * save)
        wall = t.finished - t.started
        g = expected_wall(work, save_s=save, mtbf_s=mtbf, restart_s=r_in, interval_s=tau)
        start = s_out + (mtbf + r_out) * math.expm1(s_in / mtbf)
        predicted = start + g.wall_s * (1 + r_out / mtbf) + other
        per_failure = g.lost_per_failure_s + r_out
        conditional = s_out + s_in + work + work / tau * save + other + len(kills) * per_failure
        rows.append({"trial": t.index, "failures": len(kills), "work_s": work,
                     "wall_s": wall, "goodput": work / wall, "save_s": save, "tau_s": tau,
                     "load_s": load, "restart_in_s": r_in, "restart_out_s": r_out,
                     "first_start_s": s_out + s_in, "start_out_s": s_out, "other_s": other,
                     "expected_failures": g.failures,
                     "model_wall_s": predicted, "model_goodput": work / predicted,
                     "conditional_goodput": work / conditional,
                     "per_failure_s": per_failure})
    return rows


def simulate(row: dict[str, float], mtbf: float, rng: random.Random) -> float:
    """One wall clock of a trial like `row` under exactly the model's assumptions: the
    first start's in-job part, each segment (τ of work, then a save) and each restart's
    in-job part R_in are struck at rate 1/M (memoryless: a fresh draw per phase); each
    failure then pays R_out, failure-free, and the phase starts again (a segment after
    R_in)."""
    def through(length: float) -> float:  # a phase of `length`, restarted after failures
        took = 0.0
        while (x := rng.expovariate(1 / mtbf)) < length:
            took += x + row["restart_out_s"]
        return took + length

    s_in = row["first_start_s"] - row["start_out_s"]
    t, done = row["start_out_s"] + through(s_in) + row["other_s"], 0.0
    while done < row["work_s"] - 1e-9:
        seg = min(row["tau_s"], row["work_s"] - done)
        t += through_segment(seg + row["save_s"], row, mtbf, rng)
        done += seg
    return t


def through_segment(length: float, row: dict[str, float], mtbf: float,
                    rng: random.Random) -> float:
    """A segment of `length` (work and its save): a failure within it costs the time
    since it began, R_out, then R_in (which may be struck too) and the segment again."""
    took = 0.0
    while (x := rng.expovariate(1 / mtbf)) < length:
        took += x + row["restart_out_s"]
        while (y := rng.expovariate(1 / mtbf)) < row["restart_in_s"]:
            took += y + row["restart_out_s"]
        took += row["restart_in_s"]
    return took + length


def ceiling(row: dict[str, float], mtbf: float, seed: int, n: int = 2000) -> tuple[float, float]:
    """With the model exact (simulated trials like `row`): the share within ±3 points of
    the model's goodput, and the simulated mean wall clock (the formula's check)."""
    rng = random.Random(seed)
    walls = [simulate(row, mtbf, rng) for _ in range(n)]
    within = sum(abs(row["work_s"] / w - row["model_goodput"]) <= 0.03 for w in walls) / n
    return within, statistics.fmean(walls)


def summary(rows: list[dict[str, float]], args: argparse.Namespace) -> dict[str, Any]:
    """The shares within ±3 points and the mean errors."""
    def share(key: str) -> float:
        return sum(abs(r["goodput"] - r[key]) <= 0.03 for r in rows) / len(rows)

    def mean_error(key: str) -> float:
        return statistics.fmean(r["goodput"] - r[key] for r in rows)

    for r in rows:
        r["ceiling_within"], r["simulated_wall_s"] = ceiling(r, args.mtbf_s,
                                                             args.seed + int(r["trial"]))
    return {"trials": len(rows), "seed": args.seed, "mtbf_s": args.mtbf_s,
            "per_node_hour": 3600 / (args.mtbf_s * args.nodes), "steps": args.steps,
            "every_steps": args.every_steps, "model": args.model, "ranks": args.ranks,
            "nodes": args.nodes,
            "within_3_points": share("model_goodput"),
            "within_3_points_conditional": share("conditional_goodput"),
            "mean_error_points": 100 * mean_error("model_goodput"),
            "mean_error_conditional_points": 100 * mean_error("conditional_goodput"),
            "mean_abs_error_conditional_points": 100 * statistics.fmean(
                abs(r["goodput"] - r["conditional_goodput"]) for r in rows),
            "within_3_points_if_the_model_were_exact": statistics.fmean(
                r["ceiling_within"] for r in rows),
            "simulated_over_model_wall": statistics.fmean(
                r["simulated_wall_s"] / r["model_wall_s"] for r in rows),
            "failures": sum(int(r["failures"]) for r in rows),
            "expected_failures": sum(r["expected_failures"] for r in rows),
            "mean_goodput": statistics.fmean(r["goodput"] for r in rows),
            "mean_model_goodput": statistics.fmean(r["model_goodput"] for r in rows),
            "rows": rows}


def table(rows: list[dict[str, float]]) -> str:
    """The per-trial table (Markdown)."""
    head = ("| trial | failures (expected) | W s | wall s | goodput | model | conditional | "
            "C s | τ s | R_in s | R_out s | exact model ±3 |\n"
            "|---|---|---|---|---|---|---|---|---|---|---|---|")
    lines = [head] + [
        f"| {r['trial']} | {r['failures']} ({r['expected_failures']:.2f}) | "
        f"{r['work_s']:.0f} | {r['wall_s']:.0f} | {r['goodput']:.1%} | "
        f"{r['model_goodput']:.1%} | {r['conditional_goodput']:.1%} | {r['save_s']:.2f} | "
        f"{r['tau_s']:.1f} | {r['restart_in_s']:.1f} | {r['restart_out_s']:.1f} | "
        f"{r['ceiling_within']:.0%} |" for r in rows]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--seed", type=int, default=49)
    parser.add_argument("--steps", type=int, default=600, help="max_steps of the run")
    parser.add_argument("--every-steps", type=int, default=50, help="a checkpoint every")
    parser.add_argument("--mtbf-s", type=float, default=120.0,
                        help="the job's mean time between kills, in running seconds")
    parser.add_argument("--model", default="gpt-tiny")
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--nodes", type=int, default=1)
    parser.add_argument("--deadline", default=None,
                        help="HH:MM (UTC): start no trial after it")
    parser.add_argument("--json", type=Path, default=None, help="write the summary here")
    parser.add_argument("--keep", type=Path, default=None, help="work here, and keep it")
    parser.add_argument("--analyse", type=Path, default=None,
                        help="no trials: analyse the ones a --json file holds")
    args = parser.parse_args()
    if args.analyse is not None:
        saved = json.loads(args.analyse.read_text())
        raw = saved.get("trials_raw") or saved["trials"]
        done = [Trial(t["index"], t["started"], [Attempt(**a) for a in t["attempts"]],
                      t["finished"], t["record"]) for t in raw]
        return report(done, args)
    if shutil.which("sbatch") is None or "SLURM_CONF" not in os.environ:
        print("goodput_slurm: no Slurm testbed: run `eval \"$(scripts/slurm-testbed "
              "start)\"` first", file=sys.stderr)
        return 2
    work = args.keep or Path(tempfile.mkdtemp(prefix="goodput-slurm-"))
    work.mkdir(parents=True, exist_ok=True)
    (work / "profile.yaml").write_text(PROFILE)
    # the trials' attempts go to a store of their own, never the user's
    os.environ.setdefault("SCALESTUDY_STORE", str(work / "history.sqlite"))
    data = work / "tokens"
    if not data.exists():
        datagen.write_atomic_dir(data, lambda d: datagen.write_tokens(d, 100_000, 16, seed=3))
    stop = None
    if args.deadline:
        hh, mm = (int(x) for x in args.deadline.split(":"))
        now = datetime.now(timezone.utc)
        stop = now.replace(hour=hh, minute=mm, second=0, microsecond=0).timestamp()
    trials: list[Trial] = []
    for i in range(args.trials):
        if stop is not None and time.time() > stop:
            print(f"deadline {args.deadline} UTC passed: {len(trials)} trial(s) run",
                  file=sys.stderr)
            break
        t = trial(i, work, data, args)
        trials.append(t)
        row = analyse([t, *trials[:-1]], args.mtbf_s, args.every_steps)[0]
        print(f"trial {i}: {row['failures']} failure(s), goodput {row['goodput']:.1%}, "
              f"model {row['model_goodput']:.1%}, conditional "
              f"{row['conditional_goodput']:.1%} (wall {row['wall_s']:.0f} s)", flush=True)
        if args.json:
            args.json.write_text(json.dumps({"trials": [asdict(x) for x in trials]}))
    return report(trials, args) if trials else 1


def report(trials: list[Trial], args: argparse.Namespace) -> int:
    """Print the table and the summary; write them with the raw trials to --json."""
    rows = analyse(trials, args.mtbf_s, args.every_steps)
    result = summary(rows, args)
    print(table(rows))
    print(json.dumps({k: v for k, v in result.items() if k != "rows"}, indent=1))
    if args.json:
        args.json.write_text(json.dumps({**result, "trials_raw": [asdict(x) for x in trials]},
                                        indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
