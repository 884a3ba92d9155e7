"""Reading and writing JSON bytes without changing any value.

orjson is strict (RFC 8259: no NaN, no lone surrogates, UTF-8 only, nesting up
to 1024 levels) and fast, and is the gateway's definition of valid JSON, with
two readings of its own:

- Integers are exact. orjson reads integers beyond 64 bits as floats and
  refuses those beyond a double's range (10^309 and above); a document with a
  run of 19 or more digits is therefore read by the standard library, which
  keeps every integer exact. A float beyond a double's range (`1e400`) stays
  refused.
- A duplicate member name in any object makes the document unreadable
  (`DuplicateKey`). RFC 8259 leaves the reading of `{"a":1,"a":2}` to each
  parser; the gateway takes none, so that it cannot read a record one way on
  one path and another way on another.

Writing goes through `gateway.core.jsontext`, which writes any value read here;
`verbatim` marks bytes to be written as they are (a number token, a whole input).
"""

from __future__ import annotations

import json
from typing import Any

import orjson

from gateway.core.jsontext import to_json
from gateway.core.shape import remove_paths

JSONDecodeError = orjson.JSONDecodeError
verbatim = orjson.Fragment

# 2**63 has 19 digits: a shorter run is always an exact 64-bit integer (or part of a float).
# Found by mapping every digit to "0" and the rest to " ": several times faster than a
# regular expression, which tries each position in turn.
_DIGITS_ONLY = bytes(0x30 if 0x30 <= b <= 0x39 else 0x20 for b in range(256))
_LONG_RUN = b"0" * 19
_WHITESPACE = b" \t\n\r"
# Every record the gateway reads nests at most this deep, so that what it writes around
# one (a reply or rejection carrying the input, 2 or 3 levels more) stays within the
# 1024 levels orjson, and so the gateway itself, reads.
MAX_DEPTH = 1000


class TooDeep(ValueError):
    """Valid JSON nested deeper than the gateway reads (MAX_DEPTH, or for integers beyond
    64 bits, as deep as the standard library parser reaches)."""


class DuplicateKey(JSONDecodeError):
    """An object of the document names one member twice: not read, like any invalid JSON."""

    def __init__(self, message: str = "") -> None:
        super().__init__(message or _DUPLICATE, "", 0)

    def __str__(self) -> str:
        return str(self.msg)


def loads(data: bytes) -> Any:
    """The JSON value of `data`; raises JSONDecodeError (not JSON; DuplicateKey
    is one) or TooDeep."""
    try:
        value = orjson.loads(data)
    except JSONDecodeError as exc:
        if not str(exc).startswith("number is infinity") or not _has_long_run(data):
            raise
        return _exact(data)  # an integer beyond a double's range; a float there stays refused
    if _has_long_run(data):
        return _exact(data)
    try:
        written = orjson.dumps(value)
    except orjson.JSONEncodeError:  # deeper than orjson writes (254 levels)
        _check_depth(data)
        members = _members_of(value)
    else:
        if written == data:  # compact input written back whole: no member was dropped
            if type(data) is bytes:  # immutable: the very object stays that document
                _written_alike[:] = [data]
            return value
        members = _members(written, compact=True)
    if _members(data) != members:
        raise DuplicateKey
    return value


# The last document `loads` found orjson writes back byte for byte (its own bytes object,
# held: so an identical object is that very document): `numbers_as_written` of it is True.
_written_alike: list[bytes] = []


def _check_depth(data: bytes) -> None:
    """TooDeep beyond MAX_DEPTH levels: orjson reads 1024, so 24 more must still read."""
    pad = 1024 - MAX_DEPTH
    try:
        orjson.loads(b"[" * pad + data + b"]" * pad)
    except JSONDecodeError:
        raise TooDeep(f"nested deeper than {MAX_DEPTH} levels") from None


def _members_of(value: Any) -> int:
    """How many object members a decoded value holds (iterative: any depth)."""
    count = 0
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            count += len(node)
            stack.extend(v for v in node.values() if isinstance(v, dict | list))
        elif isinstance(node, list):
            stack.extend(v for v in node if isinstance(v, dict | list))
    return count


_DUPLICATE = "an object names the same member twice (duplicate keys are not read)"


def _has_long_run(data: bytes) -> bool:
    return _LONG_RUN in data.translate(_DIGITS_ONLY)


