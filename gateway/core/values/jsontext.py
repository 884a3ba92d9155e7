"""JSON text of a decoded JSON value, whatever its depth or integer size.

orjson writes most values, fast. It refuses two kinds of valid JSON values:
integers beyond 64 bits and nesting deeper than 254 levels (it reads up to
1024). Those are written by a small iterative encoder instead, so no value the
gateway has read is ever impossible to write back. An `orjson.Fragment` (text
kept as received, such as a number token) is written as it is.
"""

from __future__ import annotations

import json

import orjson

_SORTED = orjson.OPT_SORT_KEYS


def to_json(value: object, *, sort_keys: bool = False) -> bytes:
    """Compact JSON of `value` (dicts, lists, str, int, float, bool, None)."""
    try:
        return fitted(orjson.dumps(value, option=_SORTED if sort_keys else None))
    except orjson.JSONEncodeError:
        return _iterative(value, sort_keys)


def fitted(written: bytes) -> bytes:
    """orjson's output in a bytes object of its own size. The bytes orjson returns keep
    the whole buffer it wrote into for as long as they live: 4 KiB at least, and 8 to 13
    times the length of a long string in the value (orjson 3.12 and later), so
    every record kept until its commit, every cached text, cost that much. Joining it
    with an empty one copies it (0.03 µs for a small value)."""
    return b"".join((written, b""))


class _Token(str):
    """Literal output text, told apart from decoded strings on the stack."""


def _scalar(item: object) -> str:
    if isinstance(item, orjson.Fragment):  # text kept as received (a number token)
        return orjson.dumps(item).decode()
    if isinstance(item, str):
        return json.dumps(item, ensure_ascii=False)
    if item is None or isinstance(item, bool | int | float):
        return json.dumps(item, allow_nan=False)
    raise TypeError(f"not a JSON value: {type(item).__name__}")


def _iterative(value: object, sort_keys: bool) -> bytes:
    out: list[str] = []
    stack: list[object] = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, _Token):
            out.append(item)
        elif isinstance(item, dict):
            parts: list[object] = [_Token("{")]
            keys = sorted(item) if sort_keys else list(item)
            for n, key in enumerate(keys):
                if not isinstance(key, str):
                    raise TypeError(f"not a JSON object key: {type(key).__name__}")
                parts += [_Token(("," if n else "") + _scalar(key) + ":"), item[key]]
            stack.extend(reversed([*parts, _Token("}")]))
        elif isinstance(item, list | tuple):
            parts = [_Token("[")]
            for n, element in enumerate(item):
                if n:
                    parts.append(_Token(","))
                parts.append(element)
            stack.extend(reversed([*parts, _Token("]")]))
        else:
            out.append(_scalar(item))
    return "".join(out).encode()
