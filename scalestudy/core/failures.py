"""What a study's spec says about its system's failures, for the wall clock to a trained
model (docs/goodput.md): the failure rate to use while the results store holds too few
failures of the system, and the queue wait a restart pays where the store has none."""

from __future__ import annotations

from pydantic import Field

from scalestudy.core.specbase import Model


class Failures(Model):
    """The system's failures as the spec gives them."""

    per_node_hour: float = Field(
        ge=0, allow_inf_nan=False,
        description="failures per node-hour (node failures, timeouts, broken "
        "communication, launcher errors), used while the results store holds fewer than 3 "
        "of the system's; e.g. 0.001 (one in 1,000 node-hours)")
    queue_wait_s: float | None = Field(
        default=None, ge=0, allow_inf_nan=False,
        description="seconds a restarted job waits in the queue, used where the store "
        "holds no queue waits of the system's jobs")
