from gateway.core.values.thread import InterruptRecord, RunStatus, ThreadState
from gateway.state.retention import Retention

R = Retention(thread_ms=1_000, interrupt_grace_ms=100, interrupt_ms=50_000)


def test_idle_thread_goes_after_thread_retention():
    state = ThreadState("t", RunStatus.SUCCEEDED, updated_ms=10)
    assert not R.expired(state, 1_009)
    assert R.expired(state, 1_010)


def test_open_interrupts_with_expiry_are_kept_until_expiry_plus_grace():
    expiring = InterruptRecord("a", "r", expires_at="1970-01-01T00:00:05Z")
    state = ThreadState("t", RunStatus.INTERRUPTED, interrupts=(expiring,), updated_ms=0)
    assert R.keep_until_ms(state) == 5_100
    assert not R.expired(state, 5_099) and R.expired(state, 5_100)


def test_open_interrupts_without_readable_expiry_use_the_longer_retention():
    no_expiry = InterruptRecord("a", "r")
    unreadable = InterruptRecord("b", "r", expires_at="next tuesday")
    for interrupts in ((no_expiry,), (unreadable,)):
        state = ThreadState("t", RunStatus.INTERRUPTED, interrupts=interrupts, updated_ms=0)
        assert R.keep_until_ms(state) == 50_000


def test_expiry_never_shortens_below_thread_retention():
    early = InterruptRecord("a", "r", expires_at="1970-01-01T00:00:00.010Z")
    state = ThreadState("t", RunStatus.INTERRUPTED, interrupts=(early,), updated_ms=500)
    assert R.keep_until_ms(state) == 1_500
