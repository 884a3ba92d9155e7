"""Reading `expiresAt`: the gateway's own judgement of whether an interrupt expired.

`expiresAt` is format-unconstrained in the schema. The gateway reads it as
ISO 8601; a value without a UTC offset is UTC; now-or-earlier is expired. A
value it cannot read is judged *not* expired, and the caller warns.
"""

from __future__ import annotations

import re
from datetime import date, timedelta
from enum import Enum

from gateway.core.values.bytecache import ByteLRU


class Expiry(Enum):
    NONE = "none"  # no expiresAt
    LIVE = "live"
    EXPIRED = "expired"
    UNREADABLE = "unreadable"


_READ_LIMIT = 64  # longer text is no ISO 8601 time
_CACHE_BYTES = 1024 * 1024
_NO_TIME = -1 << 80  # cached "unreadable" (no real time is this early)
_cache: ByteLRU[str, int] = ByteLRU(_CACHE_BYTES)  # bounded: _CACHE_BYTES in all


def expires_at_ms(value: str) -> int | None:
    """Epoch milliseconds of an ISO 8601 `expiresAt`, or None if unreadable.

    A time between two milliseconds rounds up: an interrupt is never judged
    expired before its own time. Readings are cached by the bytes they hold;
    a value too long to be a time is never read, nor kept.
    """
    text = value.strip()
    if len(text) > _READ_LIMIT:
        return None
    known = _cache.get(text)
    if known is None:
        micros = iso_micros(text)
        known = _NO_TIME if micros is None else -(-micros // 1000)
        _cache.put(text, known, len(text) + 100)
    return None if known == _NO_TIME else known


_DATE_ORDINAL = re.compile(r"(\d{4})-?(\d{3})")
_TIME = re.compile(
    r"(?P<h>\d{2})(?:(?P<c>:?)(?P<m>\d{2})(?:(?P=c)(?P<s>\d{2}))?)?"
    r"(?:[.,](?P<f>\d+))?"
    r"(?:(?P<z>[zZ])|(?P<sign>[+-])(?P<oh>\d{2})(?::?(?P<om>\d{2}))?)?"
)
_HOUR_US = 3_600_000_000
_DAY_US = 24 * _HOUR_US
_EPOCH_DATE = date(1970, 1, 1)


def _date(text: str) -> date | None:
    try:
        return date.fromisoformat(text)  # calendar and week dates, extended or basic
    except ValueError:
        pass
    ordinal = _DATE_ORDINAL.fullmatch(text)
    if ordinal is None:
        return None
    year, day = int(ordinal[1]), int(ordinal[2])
    try:
        first = date(year, 1, 1)
        found = first + timedelta(days=day - 1)
    except (ValueError, OverflowError):
        return None
    return found if 1 <= day and found.year == year else None


def _time_us(text: str) -> int | None:
    """Microseconds after midnight UTC (rounded up), or None if unreadable."""
    time = _TIME.fullmatch(text)
    if time is None:
        return None
    hour, minute, second = int(time["h"]), int(time["m"] or 0), int(time["s"] or 0)
    if minute > 59 or second > 60 or hour > 24:  # 60: a leap second
        return None
    # A decimal fraction belongs to the last component written: hour, minute or second.
    unit = 1_000_000 if time["s"] else 60_000_000 if time["m"] else _HOUR_US
    digits = time["f"] or ""
    fraction = -(-int(digits) * unit // 10 ** len(digits)) if digits else 0  # rounded up
    if hour == 24 and (minute or second or fraction):
        return None  # 24:00 is the end of the day, nothing after it
    offset = 0
    if time["sign"]:
        off_h, off_m = int(time["oh"]), int(time["om"] or 0)
        if off_h > 23 or off_m > 59:
            return None
        offset = (off_h * 60 + off_m) * 60_000_000 * (1 if time["sign"] == "+" else -1)
    return (hour * 3600 + minute * 60 + second) * 1_000_000 + fraction - offset


def iso_micros(value: str) -> int | None:
    """Epoch microseconds of an ISO 8601 time (no offset: UTC), or None if unreadable.

    Read by hand rather than by `datetime.fromisoformat`, which reads a decimal
    fraction of an hour or a minute as one of a second and cuts digits after
    the microsecond; both would judge an interrupt expired before its time.
    """
    text = value.strip()
    if not text or len(text) > _READ_LIMIT:
        return None
    date_text, separator, time_text = text.replace("t", "T").replace(" ", "T", 1).partition("T")
    day = _date(date_text)
    if day is None:
        return None
    time_us = _time_us(time_text) if separator else 0
    if time_us is None:
        return None
    return (day - _EPOCH_DATE).days * _DAY_US + time_us


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
