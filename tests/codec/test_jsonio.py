"""JSON bytes read and written by the shell keep every value exact."""

from __future__ import annotations

import pytest

from gateway.codec import jsonio


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


def test_big_integers_too_deep_for_an_exact_read_are_a_clear_error():
    with pytest.raises(jsonio.TooDeep, match="beyond 64 bits"):
        jsonio.loads(nested_text(1020, b"123456789012345678901234567890"))