def _members(text: bytes, compact: bool = False) -> int:
    """How many object members valid JSON text holds, counted without parsing it.

    A member's name ends with a quote that is followed (after whitespace) by a
    colon and not escaped, i.e. preceded by an even run of backslashes. Inside
    a string a raw quote is always escaped, and whitespace next to a backslash
    is invalid, so deleting whitespace and then escaped backslashes (pairs)
    leaves `":` exactly at member names and `\\":` at escaped quotes. `compact` text
    (as orjson writes it) has no whitespace to delete.
    """
    bare = (text if compact else text.translate(None, _WHITESPACE)).replace(b"\\\\", b"")
    return bare.count(b'":') - bare.count(b'\\":')


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    found = dict(pairs)
    if len(found) != len(pairs):
        raise DuplicateKey
    return found


def _finite(text: str) -> float:
    number = float(text)
    if number in (float("inf"), float("-inf")):
        raise JSONDecodeError(f"number is infinity when parsed as double: {text[:40]}", text, 0)
    return number


def _constant(text: str) -> Any:
    raise JSONDecodeError(f"not JSON: {text}", text, 0)


def _exact(data: bytes) -> Any:
    try:
        return json.loads(
            data.decode("utf-8"),
            object_pairs_hook=_object,
            parse_float=_finite,
            parse_constant=_constant,
        )
    except RecursionError:
        raise TooDeep(
            "integers beyond 64 bits nested too deep to be read exactly "
            "(the standard library parser ran out of stack)"
        ) from None
    except UnicodeDecodeError as exc:
        raise JSONDecodeError(f"not UTF-8: {exc}", "", 0) from None


def without(data: bytes, paths: list[tuple[str | int, ...]]) -> bytes | None:
    """`data` (read by `loads`) with the members at `paths` removed, every number token
    written exactly as received (`1E9`, `-0`, `1e-400`, 20 significant digits).

    None when the document is too deep for the standard library parser that keeps
    the tokens (the caller then writes the decoded value).
    """
    if not paths:
        return data
    try:
        tree = json.loads(data.decode("utf-8"), parse_float=verbatim, parse_int=verbatim)
    except RecursionError:
        return None
    return to_json(remove_paths(tree, paths))


def forwarded(received: bytes, removed: list[tuple[str | int, ...]], value: Any) -> bytes:
    """What a forward carries: the input as received less the members at `removed`,
    every value exactly as sent. `value` is the decoded input less those members.

    When orjson writes every number token of `received` back as it came
    (`numbers_as_written`: the common case), orjson writes `value`, and the input
    is not read again; otherwise (`1E9`, `-0`, `1e-400`, 20 significant digits,
    escapes in strings, nesting past the 254 levels orjson writes) the received
    text is read again keeping its tokens (`without`). For a document too deep
    for that, the decoded `value` is written.
    """
    if not removed:
        return received
    if numbers_as_written(received):
        try:
            return orjson.dumps(value)
        except orjson.JSONEncodeError:
            pass  # deeper than orjson writes: the exact path
    out = without(received, removed)
    return dumps(value) if out is None else out


_LITERALS = (b"true", b"false", b"null")
# What separates number tokens once strings and literals are gone: all of it to spaces.
_SEPARATORS = bytes.maketrans(b"{}[]:,\t\n\r", b"         ")


def numbers_as_written(data: bytes) -> bool:
    """Whether orjson writes the decoded `data` (valid JSON read by `loads`) with each of
    its number tokens exactly as `data` has it, and each string alike.

    True at once for the document `loads` read last when orjson wrote it back byte
    for byte (the common compact input): every token of it is written as received.
    Otherwise, strings are written alike whichever parser decoded them when they hold
    no escape, so only a document without a backslash qualifies. Its number tokens
    (what is left once its strings, literals and punctuation are gone) are read
    by orjson as one array and written back: they must come back byte for byte.
    False for `1E9`, `-0`, `1.50`, `1e-400`, integers beyond 64 bits: the caller
    then keeps the tokens the slow way.
    """
    if _written_alike and data is _written_alike[0]:
        return True  # `loads` read it and orjson wrote the value back as these very bytes
    if b"\\" in data:
        return False
    # without escapes every quote opens or closes a string: every other piece is outside
    rest = b"".join(data.split(b'"')[::2])
    if b"E" in rest:
        return False  # orjson writes every exponent with a small `e`: no need to read them
    for literal in _LITERALS:
        rest = rest.replace(literal, b" ")
    tokens = rest.translate(_SEPARATORS).split()
    if not tokens:
        return True
    numbers = b"[" + b",".join(tokens) + b"]"
    try:
        return orjson.dumps(orjson.loads(numbers)) == numbers
    except JSONDecodeError:
        return False


def dumps(value: Any) -> bytes:
    """Compact JSON bytes of a value read by `loads` (or built from such values)."""
    return to_json(value)
