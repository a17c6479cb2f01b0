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


def test_member_and_array_read_nested_json_without_failing_on_its_shape():
    from scalestudy.core.values import array, member

    record = {"provenance": {"placement": {"hosts": ["n1", "n2"]}, "versions": None}}
    assert member(record, "provenance", "placement") == {"hosts": ["n1", "n2"]}
    assert array(member(record, "provenance", "placement").get("hosts")) == ["n1", "n2"]
    assert member(record, "provenance", "versions") == {}
    assert member(record, "provenance", "placement", "hosts") == {}  # a list, not an object
    assert member(None, "anything") == {}
    assert array("n1,n2") == []
