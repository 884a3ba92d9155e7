"""The pause scenario's recovery reading: per-window p99 after SIGCONT (pure, no broker)."""

from __future__ import annotations

from collections.abc import Callable

from bench.scenarios.pause import recovery


def _load(
    rate: float, until: float, latency_at: Callable[[float], float]
) -> list[tuple[float, float]]:
    """(sent at, latency s) at `rate` requests/s from 0 to `until` s."""
    count = int(rate * until)
    return [(n / rate, latency_at(n / rate)) for n in range(count)]


def test_recovery_is_the_start_of_the_first_window_that_stays_under_the_limit() -> None:
    # resumed at 5 s; requests sent before 6.5 s wait 2 s, later ones 50 ms
    latencies = _load(100, 10, lambda sent: 2.0 if sent < 6.5 else 0.05)
    found = recovery(latencies, resumed_at=5.0, sent_until=10.0)
    assert found["recovered"] is True
    assert found["recovery_seconds"] == 1.5
    assert [w[0] for w in found["windows"]] == [0.0, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5]
    assert found["windows"][0][2] == 2000.0 and found["windows"][-1][2] == 50.0


def test_a_late_spike_moves_recovery_past_it() -> None:
    def latency(sent: float) -> float:
        if sent < 5.5 or 7.0 <= sent < 7.5:
            return 0.9
        return 0.04

    found = recovery(_load(100, 10, latency), resumed_at=5.0, sent_until=10.0)
    assert found["recovered"] is True and found["recovery_seconds"] == 2.5


def test_not_recovered_by_the_end_reports_the_rest_of_the_load() -> None:
    found = recovery(_load(100, 8, lambda sent: 0.3), resumed_at=5.0, sent_until=8.0)
    assert found["recovered"] is False
    assert found["recovery_seconds"] == 3.0
    assert all(w[2] == 300.0 for w in found["windows"])


def test_already_fine_after_the_pause_is_zero() -> None:
    found = recovery(_load(100, 8, lambda sent: 0.02), resumed_at=5.0, sent_until=8.0)
    assert found == {**found, "recovered": True, "recovery_seconds": 0.0}
