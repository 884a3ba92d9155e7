"""A GET /interrupts request's parameters, read and checked into a `Query`.

Parameters (repeatable ones say so): `agent` (repeatable), `group`, `reason`,
`olderThan` (seconds), `expiringBefore` (ISO-8601 or epoch milliseconds), `q` (text,
case-insensitive), `limit` (1..500, default 50), `cursor` (opaque, from a `next`).
Anything else wrong is a `QueryError` naming the parameter (the API answers 400).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

import orjson

from gateway.inbox.search import searchable

DEFAULT_LIMIT = 50
MAX_LIMIT = 500
MAX_TEXT = 256  # characters of a filter value
MAX_AGENTS = 100  # agent parameters in one request


class QueryError(ValueError):
    """A parameter the API cannot read: the answer is 400 with this text."""


@dataclass(frozen=True, slots=True)
class Cursor:
    """Where a page ended: the last item's place in the order (opened at, key)."""

    opened_at_ms: int
    key: str

    def encode(self) -> str:
        raw = orjson.dumps([self.opened_at_ms, self.key])
        return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")

    @staticmethod
    def decode(text: str) -> Cursor:
        try:
            raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
            ms, key = orjson.loads(raw)
        except (binascii.Error, ValueError, TypeError) as exc:
            raise QueryError("cursor: not a cursor this inbox gave") from exc
        if not isinstance(ms, int) or not isinstance(key, str):
            raise QueryError("cursor: not a cursor this inbox gave")
        return Cursor(ms, key)


@dataclass(frozen=True, slots=True)
class Query:
    agents: tuple[str, ...] = ()
    group: str | None = None
    reason: str | None = None
    older_than_ms: int | None = None
    expiring_before_ms: int | None = None
    text: str | None = None
    limit: int = DEFAULT_LIMIT
    cursor: Cursor | None = None


def parse(params: Mapping[str, list[str]]) -> Query:
    """A Query from a request's parameters (each name to its values, in order)."""
    known = {"agent", "group", "reason", "olderThan", "expiringBefore", "q", "limit", "cursor"}
    unknown = sorted(set(params) - known)
    if unknown:
        raise QueryError(f"unknown parameter {unknown[0][:MAX_TEXT]!r}")
    agents = tuple(_text("agent", a) for a in params.get("agent", []))
    if len(agents) > MAX_AGENTS:
        raise QueryError(f"agent: at most {MAX_AGENTS} agents at once")
    older = _one(params, "olderThan")
    expiring = _one(params, "expiringBefore")
    limit = _one(params, "limit")
    cursor = _one(params, "cursor")
    text = _one(params, "q")
    return Query(
        agents=agents,
        group=_maybe(params, "group"),
        reason=_maybe(params, "reason"),
        older_than_ms=None if older is None else _seconds_ms("olderThan", older),
        expiring_before_ms=None if expiring is None else _time_ms("expiringBefore", expiring),
        text=searchable(text) if text else None,
        limit=DEFAULT_LIMIT if limit is None else _limit(limit),
        cursor=None if not cursor else Cursor.decode(cursor),
    )


def _one(params: Mapping[str, list[str]], name: str) -> str | None:
    values = params.get(name, [])
    if len(values) > 1:
        raise QueryError(f"{name}: given {len(values)} times, once at most")
    return _text(name, values[0]) if values else None


def _maybe(params: Mapping[str, list[str]], name: str) -> str | None:
    value = _one(params, name)
    return value if value else None


def _text(name: str, value: str) -> str:
    if len(value) > MAX_TEXT:
        raise QueryError(f"{name}: longer than {MAX_TEXT} characters")
    return value


def _seconds_ms(name: str, value: str) -> int:
    try:
        seconds = float(value)
    except ValueError:
        raise QueryError(f"{name}: not a number of seconds") from None
    if not 0 <= seconds < 10**10:
        raise QueryError(f"{name}: seconds from 0 to 10^10")
    return int(seconds * 1000)


def _time_ms(name: str, value: str) -> int:
    if value.isascii() and value.isdigit():
        return int(value[:15])
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise QueryError(f"{name}: neither ISO-8601 nor epoch milliseconds") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def _limit(value: str) -> int:
    if not (value.isascii() and value.isdigit()) or not 1 <= int(value[:6]) <= MAX_LIMIT:
        raise QueryError(f"limit: a whole number from 1 to {MAX_LIMIT}")
    return int(value)
