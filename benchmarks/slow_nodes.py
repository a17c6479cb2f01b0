"""Slow nodes named from ordinary runs, on a real scheduler: randomized trials in which one
node of the testbed is slowed by a CPU quota, and trials with no fault.

    eval "$(scripts/slurm-testbed start --nodes 4)"
    python benchmarks/slow_nodes.py [--trials 30] [--clean 10] [--seed 1] [--out DIR] [--json]
    eval "$(scripts/pbs-testbed start)"
    python benchmarks/slow_nodes.py --system pbs [...]
    eval "$(scripts/flux-testbed start)"
    python benchmarks/slow_nodes.py --system flux [...]

A trial has its own results store. Each study in it is one run of the bundled workload
on every node of the testbed, one rank per node (small_cnn; its 24 compute-only steps,
about 1 s, give each rank's compute time, `rank_compute_s`). In a faulted trial one
node, drawn at random, runs under a CPU quota drawn from 20-35 % of a CPU (four ranks
share the machine's two cores, so each has about half of one): the node's daemon
(Slurm's slurmd; PBS's pbs_mom, whose TM spawns the job's processes there; Flux's
broker, whose job shells start the tasks) is put in a cgroup (v1 `cpu` controller, a
quota per 10 ms period), so every process of a job on that node inherits the quota, the
way a node with a runaway process or a throttled socket drags its ranks. On PBS and
Flux every command runs as the testbed's user (scripts/*-testbed exec). After each
study, `scalestudy history ingest` and `scalestudy history nodes --json`; the trial stops
when a node is named or after 3 studies. Precision is over every node named in any
trial; recall over the faulted trials; a clean trial must name none. In the first
faulted trials that name their node (--exclude-checks), `history nodes --write-exclude`
writes the list and a 3-node study run with `run --exclude-nodes` must avoid that node
(the job's node list from sacct, exec_host from qstat, or Flux's nodelist).

Exit 0 when precision >= 95 %, recall >= 90 %, no clean trial accuses a node and every
exclusion check avoided its node; 1 otherwise; 2 when the testbed is missing.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

from testbeds import slurm_profile  # noqa: E402

CGROUP = Path("/sys/fs/cgroup/cpu")
QUOTA = (0.20, 0.35)
PERIOD_US = 10_000
STUDIES = 3
STUDY = """\
name: {name}
system: profile.yaml
workload: {{model: small_cnn, image_size: 32, num_classes: 10, warmup_iters: 1, iters: 3,
           batches_per_iter: 8}}
grid: {{nodes: [{nodes}], ranks_per_node: [1], batch_size: [8]}}
job: {{walltime: "00:05:00"}}
"""


class Slurm:
    """The localhost Slurm testbed (scripts/slurm-testbed)."""

    name = "slurm"

    def nodes(self) -> list[str]:
        if not os.environ.get("SLURM_CONF"):
            return []
        got = subprocess.run(["sinfo", "-h", "-N", "-o", "%N"], capture_output=True,
                             text=True)
        return sorted(set(got.stdout.split()))

    def daemon_pid(self, node: str) -> int:
        state = Path(os.environ.get("SCALESTUDY_SLURM_DIR", "/tmp/scalestudy-slurm"))
        return int((state / "nodes" / node / "slurmd.pid").read_text().split()[0])

    def profile(self) -> str:
        return slurm_profile("testbed-slow")

    def workdir(self, path: Path) -> Path:
        path.mkdir(parents=True)
        return path

    def cli(self, *args: str, cwd: Path, env: dict[str, str]
            ) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-c", "from scalestudy.cli import main; main()",
                               *args], cwd=cwd, env={**os.environ, **env},
                              capture_output=True, text=True)

    def hosts_of(self, job: str) -> list[str]:
        nodes = subprocess.run(["sacct", "-n", "-X", "-P", "-j", job, "-o", "NodeList"],
                               capture_output=True, text=True).stdout.strip()
        return subprocess.run(["scontrol", "show", "hostnames", nodes],
                              capture_output=True, text=True).stdout.split()


class _AsUser:
    """A testbed whose clients run as its own user (the script's `exec`)."""

    script: Path
    user: str

    def workdir(self, path: Path) -> Path:
        path.mkdir(parents=True)
        path.chmod(0o755)
        shutil.chown(path, user=self.user, group=self.user)
        return path

    def run_as_user(self, *argv: str, cwd: Path | None = None
                    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(self.script), "exec", "--", *argv], cwd=cwd,
                              capture_output=True, text=True)

    def cli(self, *args: str, cwd: Path, env: dict[str, str]
            ) -> subprocess.CompletedProcess[str]:
        words = [f"{k}={v}" for k, v in env.items()]
        return self.run_as_user("env", f"PYTHONPATH={ROOT}", *words,
                                str(ROOT / ".venv" / "bin" / "python"), "-c",
                                "from scalestudy.cli import main; main()", *args, cwd=cwd)


