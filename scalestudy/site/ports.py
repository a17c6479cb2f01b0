"""Rendezvous ports, one rule for the job scripts and the packed steps' runner.

A job's port comes from its job number (jobs may share nodes), in [BASE, BASE + SPAN):
below the kernel's ephemeral range (32768 and up), where srun and MPI take theirs. The
job script computes it in shell from the number its scheduler gives (each scheduler's
template block `job_number`); a packed allocation's steps take ports of their own from
one block of STEP_BLOCK ports, chosen by the allocation's job number.
"""

from __future__ import annotations

BASE = 20000
SPAN = 10000
STEP_BLOCK = 1000


def job_number(job_id: str) -> int:
    """The digits of a job id's first dot-separated part (PBS: `123.server`), as a number
    (0 when there are none)."""
    digits = "".join(c for c in job_id.split(".")[0] if c.isdigit())
    return int(digits) if digits else 0


def step_port(job_id: str, started: int) -> int:
    """The port of an allocation's `started`-th step (counting from 0): the job's block
    of STEP_BLOCK ports, in the order the steps start."""
    block = job_number(job_id) % (SPAN // STEP_BLOCK)
    return BASE + block * STEP_BLOCK + started % STEP_BLOCK
