"""Reading `expiresAt`: the gateway's own judgement of whether an interrupt expired.

`expiresAt` is format-unconstrained in the schema. The gateway reads it as
ISO 8601; a value without a UTC offset is UTC; now-or-earlier is expired. A
value it cannot read is judged *not* expired, and the caller warns.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from enum import Enum
from functools import lru_cache


class Expiry(Enum):
    NONE = "none"  # no expiresAt
    LIVE = "live"
    EXPIRED = "expired"
    UNREADABLE = "unreadable"


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


@lru_cache(maxsize=4096)
def expires_at_ms(value: str) -> int | None:
    """Epoch milliseconds of an ISO 8601 `expiresAt`, or None if unreadable.

    A time between two milliseconds rounds up: an interrupt is never judged
    expired before its own time.
    """
    micros = iso_micros(value)
    return None if micros is None else -(-micros // 1000)


def iso_micros(value: str) -> int | None:
    """Epoch microseconds of an ISO 8601 time (no offset: UTC), or None if unreadable."""
    text = value.strip()
    if not text or len(text) > 64:
        return None
    if text[-1] in "zZ":
        text = text[:-1] + "+00:00"
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return (moment - _EPOCH) // _MICROSECOND


def judge(expires_at: object, now_ms: int) -> Expiry:
    """Judge one interrupt's `expiresAt` at the time `now_ms` (epoch ms)."""
    if expires_at is None:
        return Expiry.NONE
    if not isinstance(expires_at, str):
        return Expiry.UNREADABLE
    at = expires_at_ms(expires_at)
    if at is None:
        return Expiry.UNREADABLE
    return Expiry.EXPIRED if at <= now_ms else Expiry.LIVE
