"""The use cases: plan, run, status, cancel, collect, report, probe, compare.

Each is one function the CLI calls with typed arguments; none prints (a `say` callback,
a progress callback or a `Screen` reports), none parses a flag. Heavy modules (pandas,
matplotlib) are imported inside the use cases that need them, so `scalestudy --help`
stays instant. `planning`: what a plan says and allows before anything runs; `running`:
the `run` use case; `outcomes`: status, cancel, collect, report, probe, compare.
"""

from __future__ import annotations

from scalestudy.site.plan import Plan, make_plan
from scalestudy.study.adaptive import plan_adaptive, run_adaptive
from scalestudy.study.outcomes import (
    Comparison,
    ProbeResult,
    allocation_lines,
    cancel,
    collect,
    compare,
    probe,
    report,
    status,
)
from scalestudy.study.planning import (
    MAX_ATTEMPTS,
    Say,
    check_budget,
    check_selection,
    describe_axes,
    expected_node_hours,
    job_limit,
    limits_gate,
    lock,
    plan_summary,
    plan_warnings,
    preflight,
    preflight_gate,
    selected,
)
from scalestudy.study.running import (
    Queued,
    RunOutcome,
    RunRequest,
    Screen,
    Selection,
    choose_runs,
    dry_run,
    run,
    run_here,
    submit,
    wait,
)

__all__ = [
    "MAX_ATTEMPTS",
    "Comparison",
    "Plan",
    "ProbeResult",
    "Queued",
    "RunOutcome",
    "RunRequest",
    "Say",
    "Screen",
    "Selection",
    "allocation_lines",
    "cancel",
    "check_budget",
    "check_selection",
    "choose_runs",
    "collect",
    "compare",
    "describe_axes",
    "dry_run",
    "expected_node_hours",
    "job_limit",
    "limits_gate",
    "lock",
    "make_plan",
    "plan_adaptive",
    "plan_summary",
    "plan_warnings",
    "preflight",
    "preflight_gate",
    "probe",
    "report",
    "run",
    "run_adaptive",
    "run_here",
    "selected",
    "status",
    "submit",
    "wait",
]
