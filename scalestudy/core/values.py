"""JSON-shaped values: the one alias for data whose shape nobody promises, and the one
helper that reads a JSON value or table cell as a number.

Data with a known shape gets a TypedDict where it is written (store rows, allocation.json,
the template context, forecasts); `JSON` is for the rest (a user's record fields, an
imported tool's extras): narrow it with isinstance, or read it with `number`.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from typing import TypeAlias

#: A value `json.loads` returns (or a YAML scalar, or a stored cell): narrow before use.
JSON: TypeAlias = object
#: A JSON object as read: its keys are text, its values anything JSON holds.
JSONObject: TypeAlias = dict[str, JSON]
#: A JSON object as a parameter (any mapping of text to values).
JSONMapping: TypeAlias = Mapping[str, JSON]


def number(value: object, *, text: bool = False, booleans: bool = False,
           finite: bool = True) -> float | None:
    """`value` as a float, None where it is not a number: None, NaN, other types, and
    unless asked for, text ("1.5"), booleans (True as 1.0) and infinities (`finite`:
    inf is None too; NaN always is, JSON has none)."""
    if value is None or (isinstance(value, bool) and not booleans):
        return None
    if isinstance(value, str):
        if not text:
            return None
        try:
            result = float(value)
        except ValueError:
            return None
    elif isinstance(value, numbers.Real):
        result = float(value)
    else:
        return None
    if math.isnan(result) or (finite and math.isinf(result)):
        return None
    return result


def member(value: object, *path: str) -> JSONObject:
    """The JSON object at `path` inside `value` (`member(row["provenance"], "placement")`);
    {} where a step is missing, null or not an object."""
    for key in path:
        value = value.get(key) if isinstance(value, dict) else None
    return value if isinstance(value, dict) else {}


def array(value: object) -> list[JSON]:
    """`value` if it is a JSON array, else [] (missing, null or another type)."""
    return value if isinstance(value, list) else []
