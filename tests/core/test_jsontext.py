"""Every decoded JSON value can be written back, exactly."""

from __future__ import annotations

import json

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.core.values.jsontext import to_json

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=5), children, max_size=4)
    ),
    max_leaves=20,
)


def nested(depth: int, leaf: object) -> object:
    value = leaf
    for n in range(depth):
        value = {"k": value} if n % 2 else [value]
    return value


@given(json_values, st.booleans())
def test_writes_what_the_standard_library_reads_back_equal(value, sort_keys):
    assert json.loads(to_json(value, sort_keys=sort_keys)) == value


@pytest.mark.parametrize("value", [2**64, -(2**63) - 1, {"n": 123456789012345678901234567890}])
def test_integers_beyond_64_bits_stay_exact(value):
    with pytest.raises(orjson.JSONEncodeError):
        orjson.dumps(value)
    assert json.loads(to_json(value)) == value


def test_nesting_deeper_than_orjson_writes_is_written():
    value = nested(1000, "leaf é")
    with pytest.raises(orjson.JSONEncodeError):
        orjson.dumps(value)
    text = to_json(value)
    assert text.startswith(b'{"k":[') and text.count(b'{"k":[') == 500
    assert b'"leaf \xc3\xa9"' in text  # UTF-8, not escaped
    assert to_json(orjson.loads(text)) == text  # orjson reads 1024 levels


def test_fallback_keeps_key_order_or_sorts_on_request():
    value = {"b": 2**64, "a": [1, {"d": None, "c": True}]}
    assert to_json(value) == b'{"b":18446744073709551616,"a":[1,{"d":null,"c":true}]}'
    assert to_json(value, sort_keys=True) == (
        b'{"a":[1,{"c":true,"d":null}],"b":18446744073709551616}'
    )


def test_matches_orjson_where_orjson_writes():
    value = {"b": [1, 2.5, "x"], "a": {"z": None}}
    assert to_json(value) == orjson.dumps(value)
    assert to_json(value, sort_keys=True) == orjson.dumps(value, option=orjson.OPT_SORT_KEYS)


@pytest.mark.parametrize("bad", [{"n": 2**64, "x": object()}, {1: 2**64}, [float("nan"), 2**64]])
def test_what_is_not_json_is_refused(bad):
    with pytest.raises((TypeError, ValueError)):
        to_json(bad)
