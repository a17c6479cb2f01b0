"""The use cases: plan, run, status, cancel, collect, report, probe, compare.

Each is one function the CLI calls with typed arguments; none prints (a `say` callback,
a progress callback or a `Screen` reports), none parses a flag. Heavy modules (pandas,
matplotlib, SQLAlchemy) are imported inside the use cases that need them, and the names
below on first use (PEP 562), so that `scalestudy --help` and `validate` stay quick.
`planning`: what a plan says and allows before anything runs; `running`: the `run` use
case; `outcomes`: status, cancel, collect, report, probe, compare.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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

#: Each public name and the module that defines it.
_WHERE = {
    "Comparison": "scalestudy.study.outcomes",
    "MAX_ATTEMPTS": "scalestudy.study.planning",
    "Plan": "scalestudy.site.plan",
    "ProbeResult": "scalestudy.study.outcomes",
    "Queued": "scalestudy.study.running",
    "RunOutcome": "scalestudy.study.running",
    "RunRequest": "scalestudy.study.running",
    "Say": "scalestudy.study.planning",
    "Screen": "scalestudy.study.running",
    "Selection": "scalestudy.study.running",
    "allocation_lines": "scalestudy.study.outcomes",
    "cancel": "scalestudy.study.outcomes",
    "check_budget": "scalestudy.study.planning",
    "check_selection": "scalestudy.study.planning",
    "choose_runs": "scalestudy.study.running",
    "collect": "scalestudy.study.outcomes",
    "compare": "scalestudy.study.outcomes",
    "describe_axes": "scalestudy.study.planning",
    "dry_run": "scalestudy.study.running",
    "expected_node_hours": "scalestudy.study.planning",
    "job_limit": "scalestudy.study.planning",
    "limits_gate": "scalestudy.study.planning",
    "lock": "scalestudy.study.planning",
    "make_plan": "scalestudy.site.plan",
    "plan_adaptive": "scalestudy.study.adaptive",
    "plan_summary": "scalestudy.study.planning",
    "plan_warnings": "scalestudy.study.planning",
    "preflight": "scalestudy.study.planning",
    "preflight_gate": "scalestudy.study.planning",
    "probe": "scalestudy.study.outcomes",
    "report": "scalestudy.study.outcomes",
    "run": "scalestudy.study.running",
    "run_adaptive": "scalestudy.study.adaptive",
    "run_here": "scalestudy.study.running",
    "selected": "scalestudy.study.planning",
    "status": "scalestudy.study.outcomes",
    "submit": "scalestudy.study.running",
    "wait": "scalestudy.study.running",
}

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


def __getattr__(name: str) -> Any:
    """A use case, imported from its module the first time it is asked for."""
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_WHERE[name]), name)
    globals()[name] = value
    return value
