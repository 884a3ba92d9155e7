from gateway.observe.warnings import WarningLimiter


def test_burst_passes_then_suppressed_and_counted_on_the_next_window():
    limiter = WarningLimiter(burst=2, window_ms=1_000)
    key = ("agent", "thread", "unrecognised_entry", "")
    assert limiter.admit(key, 0) == (True, 0)
    assert limiter.admit(key, 10) == (True, 0)
    assert limiter.admit(key, 20) == (False, 0)
    assert limiter.admit(key, 30) == (False, 0)
    # a new window: passes, carrying how many were held back
    assert limiter.admit(key, 1_000) == (True, 2)
    assert limiter.admit(key, 1_001) == (True, 0)


def test_keys_are_independent():
    limiter = WarningLimiter(burst=1, window_ms=1_000)
    assert limiter.admit(("a", "t1", "c", ""), 0)[0]
    assert not limiter.admit(("a", "t1", "c", ""), 1)[0]
    assert limiter.admit(("a", "t2", "c", ""), 1)[0]
    assert limiter.admit(("a", "t1", "other", ""), 1)[0]


def test_undo_takes_back_what_a_journaled_round_admitted():
    limiter = WarningLimiter(burst=2, window_ms=1_000)
    key, other = ("a", "t1", "c", ""), ("a", "t2", "c", "")
    assert limiter.admit(key, 0) == (True, 0)  # committed before the round
    journal: list = []
    assert limiter.admit(key, 1, journal) == (True, 0)
    assert limiter.admit(key, 2, journal) == (False, 0)
    assert limiter.admit(other, 3, journal) == (True, 0)
    limiter.undo(journal)
    assert journal == []
    # as before the round: one more passes on `key`, `other` starts afresh
    assert limiter.admit(key, 4) == (True, 0)
    assert limiter.admit(key, 5) == (False, 0)
    assert limiter.admit(other, 6) == (True, 0)
