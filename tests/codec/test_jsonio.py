"""JSON bytes read and written by the shell keep every value exact."""

from __future__ import annotations

import json
from collections.abc import Callable

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.codec import jsonio
from gateway.core.reading.shape import remove_paths


def nested_text(depth: int, leaf: bytes) -> bytes:
    return b"[" * depth + leaf + b"]" * depth


@pytest.mark.parametrize(
    "text, value",
    [
        (b'{"n":123456789012345678901234567890}', {"n": 123456789012345678901234567890}),
        (b"-9223372036854775809", -9223372036854775809),
        (b"18446744073709551616", 18446744073709551616),
        (b'{"id":"12345678901234567890123","x":1.5}', {"id": "12345678901234567890123", "x": 1.5}),
        (b'{"n":12,"f":0.1}', {"n": 12, "f": 0.1}),
    ],
)
def test_reads_integers_of_any_size_exactly(text, value):
    read = jsonio.loads(text)
    assert read == value
    assert type(read) is type(value)
    assert jsonio.loads(jsonio.dumps(read)) == value


@pytest.mark.parametrize(
    "text",
    [
        b"[NaN, 12345678901234567890123]",
        b'["\\ud800", 12345678901234567890123]',
        b"[1e400]",
        b"{'a': 1}",
        b"\xff\xfe[1]",
        nested_text(1025, b"1"),
    ],
)
def test_what_orjson_refuses_stays_refused(text):
    with pytest.raises(jsonio.JSONDecodeError):
        jsonio.loads(text)


def test_deep_documents_round_trip():
    text = nested_text(1000, b'"x"')
    assert jsonio.dumps(jsonio.loads(text)) == text


def test_big_integers_are_read_exactly_as_deep_as_any_value():
    big = b"123456789012345678901234567890"
    assert innermost(jsonio.loads(nested_text(jsonio.MAX_DEPTH, big)), jsonio.MAX_DEPTH) == [
        int(big)
    ]
    with pytest.raises(jsonio.TooDeep, match="deeper than 1000"):
        jsonio.loads(nested_text(jsonio.MAX_DEPTH + 1, big))


def test_many_big_integers_are_read_exactly_by_the_standard_library():
    text = b"[" + b",".join([b"-123456789012345678901234567890"] * 1001) + b"]"
    assert jsonio.loads(text) == [-123456789012345678901234567890] * 1001
    deep = nested_text(300, text)
    assert innermost(jsonio.loads(deep), 301) == [-123456789012345678901234567890] * 1001
    with pytest.raises(jsonio.TooDeep, match="beyond 64 bits"):  # past the standard library's
        jsonio.loads(nested_text(jsonio.MAX_DEPTH - 1, text))


def innermost(value: object, depth: int) -> object:
    """The list `depth` levels down a value nested in one-element lists."""
    for _ in range(depth - 1):
        assert isinstance(value, list) and len(value) == 1
        value = value[0]
    return value


def test_integers_beyond_a_doubles_range_are_read_exactly():
    text = b'{"n":1' + b"0" * 400 + b',"m":-1' + b"0" * 309 + b"}"
    assert jsonio.loads(text) == {"n": 10**400, "m": -(10**309)}


def test_floats_beyond_a_doubles_range_stay_refused():
    with pytest.raises(jsonio.JSONDecodeError):
        jsonio.loads(b"[1e400, 1" + b"0" * 400 + b"]")


@pytest.mark.parametrize(
    "text",
    [
        b'{"a":1,"a":1}',
        b'{"x":[{"b":1,"c":{"d":2,"d" : 3}}]}',
        b'{"\\u0061":1,"a":2}',
        b'{"a":1,"a":2,"big":1' + b"0" * 30 + b"}",
        nested_text(300, b'{"a":1,"a":2}'),
    ],
)
def test_a_duplicate_member_name_is_never_read(text):
    with pytest.raises(jsonio.DuplicateKey, match="same member twice"):
        jsonio.loads(text)


@pytest.mark.parametrize(
    "text",
    [
        b'{"a\\\\":1,"a\\"":2,"a":3}',
        b'{"k\\":":1,"k":2}',
        b'{"a" :\n1, "b"\t: {"a": 1}}',
        nested_text(300, b'{"a":1,"b":2}'),
    ],
)
def test_distinct_names_are_read_whatever_their_escapes_and_spacing(text):
    jsonio.loads(text)


def test_documents_deeper_than_the_gateway_reads_are_refused_clearly():
    jsonio.loads(nested_text(jsonio.MAX_DEPTH, b"1"))
    with pytest.raises(jsonio.TooDeep, match="deeper than 1000"):
        jsonio.loads(nested_text(jsonio.MAX_DEPTH + 1, b"1"))


def test_without_removes_members_and_keeps_every_number_token():
    text = b'{"a":[1E9,-0,1e-400,1.00000000000000000001],"b":{"c":2.50,"d":1},"e":[1,2,3]}'
    assert jsonio.without(text, []) is text
    kept = jsonio.without(text, [("b", "d"), ("e", 1)])
    assert kept == b'{"a":[1E9,-0,1e-400,1.00000000000000000001],"b":{"c":2.50},"e":[1,3]}'


