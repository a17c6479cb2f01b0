"""core.values: the one coercion of a JSON value or table cell to a number."""

import math

import numpy as np
import pytest

from scalestudy.core.values import number


@pytest.mark.parametrize(("value", "kwargs", "expected"), [
    (3, {}, 3.0),
    (2.5, {}, 2.5),
    (np.float64(1.5), {}, 1.5),
    (np.int64(7), {}, 7.0),
    (None, {"text": True, "booleans": True, "finite": False}, None),
    (math.nan, {"finite": False}, None),
    (math.inf, {}, None),
    (math.inf, {"finite": False}, math.inf),
    (True, {}, None),
    (True, {"booleans": True}, 1.0),
    ("1.5", {}, None),
    ("1.5", {"text": True}, 1.5),
    ("nan", {"text": True, "finite": False}, None),
    ("fast", {"text": True}, None),
    ([1], {"text": True, "booleans": True}, None),
])
def test_number_reads_what_each_caller_asks_for(value, kwargs, expected):
    assert number(value, **kwargs) == expected
