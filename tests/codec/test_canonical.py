"""RFC 8785 canonical JSON: orjson's bytes where they are the same, rfc8785's otherwise."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
import rfc8785
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.codec import canonical

SAFE = canonical.MAX_SAFE_INTEGER
names = st.one_of(st.text(max_size=8), st.text(alphabet=st.characters(codec="ascii"), max_size=8))
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-SAFE, SAFE)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(names, inner, max_size=5),
    max_leaves=30,
)


@settings(max_examples=300, deadline=None)
@given(json_values)
def test_any_json_value_is_written_as_rfc8785_writes_it(value: Any) -> None:
    assert canonical.dumps(value) == rfc8785.dumps(value)


def test_orjson_escapes_every_code_point_as_ecmascript_does() -> None:
    # the ground the fast path stands on: a string is written alike whatever it holds
    for point in range(0x110000):
        if 0xD800 <= point <= 0xDFFF:
            continue  # lone surrogates: not in any string the gateway reads
        text = chr(point)
        assert orjson.dumps(text) == rfc8785.dumps(text), hex(point)


def test_plain_values_take_orjson_and_the_rest_rfc8785() -> None:
    assert canonical._orjson_writes_it({"b": [1, "x", None, True], "a": {"c": -SAFE}})
    assert not canonical._orjson_writes_it({"a": 1.5})
    assert not canonical._orjson_writes_it([SAFE + 1])
    assert not canonical._orjson_writes_it({"é": 1})


def test_names_sorted_by_utf16_code_units_not_code_points() -> None:
    # U+1F600 (surrogates D83D DE00) sorts before U+E000 in UTF-16, after it by code point
    value = {"\ue000": 1, "\U0001f600": 2}
    assert canonical.dumps(value) == rfc8785.dumps(value)
    assert canonical.dumps(value).index("\U0001f600".encode()) < canonical.dumps(value).index(
        "\ue000".encode()
    )
    assert orjson.dumps(value, option=orjson.OPT_SORT_KEYS) != canonical.dumps(value)


def test_nesting_deeper_than_orjson_writes_is_written_by_rfc8785() -> None:
    value: Any = "x"
    for _ in range(300):
        value = [value]
    with pytest.raises(orjson.JSONEncodeError):
        orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
    assert canonical.dumps(value) == rfc8785.dumps(value)


def test_what_rfc8785_refuses_is_still_refused() -> None:
    with pytest.raises(rfc8785.IntegerDomainError):
        canonical.dumps({"amount": SAFE + 1})
    with pytest.raises(rfc8785.IntegerDomainError):
        canonical.dumps([-(SAFE + 1)])