class Pbs(_AsUser):
    """The OpenPBS testbed (scripts/pbs-testbed): clients run as pbsuser on its head."""

    name = "pbs"
    script = ROOT / "scripts" / "pbs-testbed"
    user = "pbsuser"

    def nodes(self) -> list[str]:
        listed = os.environ.get("SCALESTUDY_PBS_NODES", "")
        return sorted(n for n in listed.split(",") if n)

    def daemon_pid(self, node: str) -> int:
        state = Path(os.environ.get("SCALESTUDY_PBS_DIR", "/var/spool/scalestudy-pbs"))
        return int((state / "moms" / node / "mom_priv" / "mom.lock").read_text().split()[0])

    def profile(self) -> str:
        from tests.test_e2e_pbs import PROFILE

        return PROFILE.format(python=ROOT / ".venv" / "bin" / "python").replace(
            "name: pbslab", "name: pbslab-slow")

    def hosts_of(self, job: str) -> list[str]:
        shown = self.run_as_user("/opt/pbs/bin/qstat", "-x", "-f", "-F", "json", job)
        attrs = next(iter(json.loads(shown.stdout)["Jobs"].values()))
        return [chunk.split("/")[0] for chunk in attrs["exec_host"].split("+")]


class Flux(_AsUser):
    """The Flux testbed (scripts/flux-testbed): four brokers, each in its own UTS
    namespace (its hostname its node name); clients and jobs run as its user."""

    name = "flux"
    script = ROOT / "scripts" / "flux-testbed"

    def __init__(self) -> None:
        self.user = os.environ.get("SCALESTUDY_FLUX_USER", "fluxuser")

    def nodes(self) -> list[str]:
        if os.environ.get("SCALESTUDY_FLUX_HOSTNAMES") != "own":
            return []  # ranks would all record the machine's hostname
        return sorted(n for n in os.environ.get("SCALESTUDY_FLUX_NODES", "").split(",") if n)

    def daemon_pid(self, node: str) -> int:
        """The node's broker: the job shells and tasks there are its descendants."""
        wanted = f"--setattr=hostname={node}".encode()
        for entry in Path("/proc").iterdir():
            with contextlib.suppress(OSError):
                argv = (entry / "cmdline").read_bytes().split(b"\0")
                if argv[0].endswith(b"flux-broker") and wanted in argv:
                    return int(entry.name)
        raise RuntimeError(f"no flux-broker for {node} (is the Flux testbed running?)")

    def profile(self) -> str:
        from tests.test_e2e_flux import PROFILE

        # the fake nodes all name cores 0-1 of one machine: bound per task, every rank
        # would share core 0 (a quarter each, what the quota gives); unbound, as on Slurm
        profile = PROFILE.format(python=ROOT / ".venv" / "bin" / "python", queue="batch")
        return profile.replace("name: fluxlab", "name: fluxlab-slow").replace(
            "cpu_bind: per-task", 'cpu_bind: "off"')

    def hosts_of(self, job: str) -> list[str]:
        nodelist = self.run_as_user("flux", "jobs", "-n", "-o", "{nodelist}", job).stdout
        return self.run_as_user("flux", "hostlist", "--expand", "--delimiter= ",
                                nodelist.strip()).stdout.split()


TESTBEDS = {"slurm": Slurm, "pbs": Pbs, "flux": Flux}


