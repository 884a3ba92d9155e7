"""Reading `expiresAt` (gateway.core.reading.expiry): ISO 8601, no offset = UTC,
now-or-earlier is expired, unreadable is not expired."""

from __future__ import annotations

from datetime import timedelta, timezone

import pytest

from gateway.core.reading import expiry
from gateway.core.reading.expiry import Expiry, expires_at_ms, judge
from tests.core.factories import NOW, NOW_MS

NOON_MS = 1_748_779_200_000  # 2025-06-01T12:00:00Z


def test_the_reference_instant():
    assert NOW_MS == NOON_MS


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2025-06-01T12:00:00Z", NOON_MS),
        ("2025-06-01T12:00:00z", NOON_MS),
        ("2025-06-01T12:00:00+00:00", NOON_MS),
        ("2025-06-01T12:00:00-00:00", NOON_MS),
        ("2025-06-01T12:00:00", NOON_MS),  # no offset: UTC, not the local zone
        ("2025-06-01T12:00:00.250", NOON_MS + 250),
        ("2025-06-01T12:00:00.001Z", NOON_MS + 1),
        ("2025-06-01T14:00:00+02:00", NOON_MS),
        ("2025-06-01T07:30:00-04:30", NOON_MS),
        ("2025-06-01T12:00Z", NOON_MS),
        ("2025-06-01", NOON_MS - 12 * 3_600_000),
        ("  2025-06-01T12:00:00Z\n", NOON_MS),
        ("1970-01-01T00:00:00Z", 0),
    ],
)
def test_iso_8601_times_are_read_to_the_millisecond(text, expected):
    assert expires_at_ms(text) == expected


def test_no_offset_means_utc_whatever_the_local_zone(monkeypatch):
    import time

    monkeypatch.setenv("TZ", "Pacific/Kiritimati")  # UTC+14
    if hasattr(time, "tzset"):
        time.tzset()
    try:
        expiry._cache.clear()
        assert expires_at_ms("2025-06-01T12:00:00") == NOON_MS
    finally:
        monkeypatch.undo()
        if hasattr(time, "tzset"):
            time.tzset()
        expiry._cache.clear()


@pytest.mark.parametrize(
    "text",
    [
        "",
        "   ",
        "tomorrow",
        "2025-13-01T00:00:00Z",
        "2025-06-31T00:00:00Z",
        "2025-06-01T25:00:00Z",
        "1748779200000",
        "June 1st, 2025",
        "2025-06-01T12:00:00+25:00",
        "2025-06-01T12:00:00Z" + " " * 60 + "x",
        "9" * 80,
    ],
)
def test_unreadable_values(text):
    assert expires_at_ms(text) is None
    assert judge(text, NOW_MS) is Expiry.UNREADABLE


@pytest.mark.parametrize("value", [1_748_779_200_000, 1.5, ["2025"], {"at": "2025"}, True])
def test_a_value_that_is_not_a_string_is_unreadable(value):
    assert judge(value, NOW_MS) is Expiry.UNREADABLE


def test_absent_is_none():
    assert judge(None, NOW_MS) is Expiry.NONE


@pytest.mark.parametrize(
    ("offset_ms", "verdict"),
    [
        (-86_400_000, Expiry.EXPIRED),
        (-1, Expiry.EXPIRED),
        (0, Expiry.EXPIRED),  # exactly now: now-or-earlier is expired
        (1, Expiry.LIVE),
        (86_400_000, Expiry.LIVE),
    ],
)
def test_now_or_earlier_is_expired(offset_ms, verdict):
    moment = NOW + timedelta(milliseconds=offset_ms)
    text = moment.isoformat(timespec="milliseconds")
    assert judge(text, NOW_MS) is verdict
    assert judge(text.replace("+00:00", "Z"), NOW_MS) is verdict
    assert judge(text.replace("+00:00", ""), NOW_MS) is verdict
    shifted = moment.astimezone(timezone(timedelta(hours=-7)))
    assert judge(shifted.isoformat(timespec="milliseconds"), NOW_MS) is verdict


def test_the_time_is_an_argument():
    text = "2025-06-01T12:00:00Z"
    assert [judge(text, NOW_MS + d) for d in (-1, 0, 1)] == [
        Expiry.LIVE,
        Expiry.EXPIRED,
        Expiry.EXPIRED,
    ]


def test_a_time_between_milliseconds_is_not_expired_early():
    from gateway.core.reading.expiry import Expiry, expires_at_ms, judge

    assert expires_at_ms("1970-01-01T00:00:00.0005Z") == 1
    assert judge("1970-01-01T00:00:00.0005Z", 0) is Expiry.LIVE
    assert judge("1970-01-01T00:00:00.0005Z", 1) is Expiry.EXPIRED


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2025-06-01T12.5Z", NOON_MS + 30 * 60_000),  # a decimal fraction of the hour
        ("2025-06-01T12:00.5Z", NOON_MS + 30_000),  # of the minute
        ("2025-06-01T12:00:00,25Z", NOON_MS + 250),  # a comma is a decimal sign too
        ("20250601T120000Z", NOON_MS),  # basic format
        ("20250601T1400+0200", NOON_MS),
        ("2025-152T12:00Z", NOON_MS),  # ordinal date: day 152 of 2025
        ("2025-W22-7T12:00Z", NOON_MS),  # week date: Sunday of week 22
        ("2025-05-31T24:00Z", NOON_MS - 12 * 3_600_000),  # the end of a day
        ("2025-06-01T11:59:60Z", NOON_MS),  # a leap second ends at the next minute
        ("2025-06-01t12:00:00Z", NOON_MS),
        ("2025-06-01 12:00:00Z", NOON_MS),
    ],
)
def test_every_iso_8601_form_is_read_at_its_own_time(text, expected):
    assert expires_at_ms(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "2025-06-01T12:00:00.0000001Z",  # 100 ns after noon
        "2025-06-01T12:00:00.000000000001Z",
        "2025-06-01T12.0000000000001Z",
    ],
)
def test_a_fraction_below_the_microsecond_is_never_cut_off(text):
    assert expires_at_ms(text) == NOON_MS + 1
    assert judge(text, NOON_MS) is Expiry.LIVE


@pytest.mark.parametrize(
    "text",
    [
        "2025-06-01T24:00:01Z",
        "2025-06-01T12:60Z",
        "2025-06-01T12:00:61Z",
        "2025-06-01T12:0000Z",  # extended and basic mixed
        "2025-366T00:00Z",  # 2025 has 365 days
        "2025-000T00:00Z",
        "2025-06-01T12:00:00+24:00",
        "2025-06-01T",
        "2025-06-01T12:00:00.Z",
    ],
)
def test_forms_iso_8601_does_not_allow_are_unreadable(text):
    assert expires_at_ms(text) is None


def test_the_reading_cache_is_bounded_by_bytes_and_keeps_no_long_value():
    huge = "2025-06-01T12:00:00Z" + " " * 1_000_000 + "x"
    assert expires_at_ms(huge) is None
    for n in range(20_000):
        expires_at_ms(f"2025-06-01T12:00:{n % 60:02d}.{n:06d}Z")
    assert expiry._cache.used <= expiry._CACHE_BYTES
    assert all(len(key) <= 64 for key in expiry._cache._entries)
