"""The floor on a pair's commits (pure: time is an argument)."""

from __future__ import annotations

from gateway.kafka.exactly_once.pacing import CommitPacing

KEY = ("bot", 0)


def test_off_by_default_every_commit_starts_at_once() -> None:
    pacing = CommitPacing()
    pacing.began(KEY, 10.0)
    assert pacing.wait(KEY, 1, 10.0) == 0.0


def test_a_pairs_first_commit_starts_at_once() -> None:
    assert CommitPacing(0.05).wait(KEY, 1, 10.0) == 0.0


def test_the_next_commit_waits_out_the_interval_since_the_last_began() -> None:
    pacing = CommitPacing(0.05)
    pacing.began(KEY, 10.0)
    assert abs(pacing.wait(KEY, 1, 10.02) - 0.03) < 1e-9
    assert pacing.wait(KEY, 1, 10.05) == 0.0
    assert pacing.wait(KEY, 1, 11.0) == 0.0  # a request after a quiet spell: at once
    assert pacing.wait(("bot", 1), 1, 10.02) == 0.0  # another pair is not held back


def test_enough_pending_records_start_the_commit_before_the_interval() -> None:
    pacing = CommitPacing(0.05, min_records=100)
    pacing.began(KEY, 10.0)
    assert pacing.wait(KEY, 99, 10.01) > 0
    assert pacing.wait(KEY, 100, 10.01) == 0.0


def test_a_forgotten_pair_starts_afresh() -> None:
    pacing = CommitPacing(0.05)
    pacing.began(KEY, 10.0)
    pacing.forget(KEY)
    assert pacing.wait(KEY, 1, 10.01) == 0.0
