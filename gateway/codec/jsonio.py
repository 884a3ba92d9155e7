"""Reading and writing JSON bytes without changing any value.

orjson is strict (RFC 8259: no NaN, no lone surrogates, UTF-8 only, nesting up
to 1024 levels) and fast, and is the gateway's definition of valid JSON, with
two readings of its own:

- Integers are exact. orjson reads integers beyond 64 bits as floats and
  refuses those beyond a double's range (10^309 and above). In a document
  with a run of 19 or more digits outside its strings, each integer token of
  19 digits or more is read by orjson as a string marking it (the document is
  JSON exactly when the marked one is) and then put back as a Python integer,
  so orjson still reads the document once. With more than `MARKED_AT_MOST` of
  them (or a `\u0000` escape, which the markers use), orjson reads the
  document (with its integers beyond a double's range made small) and the
  standard library reads it again, exactly. A float beyond a double's range
  (`1e400`) stays refused, and so does an integer of more digits than Python
  converts (4,300).
- A duplicate member name in any object makes the document unreadable
  (`DuplicateKey`). RFC 8259 leaves the reading of `{"a":1,"a":2}` to each
  parser; the gateway takes none, so that it cannot read a record one way on
  one path and another way on another.

Writing goes through `gateway.core.values.jsontext`, which writes any value read here;
`verbatim` marks bytes to be written as they are (a number token, a whole input).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import orjson

from gateway.core.reading.shape import remove_paths
from gateway.core.values.jsontext import fitted, to_json

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
# Integer tokens of 19 digits or more marked in one document at most; past this many,
# the document is read twice (orjson, then an exact parser), which costs less than
# marking each.
MARKED_AT_MOST = 1000


class TooDeep(ValueError):
    """Valid JSON nested deeper than the gateway reads (MAX_DEPTH, or for more than
    MARKED_AT_MOST integers beyond 64 bits, as deep as the standard library parser
    reaches)."""


class DuplicateKey(JSONDecodeError):
    """An object of the document names one member twice: not read, like any invalid JSON."""

    def __init__(self, message: str = "") -> None:
        super().__init__(message or _DUPLICATE, "", 0)

    def __str__(self) -> str:
        return str(self.msg)


def loads(data: bytes) -> Any:
    """The JSON value of `data`; raises JSONDecodeError (not JSON; DuplicateKey
    is one) or TooDeep."""
    digits = data.translate(_DIGITS_ONLY)
    if _LONG_RUN in digits:
        return _with_long_runs(data, digits)
    return _read(data)


def _read(data: bytes) -> Any:
    """`loads` of a document whose every integer orjson reads exactly."""
    value = orjson.loads(data)
    if _every_member_read(data, value, data) and type(data) is bytes:
        _written_alike[:] = [data]  # immutable: the very object stays that document
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


# --- integers of 19 digits or more --------------------------------------------------------

_MARK = "\x00"  # a marker string opens with it: no string of a document without `\u0000` does
_NOT_AN_INTEGER_BEFORE = frozenset(b".eE+")  # a fraction or an exponent
_NOT_AN_INTEGER_AFTER = frozenset(b".eE")
_A_NAME_FOLLOWS = re.compile(rb"[ \t\n\r]*:")


def _with_long_runs(data: bytes, digits: bytes) -> Any:
    """`loads` of a document with a run of 19 digits or more (`digits`: `data` through
    _DIGITS_ONLY)."""
    if digits.count(_LONG_RUN) <= MARKED_AT_MOST and b"\\u0000" not in data:
        spans = _integer_spans(data, digits)
        if not spans:  # every long run is in a string, a fraction or an exponent
            return _read(data)
        marked, integers = _marked(data, spans)
        value = orjson.loads(marked)
        _every_member_read(marked, value, data)
        return _put_back(value, integers)
    try:  # orjson's verdict on the text, then the standard library's exact reading
        orjson.loads(data)
    except JSONDecodeError as exc:
        if not str(exc).startswith("number is infinity"):
            raise
        _read_as_finite(data, digits)  # an integer beyond a double's range, or a float
    return _stdlib(data)


def _every_member_read(text: bytes, value: Any, data: bytes) -> bool:
    """DuplicateKey unless `value`, orjson's reading of `text` (`data`, or `data` marked),
    holds every member `text` names; TooDeep when it nests deeper than MAX_DEPTH. True
    when orjson writes `value` back as `text`, byte for byte.

    Without a backslash in `data`, each string of it is written back character for
    character (orjson escapes only quotes, backslashes and control characters), colons
    and all: only a member left out (its colon, and any in its value) makes the colons
    of the two texts differ, and counting one byte costs less than counting names."""
    try:
        written = orjson.dumps(value)
    except orjson.JSONEncodeError:  # deeper than orjson writes (254 levels)
        _check_depth(text)
        if _members(text) != _members_of(value):
            raise DuplicateKey from None
        return False
    if written == text:
        return True
    if b"\\" not in data:
        if text.count(b":") != written.count(b":"):
            raise DuplicateKey
    elif _members(text) != _members(written, compact=True):
        raise DuplicateKey
    return False


def _runs(data: bytes, digits: bytes, run: bytes) -> Iterator[tuple[int, int]]:
    """(start, end) of each run of at least len(run) digits in `data`, in order
    (`digits` is `data` through _DIGITS_ONLY: each digit a zero, every other byte a space)."""
    start = digits.find(run)
    while start >= 0:
        end = digits.find(b" ", start)
        if end < 0:
            end = len(data)
        yield start, end
        start = digits.find(run, end)


def _integer_spans(data: bytes, digits: bytes) -> list[tuple[int, int]]:
    """(start, end) of each integer token of 19 digits or more (with its minus sign):
    each run of that many digits outside the strings of `data` that no fraction or
    exponent holds, that does not open with a zero (invalid, and left to orjson to
    refuse) and that no colon follows (a number where a member name must be: left
    invalid)."""
    # escaped backslashes, then escaped quotes, made two other bytes each: every quote
    # left opens or closes a string, and each offset stays where it was
    quotes = data.replace(b"\\\\", b"__").replace(b'\\"', b"__") if b"\\" in data else data
    spans: list[tuple[int, int]] = []
    in_string = False
    counted = 0
    for start, end in _runs(data, digits, _LONG_RUN):
        in_string ^= quotes.count(b'"', counted, start) % 2 == 1
        counted = start
        if not in_string and _an_integer(data, start, end):
            spans.append((start - 1 if start and data[start - 1] == 0x2D else start, end))
    return spans


def _an_integer(data: bytes, start: int, end: int) -> bool:
    """Whether the run of digits data[start:end], outside strings, is a whole integer
    token read as a value (not a fraction, an exponent, a leading zero or a name)."""
    return not (
        data[start] == 0x30 or _in_a_float(data, start, end) or _A_NAME_FOLLOWS.match(data, end)
    )


def _in_a_float(data: bytes, start: int, end: int) -> bool:
    """Whether a fraction or an exponent holds the run of digits data[start:end]."""
    before = data[start - 1] if start else 0
    if before == 0x2D and start > 1:  # a minus sign: the integer's or an exponent's
        before = data[start - 2] if data[start - 2] in b"eE" else 0
    return before in _NOT_AN_INTEGER_BEFORE or (
        end < len(data) and data[end] in _NOT_AN_INTEGER_AFTER
    )


def _marked(data: bytes, spans: list[tuple[int, int]]) -> tuple[bytes, list[int]]:
    """`data` with the integer token at each span a string marking it (`"\\u0000<n>"`,
    n its place in `integers`), and the integers, exact."""
    pieces: list[bytes] = []
    integers: list[int] = []
    done = 0
    for n, (start, end) in enumerate(spans):
        try:
            integers.append(int(data[start:end]))
        except ValueError:  # more digits than Python converts
            raise JSONDecodeError(
                f"an integer of {end - start:,} characters, more than the gateway reads exactly",
                "",
                0,
            ) from None
        pieces += (data[done:start], b'"\\u0000%d"' % n)
        done = end
    pieces.append(data[done:])
    return b"".join(pieces), integers


def _put_back(value: Any, integers: list[int]) -> Any:
    """`value` (read from the marked document) with each marker string replaced by the
    integer it marks, in place. Where the value is an object of a few members, only the
    members whose JSON holds a marker are walked; any other container is walked whole."""
    if type(value) is str:  # the document is one integer
        return integers[int(value[1:])]
    left = len(integers)
    stack = [value]
    if type(value) is dict and len(value) <= _FEW_MEMBERS:
        stack = []
        for key, item in value.items():
            if type(item) is str:
                if item[:1] == _MARK:
                    value[key] = integers[int(item[1:])]
                    left -= 1
            elif (type(item) is dict or type(item) is list) and _holds_marker(item):
                stack.append(item)
    while stack and left:
        node = stack.pop()
        for key, item in node.items() if type(node) is dict else enumerate(node):
            kind = type(item)
            if kind is str:
                if item[:1] == _MARK:
                    node[key] = integers[int(item[1:])]
                    left -= 1
            elif (kind is dict or kind is list) and item:
                stack.append(item)
    return value


_FEW_MEMBERS = 64


def _holds_marker(node: Any) -> bool:
    try:
        return b"\\u0000" in orjson.dumps(node)
    except orjson.JSONEncodeError:  # deeper than orjson writes: walked
        return True


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


def _stdlib(data: bytes) -> Any:
    """The value of `data` (JSON that orjson reads, but for integer magnitudes), read by
    the standard library parser: every integer exact."""
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
    except JSONDecodeError:
        raise
    except ValueError as exc:  # an integer of more digits than Python converts
        raise JSONDecodeError(f"an integer too long to be read exactly: {exc}", "", 0) from None


# A run of digits this long is an integer of at least 10^308: one a double may not hold.
_DOUBLE_DIGITS = 309
_VERY_LONG_RUN = b"0" * _DOUBLE_DIGITS


def _read_as_finite(data: bytes, digits: bytes) -> Any:
    """orjson's reading of `data` with each integer token of 309 digits or more made one
    or two digits long, or its JSONDecodeError: whether `data` is JSON but for the size of
    its integers, and the shape of its value.

    A run of digits is shortened unless a fraction or exponent holds it (`1` + 400
    zeros + `.5` stays, and stays refused). One inside a string changes that string
    only, which stays a string; a run that opens with a zero keeps two digits, so that
    a leading zero stays invalid. `digits` is `data` through _DIGITS_ONLY."""
    pieces: list[bytes] = []
    done = 0
    for start, end in _runs(data, digits, _VERY_LONG_RUN):
        if not _in_a_float(data, start, end):  # a fraction or an exponent is kept as it is
            pieces += (data[done:start], data[start : start + (2 if data[start] == 0x30 else 1)])
            done = end
    if not pieces:
        return orjson.loads(data)
    try:
        return orjson.loads(b"".join((*pieces, data[done:])))
    except JSONDecodeError as exc:
        raise JSONDecodeError(
            f"{exc} (counted with each integer of {_DOUBLE_DIGITS} digits or more as one digit)",
            "",
            0,
        ) from None


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
            return fitted(orjson.dumps(value))
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