# --- a forward's fast path writes what the exact path writes --------------------------------

_NUMBER_TOKENS = st.sampled_from(
    [b"0", b"-0", b"1", b"-17", b"1.5", b"2.50", b"1E9", b"1e9", b"1e-400", b"-0.0", b"1e16",
     b"0.1", b"1.00000000000000000001", b"123456789012345678901", b"9223372036854775807",
     b"18446744073709551616", b"3.0", b"1.5e-7", b"100"]
)  # fmt: skip
# plain text mostly (the fast path takes documents without escapes), escapes now and then
_PLAIN = st.text(
    st.characters(blacklist_categories=("Cc", "Cs"), blacklist_characters='"\\'), max_size=6
)
_STRINGS = (
    _PLAIN.map(jsonio.dumps)
    | _PLAIN.map(jsonio.dumps)
    | st.sampled_from(
        [b'"a\\"b"', b'"\\u00e9"', b'"\\\\"', b'"x\\/y"', b'"1E9"', b'"{\\"a\\":1}"', b'":,[]{}"']
    )
)
_SPACE = st.sampled_from([b"", b"", b" ", b"\n  "])


@st.composite
def _documents(draw: st.DrawFn, depth: int = 0) -> bytes:
    """JSON text: objects, arrays, strings (escaped or not), literals and number tokens as
    clients write them, with or without whitespace."""
    kind = draw(st.sampled_from(["object", "array", "leaf"] if depth < 4 else ["leaf"]))
    if kind == "leaf":
        return draw(_NUMBER_TOKENS | _STRINGS | st.sampled_from([b"true", b"false", b"null"]))
    space = draw(_SPACE)
    items = draw(st.lists(_documents(depth + 1), max_size=4))
    if kind == "array":
        return b"[" + space + (b"," + space).join(items) + space + b"]"
    names = draw(st.lists(_PLAIN, min_size=len(items), max_size=len(items), unique=True))
    members = [
        jsonio.dumps(n) + space + b":" + space + v for n, v in zip(names, items, strict=True)
    ]
    return b"{" + space + (b"," + space).join(members) + b"}"


def _member_paths(value: object, at: tuple[str | int, ...] = ()) -> list[tuple[str | int, ...]]:
    paths: list[tuple[str | int, ...]] = []
    if isinstance(value, dict):
        for key, item in value.items():
            paths += [(*at, key), *_member_paths(item, (*at, key))]
    elif isinstance(value, list):
        for index, item in enumerate(value):
            paths += [(*at, index), *_member_paths(item, (*at, index))]
    return paths


@settings(max_examples=400, deadline=None)
@given(_documents(), st.data())
def test_a_forward_is_the_same_on_the_fast_path_and_the_exact_one(text, data):
    document = b'{"k":' + text + b"}"
    value = jsonio.loads(document)
    paths = data.draw(st.lists(st.sampled_from(_member_paths(value)), min_size=1, max_size=3))
    paths = [p for p in paths if not any(p[:n] in paths for n in range(len(p)))]  # outermost
    exact = jsonio.without(document, paths)
    fast = jsonio.forwarded(document, paths, remove_paths(value, paths))
    assert fast == exact
    if jsonio.numbers_as_written(document) and b"\\" in document:
        assert orjson.dumps(value) == document  # escapes: only a document written back whole


def test_the_fast_path_is_taken_only_when_every_number_token_is_written_back():
    assert jsonio.numbers_as_written(b'{"a" : [1, 2.5, -3, true, null], "b": "1E9 x"}')
    for token in [b"1E9", b"-0", b"1e-400", b"2.50", b"1.00000000000000000001", b"10" * 12]:
        assert not jsonio.numbers_as_written(b'{"a":[1,' + token + b"]}"), token
    assert not jsonio.numbers_as_written(b'{"a":"\\u00e9","b":1}')  # escapes: the exact path
    deep = b'{"a":' + nested_text(300, b'[1.5,{"b":1}]') + b',"c":1}'  # past orjson's 254
    value = jsonio.loads(deep)
    paths: list[tuple[str | int, ...]] = [("c",), ("a", *[0] * 300, 1, "b")]
    assert jsonio.forwarded(deep, paths, remove_paths(value, paths)) == jsonio.without(deep, paths)


# --- runs of 19 digits or more: read as the standard library reads them ---------------------

