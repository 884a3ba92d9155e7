"""Reading and writing JSON bytes without changing any value.

orjson is strict (RFC 8259: no NaN, no lone surrogates, UTF-8 only, nesting up
to 1024 levels) and fast, and is the gateway's definition of valid JSON. It
reads integers beyond 64 bits as floats, though, which would alter a number a
service sent. A document with a run of 19 or more digits is therefore read
again by the standard library, which keeps every integer exact. Writing goes
through `gateway.core.jsontext`, which writes any value read here.
"""

from __future__ import annotations

import json
from typing import Any

import orjson

from gateway.core.jsontext import to_json

JSONDecodeError = orjson.JSONDecodeError

# 2**63 has 19 digits: a shorter run is always an exact 64-bit integer (or part of a float).
# Found by mapping every digit to "0" and the rest to " ": several times faster than a
# regular expression, which tries each position in turn.
_DIGITS_ONLY = bytes(0x30 if 0x30 <= b <= 0x39 else 0x20 for b in range(256))
_LONG_RUN = b"0" * 19


class TooDeep(ValueError):
    """Valid JSON with big integers nested too deep to be read exactly."""


def loads(data: bytes) -> Any:
    """The JSON value of `data`; raises JSONDecodeError (not JSON) or TooDeep."""
    value = orjson.loads(data)
    if _LONG_RUN not in data.translate(_DIGITS_ONLY):
        return value
    try:
        return json.loads(data.decode("utf-8"))  # orjson validated it: same document
    except RecursionError:
        raise TooDeep(
            "integers beyond 64 bits nested too deep to be read exactly "
            "(the standard library parser ran out of stack)"
        ) from None


def dumps(value: Any) -> bytes:
    """Compact JSON bytes of a value read by `loads` (or built from such values)."""
    return to_json(value)
