"""The engines that run a packed allocation's steps, in one registry: what each does (the
submitting side asks it, never its name) and what runs it inside the allocation.

An engine takes the allocation directory and the job id, runs the steps of
allocation.json on the nodes of `nodefile`, and writes the step journal (steplog) to
steps.jsonl: the submitting side reads nothing else. allocation.json records the
engine's name (`engine`, default "steps"); `main` runs it by that name. The standard
library alone: this module runs inside the allocation.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from scalestudy.execute.packing import allocfile
from scalestudy.execute.packing.nested import FluxEngine
from scalestudy.execute.packing.runner import Runner

if TYPE_CHECKING:
    from scalestudy.site.schedulers import Packing


class Runs(Protocol):
    """What runs an allocation's steps: `run()` to the end, its exit status."""

    def run(self) -> int: ...


@dataclass(frozen=True)
class Engine:
    """One way to run a packed allocation's steps."""

    #: The name a spec asks for (`job.pack_engine`) and allocation.json records.
    name: str
    #: Each step is a Flux job of an instance inside the allocation: the run's own Flux
    #: job script, its output joined into flux.log. Else a step of scalestudy's runner on
    #: its own hosts ($SCALESTUDY_STEP_HOSTFILE).
    flux_jobs: bool
    #: What runs it inside the allocation, given the directory and the job id.
    runs: Callable[[Path, str], Runs]


#: Every engine, by name: scalestudy's step runner, and a Flux instance nested in the
#: allocation that runs each step as a Flux job (execute.packing.nested).
ENGINES: dict[str, Engine] = {e.name: e for e in (
    Engine("steps", flux_jobs=False, runs=Runner),
    Engine("flux", flux_jobs=True, runs=FluxEngine))}


def engine_for(packing: Packing, asked: str) -> Engine:
    """The engine of a scheduler's packed allocations, given the spec's: a job that is a
    Flux instance already runs its steps as Flux jobs, whatever the spec asks."""
    if packing.job_is_flux_instance:
        return next(e for e in ENGINES.values() if e.flux_jobs)
    return ENGINES[asked]


def main(argv: list[str]) -> int:
    """`python -m scalestudy.execute.allocation DIR JOB_ID`: the allocation's engine."""
    if len(argv) != 2:
        print("usage: python -m scalestudy.execute.allocation DIR JOB_ID", file=sys.stderr)
        return 2
    directory = Path(argv[0])
    name = allocfile.read(directory).get("engine", "steps")
    engine = ENGINES.get(name)
    if engine is None:
        print(f"allocation engine {name!r} is not known here (known: "
              f"{', '.join(sorted(ENGINES))}): this scalestudy is older than the one that "
              "wrote allocation.json", file=sys.stderr)
        return 2
    return int(engine.runs(directory, argv[1]).run())