@contextlib.contextmanager
def quota(pid: int | None, share: float) -> Iterator[None]:
    """The process `pid` (a node's scheduler daemon: every job process it starts) under a
    CFS quota of `share` of one CPU; nothing when `pid` is None."""
    if pid is None:
        yield
        return
    group = CGROUP / f"scalestudy-slow-{os.getpid()}"
    group.mkdir()
    try:
        # a 10 ms period: a step of tens of ms is throttled evenly, not in one lump
        (group / "cpu.cfs_period_us").write_text(str(PERIOD_US))
        (group / "cpu.cfs_quota_us").write_text(str(int(share * PERIOD_US)))
        (group / "cgroup.procs").write_text(str(pid))
        yield
    finally:
        (CGROUP / "cgroup.procs").write_text(str(pid))
        for _ in range(50):  # the job's processes may take a moment to go
            try:
                group.rmdir()
                break
            except OSError:
                for stray in (group / "cgroup.procs").read_text().split():
                    with contextlib.suppress(OSError):
                        (CGROUP / "cgroup.procs").write_text(stray)
                time.sleep(0.2)


def study(bed: Slurm | Pbs | Flux, trial_dir: Path, env: dict[str, str], name: str, nodes: int,
          extra: tuple[str, ...] = ()) -> Path:
    """Run one study to the end and store it; its directory."""
    spec = trial_dir / f"{name}.yaml"
    spec.write_text(STUDY.format(name=name, nodes=nodes))
    spec.chmod(0o644)
    done = bed.cli("run", spec.name, "--wait", *extra, cwd=trial_dir, env=env)
    if done.returncode != 0:
        raise RuntimeError(f"run {name} failed: {done.stderr[-2000:]}")
    directory = trial_dir / "results" / name
    stored = bed.cli("history", "ingest", str(directory), cwd=trial_dir, env=env)
    if stored.returncode != 0:
        raise RuntimeError(f"history ingest {name} failed: {stored.stderr[-2000:]}")
    return directory


def named(bed: Slurm | Pbs | Flux, trial_dir: Path, env: dict[str, str]) -> dict[str, Any]:
    done = bed.cli("history", "nodes", "--json", cwd=trial_dir, env=env)
    if done.returncode != 0:
        raise RuntimeError(f"history nodes failed: {done.stderr[-2000:]}")
    return json.loads(done.stdout)


def job_hosts(bed: Slurm | Pbs | Flux, directory: Path) -> list[str]:
    """The nodes the scheduler gave each run of a study."""
    hosts: list[str] = []
    for run_dir in sorted((directory / "runs").iterdir()):
        hosts += bed.hosts_of(str(json.loads((run_dir / "status.json").read_text())["job_id"]))
    return hosts


def trial(bed: Slurm | Pbs | Flux, k: int, slow: str | None, share: float, nodes: list[str],
          out: Path, exclude_check: bool) -> dict[str, Any]:
    trial_dir = bed.workdir(out / f"trial-{k:02d}")
    (trial_dir / "profile.yaml").write_text(bed.profile())
    (trial_dir / "profile.yaml").chmod(0o644)
    env = {"SCALESTUDY_STORE": f"sqlite:///{trial_dir / 'store.sqlite'}"}
    result: dict[str, Any] = {"trial": k, "slow": slow, "quota": round(share, 3),
                              "named": [], "studies": 0}
    started = time.monotonic()
    with quota(None if slow is None else bed.daemon_pid(slow), share):
        for s in range(1, STUDIES + 1):
            study(bed, trial_dir, env, f"s{s}", len(nodes))
            found = named(bed, trial_dir, env)
            result["studies"] = s
            result["named"] = [n["host"] for n in found["slow"]]
            result["evidence"] = [{k2: n[k2] for k2 in ("host", "slower", "low", "high", "z")}
                                  for n in found["slow"]]
            result["noise"] = found["noise"]
            if result["named"]:
                break
    if exclude_check and slow is not None and result["named"] == [slow]:
        listing = trial_dir / "exclude.txt"
        done = bed.cli("history", "nodes", "--write-exclude", str(listing), cwd=trial_dir,
                       env=env)
        if done.returncode != 0:
            raise RuntimeError(f"--write-exclude failed: {done.stderr[-2000:]}")
        directory = study(bed, trial_dir, env, "excluded", len(nodes) - 1,
                          ("--exclude-nodes", str(listing)))
        hosts = job_hosts(bed, directory)
        result["exclude_check"] = {"hosts": hosts, "avoided": bool(hosts)
                                   and slow not in hosts}
    result["seconds"] = round(time.monotonic() - started, 1)
    return result


