"""A sweep reads held threads without decoding them (`changelog.sweep_view`), and
decodes only those that may have something due: what it changes must be exactly what
decoding every thread would change."""

from __future__ import annotations

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.codec import changelog
from gateway.core.values.thread import ForwardRecord, InterruptRecord, RunStatus, ThreadState
from gateway.state.retention import Retention
from tests.kafka.test_pair import make_pair

RETENTION = Retention(thread_ms=10_000, interrupt_grace_ms=2_000, interrupt_ms=50_000)
# expiry times around the sweeps' times below (1970-01-01T00:00:SS), and unreadable ones
EXPIRIES = st.sampled_from(
    [
        None,
        "1970-01-01T00:00:03Z",
        "1970-01-01T00:00:08Z",
        "1970-01-01T00:00:20Z",
        "1970-01-01T00:01:00Z",
        "next tuesday",
    ]
)


@st.composite
def states(draw: st.DrawFn, thread_id: str) -> ThreadState:
    ids = draw(st.lists(st.sampled_from(["a", "b", "c"]), unique=True, max_size=3))
    interrupts = tuple(
        InterruptRecord(
            i,
            "tool_call",
            expires_at=draw(EXPIRIES),
            expiry_announced=draw(st.booleans()),
            response_schema=b'{"type":"object"}' if draw(st.booleans()) else None,
        )
        for i in ids
    )
    answered = tuple(draw(st.lists(st.sampled_from(ids), unique=True))) if ids else ()
    forwards = (ForwardRecord("r2", "fp", "r1", answered, draw(st.booleans())),) if answered else ()
    return ThreadState(
        thread_id,
        draw(st.sampled_from(list(RunStatus))),
        run_id="r1",
        interrupts=interrupts,
        forwards=forwards,
        updated_ms=draw(st.integers(0, 30_000)),
        interrupts_run_id="r1" if ids else None,
    )


def test_the_view_reads_what_a_sweep_needs():
    expiring = InterruptRecord("a", "r", expires_at="1970-01-01T00:00:05Z")
    announced = InterruptRecord("b", "r", expiry_announced=True)
    state = ThreadState(
        "t", RunStatus.INTERRUPTED, interrupts=(expiring, announced), updated_ms=1_234
    )
    expected = (RunStatus.INTERRUPTED, 1_234, [("1970-01-01T00:00:05Z", False), (None, True)])
    assert changelog.sweep_view(changelog.encode_held(state)) == expected
    assert changelog.sweep_view(changelog.encode(state)) == expected
    assert changelog.sweep_view(changelog.encode_held(ThreadState("t"))) == (
        RunStatus.UNKNOWN,
        0,
        [],
    )


def test_a_value_the_view_cannot_vouch_for_is_left_to_decoding():
    not_v4 = bytes([3]) + b"\x00"  # an Avro version
    garbage = b"\x04\xc1"  # msgpack's never-used byte
    not_array = b"\x04" + orjson.dumps(1)
    bad_status = changelog.encode_held(ThreadState("t"))[:3] + b"\x63"  # status 99
    interrupts_not_a_list = b"\x04\x99\xc0\x03\xc0\xc0\xc0\x05\xc0\xc0\x07"
    for value in (not_v4, garbage, not_array, bad_status, interrupts_not_a_list):
        assert changelog.sweep_view(value) is None, value


def _swept(threads: list[ThreadState], now_ms: int, *, view: bool) -> list[tuple]:
    pair, _ = make_pair(retention=RETENTION)
    for state in threads:
        pair.store.load(changelog.encode_held(state), state.thread_id)
    if not view:
        pair.sweep_view = lambda thread_id: None  # every thread decoded
    pair.sweep(now_ms)
    out = [(r.topic, r.key, r.value) for r in pair.round.out]
    changed = [(r.key, r.value) for r in pair.round.changelog_records()]
    return out + changed


@settings(max_examples=300, deadline=None)
@given(
    threads=st.lists(st.integers(0, 10**6), unique=True, min_size=1, max_size=6).flatmap(
        lambda ns: st.tuples(*(states(f"t{n}") for n in ns))
    ),
    now_ms=st.sampled_from([0, 5_000, 9_000, 12_000, 25_000, 45_000, 70_000, 90_000]),
)
def test_a_sweep_through_the_view_changes_what_decoding_every_thread_changes(threads, now_ms):
    assert _swept(list(threads), now_ms, view=True) == _swept(list(threads), now_ms, view=False)


def test_the_view_decodes_only_threads_that_may_have_something_due(monkeypatch):
    kept = ThreadState("idle", RunStatus.SUCCEEDED, updated_ms=5_000)
    live = InterruptRecord("a", "r", expires_at="1970-01-01T00:01:00Z")
    waiting = ThreadState("waiting", RunStatus.INTERRUPTED, interrupts=(live,), updated_ms=5_000)
    due = InterruptRecord("a", "r", expires_at="1970-01-01T00:00:08Z")
    expiring = ThreadState("expiring", RunStatus.INTERRUPTED, interrupts=(due,), updated_ms=5_000)
    old = ThreadState("old", RunStatus.SUCCEEDED, updated_ms=0)
    pair, _ = make_pair(retention=RETENTION)
    for state in (kept, waiting, expiring, old):
        pair.store.load(changelog.encode_held(state), state.thread_id)
    decoded = []
    decode = changelog.decode_held

    def counting(value: bytes, thread_id: str) -> ThreadState:
        decoded.append(thread_id)
        return decode(value, thread_id)

    monkeypatch.setattr(changelog, "decode_held", counting)
    pair.sweep(now_ms=12_000)
    assert sorted(decoded) == ["expiring", "old"]  # past its expiresAt; past retention
    assert [r.key for r in pair.round.changelog_records()] == [b"expiring", b"old"]


def test_retention_from_the_view_never_outlasts_the_states_own():
    for state in (
        ThreadState("t", RunStatus.ACTIVE, updated_ms=100),
        ThreadState("t", RunStatus.SUCCEEDED, updated_ms=100),
        ThreadState(
            "t",
            RunStatus.INTERRUPTED,
            interrupts=(InterruptRecord("a", "r", expires_at="1970-01-01T00:00:01Z"),),
            updated_ms=100,
        ),
        ThreadState(
            "t", RunStatus.INTERRUPTED, interrupts=(InterruptRecord("a", "r"),), updated_ms=100
        ),
    ):
        surely = RETENTION.kept_at_least_until_ms(state.status, 100, bool(state.interrupts))
        assert surely <= RETENTION.keep_until_ms(state)
        if not state.interrupts:
            assert surely == RETENTION.keep_until_ms(state)
