"""RFC 8785 canonical JSON of a value read from JSON: what the audit trail hashes.

`rfc8785` writes it exactly, one value at a time in Python. For the values nearly
every payload holds, orjson with sorted keys writes the same bytes in one C call:

- strings: orjson escapes exactly the characters ECMAScript's `JSON.stringify`
  escapes, in the same form (tests/codec/test_canonical.py checks every code point);
- integers within +-(2^53 - 1), `true`, `false`, `null`, arrays;
- objects whose member names are all ASCII. RFC 8785 sorts names by their UTF-16
  code units and orjson by code points; the two orders differ only where a character
  beyond U+FFFF meets one in U+E000-U+FFFF, which ASCII names never hold.

A value holding anything else goes to `rfc8785`, with its errors, as before: a float
(ECMAScript writes numbers its own way), a larger integer (which RFC 8785 refuses), a
member name beyond ASCII, or nesting deeper than orjson writes.
"""

from __future__ import annotations

from typing import Any

import orjson
import rfc8785

MAX_SAFE_INTEGER = 2**53 - 1  # RFC 8785 (I-JSON) refuses integers beyond it


def dumps(value: Any) -> bytes:
    """The RFC 8785 canonical JSON of `value` (raises as `rfc8785.dumps` does)."""
    if _orjson_writes_it(value):
        try:
            return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
        except orjson.JSONEncodeError:  # deeper than orjson writes, a lone surrogate
            pass
    return rfc8785.dumps(value)


def _orjson_writes_it(value: Any) -> bool:
    """Whether `value` holds only what orjson writes as RFC 8785 does (no recursion:
    a payload may nest as deep as the gateway reads)."""
    pending = [value]
    while pending:
        item = pending.pop()
        kind = type(item)
        if kind is str or kind is bool or item is None:
            continue
        if kind is int:
            if -MAX_SAFE_INTEGER <= item <= MAX_SAFE_INTEGER:
                continue
            return False
        if kind is dict:
            for name in item:
                if type(name) is not str or not name.isascii():
                    return False
            pending.extend(item.values())
        elif kind is list:
            pending.extend(item)
        else:
            return False
    return True