_LONG_TOKENS = (
    st.integers(10**18, 10**400).map(lambda n: str(n).encode())
    | st.integers(-(10**400), -(10**18)).map(lambda n: str(n).encode())
    | st.sampled_from(
        [b"1.12345678901234567890123", b"12345678901234567890123.5", b"1e0000000000000000000005",
         b"-1E-00000000000000000000012", b"123456789012345678901e3", b"1e+00000000000000000000001",
         b"1" + b"0" * 400 + b".5", b"18446744073709551615", b"-9223372036854775808"]
    )
)  # fmt: skip
_LONG_STRINGS = st.sampled_from(
    [b'"12345678901234567890123"', b'"\\"12345678901234567890123"', b'"\\\\"',
     b'"x\\\\\\"12345678901234567890123\\\\"', b'"-12345678901234567890123:"', b'"\\u0031234"']
)  # fmt: skip


@st.composite
def _long_documents(draw: st.DrawFn, depth: int = 0) -> bytes:
    """JSON text as `_documents`, with integers beyond 64 bits and long runs of digits in
    strings, names, fractions and exponents."""
    kind = draw(st.sampled_from(["object", "array", "leaf"] if depth < 4 else ["leaf"]))
    if kind == "leaf":
        return draw(
            _LONG_TOKENS
            | _LONG_STRINGS
            | _NUMBER_TOKENS
            | _STRINGS
            | st.sampled_from([b"true", b"false", b"null"])
        )
    space = draw(_SPACE)
    items = draw(st.lists(_long_documents(depth + 1), max_size=4))
    if kind == "array":
        return b"[" + space + (b"," + space).join(items) + space + b"]"
    names = draw(
        st.lists(
            _PLAIN | st.just("12345678901234567890123"),
            min_size=len(items),
            max_size=len(items),
            unique=True,
        )
    )
    members = [
        jsonio.dumps(n) + space + b":" + space + v for n, v in zip(names, items, strict=True)
    ]
    return b"{" + space + (b"," + space).join(members) + b"}"


def _reading(read: Callable[[bytes], object], text: bytes) -> object:
    """What `read` makes of `text`: its value as the standard library writes it (types,
    order and every digit), or the class of what it raised."""
    try:
        return json.dumps(read(text))
    except (jsonio.JSONDecodeError, jsonio.TooDeep) as exc:
        return type(exc)


def _reference(text: bytes) -> object:
    """The gateway's reading by its definition: JSON as orjson reads it but for the size of
    integers, every integer exact and no member named twice (the standard library)."""
    try:
        orjson.loads(text)
    except jsonio.JSONDecodeError as exc:
        if not str(exc).startswith("number is infinity"):
            raise
    return jsonio._stdlib(text)


@settings(max_examples=400, deadline=None)
@given(_long_documents(), st.sampled_from([b"", b"{", b'{"a":1,"a":2,"b":', b"[0"]))
def test_long_runs_of_digits_are_read_as_the_standard_library_reads_them(text, opening):
    if opening == b"{":
        text = b'{"k":' + text + b"}"
    elif opening == b"[0":
        text = b"[01234567890123456789012," + text + b"]"  # a leading zero: refused
    elif opening:
        text = opening + text + b"}"  # a duplicate name: refused
    expected = _reading(_reference, text)
    assert _reading(jsonio.loads, text) == expected
    marked_at_most = jsonio.MARKED_AT_MOST
    jsonio.MARKED_AT_MOST = 0  # the document read twice instead (orjson, the standard library)
    try:
        assert _reading(jsonio.loads, text) == expected
    finally:
        jsonio.MARKED_AT_MOST = marked_at_most


@pytest.mark.parametrize(
    "text",
    [
        b"[1" + b"0" * 400 + b", 'a']",  # invalid after an integer beyond a double's range
        b"[1" + b"0" * 400 + b', "\\ud800"]',  # a lone surrogate: orjson refuses it
        b"[" + b"1" * 5000 + b"]",  # more digits than Python converts
        b"{12345678901234567890123: 1}",  # a number where a name must be
        b'{"a":1, -12345678901234567890123 : 1}',
        b"[012345678901234567890123]",
        b"[+12345678901234567890123]",
        b"[--12345678901234567890123]",
        b"[1" + b"0" * 400 + b".5]",  # a float beyond a double's range
        b'["\\u0000", 12345678901234567890123, 1e400]',
    ],
)
def test_what_orjson_refuses_beside_a_big_integer_stays_refused(text):
    with pytest.raises(jsonio.JSONDecodeError):
        jsonio.loads(text)


def test_a_few_big_integers_and_long_digit_strings_cost_no_second_parse(monkeypatch):
    def second_parse(data: bytes) -> object:
        raise AssertionError("read a second time")

    monkeypatch.setattr(jsonio, "_stdlib", second_parse)
    text = b'{"id":"12345678901234567890123","n":[-123456789012345678901234567890],"f":1.5}'
    assert jsonio.loads(text) == {
        "id": "12345678901234567890123",
        "n": [-123456789012345678901234567890],
        "f": 1.5,
    }
    assert jsonio.loads(b'{"n":1' + b"0" * 400 + b"}") == {"n": 10**400}
    with pytest.raises(AssertionError, match="a second time"):  # past MARKED_AT_MOST
        jsonio.loads(b"[" + b",".join([b"12345678901234567890123"] * 1001) + b"]")