def score(results: list[dict[str, Any]]) -> dict[str, Any]:
    faulted = [r for r in results if r["slow"] is not None]
    clean = [r for r in results if r["slow"] is None]
    accusations = [(r["slow"], host) for r in results for host in r["named"]]
    right = sum(1 for slow, host in accusations if host == slow)
    checks = [r["exclude_check"] for r in results if "exclude_check" in r]
    found = [r for r in faulted if r["slow"] in r["named"]]
    return {"faulted_trials": len(faulted), "clean_trials": len(clean),
            "named": len(accusations), "named_right": right,
            "precision": right / len(accusations) if accusations else 1.0,
            "recall": len(found) / len(faulted) if faulted else 1.0,
            "clean_accusations": sum(len(r["named"]) for r in clean),
            "studies_to_name": sorted(r["studies"] for r in found),
            "exclude_checks": len(checks),
            "exclude_avoided": sum(1 for c in checks if c["avoided"])}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--system", choices=tuple(TESTBEDS), default="slurm")
    parser.add_argument("--trials", type=int, default=30, help="faulted trials")
    parser.add_argument("--clean", type=int, default=5, help="trials with no fault")
    parser.add_argument("--exclude-checks", type=int, default=2)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    bed = TESTBEDS[args.system]()
    nodes = bed.nodes()
    if len(nodes) < 4:
        start = {"slurm": "slurm-testbed start --nodes 4"}.get(bed.name,
                                                               f"{bed.name}-testbed start")
        print(f"benchmarks/slow_nodes.py --system {bed.name} needs its testbed with 4 "
              f'nodes (Flux: each with its own hostname): eval "$(scripts/{start})"',
              file=sys.stderr)
        return 2
    if not os.access(CGROUP / "cgroup.procs", os.W_OK):
        print(f"{CGROUP} is not writable here (the CPU quota needs cgroup v1's cpu "
              "controller, as root)", file=sys.stderr)
        return 2
    rng = random.Random(args.seed)
    plan = [rng.choice(nodes) for _ in range(args.trials)] + [None] * args.clean
    rng.shuffle(plan)
    out = args.out or Path(tempfile.mkdtemp(prefix="slow-nodes-"))
    out.mkdir(parents=True, exist_ok=True)
    out.chmod(0o755)
    results: list[dict[str, Any]] = []
    checks_left = args.exclude_checks
    for k, slow in enumerate(plan):
        got = trial(bed, k, slow, rng.uniform(*QUOTA), nodes, out, checks_left > 0)
        checks_left -= "exclude_check" in got
        results.append(got)
        print(json.dumps(got), file=sys.stderr, flush=True)
        (out / "trials.jsonl").open("a").write(json.dumps(got) + "\n")
    summary = score(results)
    summary.update(system=bed.name, nodes=nodes, seed=args.seed)
    print(json.dumps(summary) if args.json else
          f"{bed.name} testbed, {len(nodes)} nodes: {summary['faulted_trials']} faulted and "
          f"{summary['clean_trials']} clean trials; precision {summary['precision']:.1%} "
          f"({summary['named_right']} of {summary['named']} named), recall "
          f"{summary['recall']:.1%}, studies to name the node {summary['studies_to_name']}; "
          f"clean trials accused {summary['clean_accusations']} node(s); exclusion avoided "
          f"the node in {summary['exclude_avoided']} of {summary['exclude_checks']}")
    ok = (summary["precision"] >= 0.95 and summary["recall"] >= 0.90
          and summary["clean_accusations"] == 0
          and summary["exclude_avoided"] == summary["exclude_checks"])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
