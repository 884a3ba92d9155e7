"""A sweep pass looks only at threads that may have something due: those committed
since the last pass, those read from a round that may abort, and the chunks whose
earliest due time has come. Whatever happens between passes (commits, aborts,
slices, the clock), each pass must change exactly what a pass decoding every
thread held would change."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.codec import changelog
from gateway.core.values.thread import InterruptRecord, RunStatus, ThreadState
from gateway.kafka.pairs import sweep as sweep_module
from gateway.kafka.pairs.pair import PartitionPair
from tests.kafka.test_pair import commit, make_pair
from tests.kafka.test_sweep_view import RETENTION, states

IDS = [f"t{n}" for n in range(6)]
TIMES = st.sampled_from([0, 2_000, 5_000, 9_000, 12_000, 25_000, 45_000, 70_000, 90_000])


def _outputs(pair: PartitionPair) -> list[tuple]:
    out = [(r.topic, r.key, r.value) for r in pair.round.out]
    changed = [(b"changelog", r.key, r.value) for r in pair.round.changelog_records()]
    return sorted(out + changed, key=repr)


# Warnings are not limited here: the pair under test has published warnings before
# (in passes whose rounds committed), the reference pair none.
UNLIMITED = 10**9


def _every_thread_decoded(pair: PartitionPair, now_ms: int) -> list[tuple]:
    """What one pass decoding every committed thread of `pair` would write."""
    reference, _ = make_pair(retention=RETENTION, burst=UNLIMITED)
    for thread_id, value in pair.store.held().items():
        reference.store.load(value, thread_id)
    reference.sweep_view = lambda thread_id: None  # type: ignore[method-assign]
    reference.sweep(now_ms)
    return _outputs(reference)


def _change(pair: PartitionPair, thread_id: str, new: ThreadState | None) -> None:
    old = pair.state(thread_id)
    if new is not None:
        pair.put(old, new, thread_id)
    elif old is not None:
        pair.delete(old, thread_id)


@st.composite
def operations(draw: st.DrawFn) -> list[tuple]:
    ops = []
    for _ in range(draw(st.integers(1, 10))):
        kind = draw(st.sampled_from(["sweep", "sweep", "commit", "abort", "sliced"]))
        thread_id = draw(st.sampled_from(IDS))
        new = draw(st.none() | states(thread_id))
        ops.append((kind, thread_id, new, draw(TIMES), draw(st.booleans())))
    return ops


@settings(max_examples=300, deadline=None)
@given(
    first=st.lists(st.sampled_from(IDS), unique=True).flatmap(
        lambda ids: st.tuples(*(states(i) for i in ids))
    ),
    ops=operations(),
)
def test_every_pass_changes_what_a_pass_decoding_every_thread_changes(first, ops):
    pair, _ = make_pair(retention=RETENTION, burst=UNLIMITED)
    for state in first:
        pair.store.load(changelog.encode_held(state), state.thread_id)
    for kind, thread_id, new, now_ms, keep in ops:
        if kind == "commit":  # a thread changes, and its round commits
            _change(pair, thread_id, new)
            commit(pair)
        elif kind == "abort":  # a pass reads a change its round then aborts
            _change(pair, thread_id, new)
            pair.sweep(now_ms)
            pair.aborted()
        elif kind == "sliced":  # a pass in slices, a thread committed between them
            while not pair.sweep(now_ms, limit=2, max_changes=1):
                _change(pair, thread_id, new)
                commit(pair)
            commit(pair)
        else:
            expected = _every_thread_decoded(pair, now_ms)
            assert pair.sweep(now_ms) is True
            assert _outputs(pair) == expected
            if keep:  # the sweep's round commits, or aborts and its records are undone
                commit(pair)
            else:
                pair.aborted()


def _counting_looks(pair: PartitionPair) -> list[str]:
    looked: list[str] = []
    view = pair.sweep_view

    def counting(thread_id: str):
        looked.append(thread_id)
        return view(thread_id)

    pair.sweep_view = counting  # type: ignore[method-assign]
    return looked


def test_a_pass_looks_only_at_what_changed_or_fell_due(monkeypatch):
    monkeypatch.setattr(sweep_module, "CHUNK", 100)
    pair, _ = make_pair(retention=RETENTION)  # idle threads kept 10 s after they changed
    for n in range(1_000):
        updated = 50_000 if n < 950 else 3_000  # the last 50 go at 13 s
        state = ThreadState(f"t{n}", RunStatus.SUCCEEDED, updated_ms=updated)
        pair.store.load(changelog.encode_held(state), state.thread_id)
    looked = _counting_looks(pair)
    assert pair.sweep(now_ms=1_000) is True
    assert len(looked) == 1_000  # the first pass: every thread

    looked.clear()
    pair.sweep(now_ms=2_000)
    assert looked == []  # nothing changed, nothing due

    expiring = InterruptRecord("i", "r", expires_at="1970-01-01T00:00:05Z")
    state = ThreadState("t3", RunStatus.INTERRUPTED, interrupts=(expiring,), updated_ms=2_500)
    _change(pair, "t3", state)
    commit(pair)
    pair.sweep(now_ms=3_000)
    assert looked == ["t3"]  # what was committed since
    assert pair.round.out == []

    looked.clear()
    pair.sweep(now_ms=5_000)  # t3's interrupt expires: its chunk, since, is t3 alone
    assert looked == ["t3"]
    assert [r.key for r in pair.round.changelog_records()] == [b"t3"]
    commit(pair)

    looked.clear()
    pair.sweep(now_ms=13_000)  # the chunk of t900-t999 falls due: t950-t999 go
    assert sorted(looked) == sorted({"t3", *(f"t{n}" for n in range(900, 1_000))})
    deleted = {r.key for r in pair.round.changelog_records() if r.value is None}
    # and t3, changed by the last pass, at 2.5 s + 10 s (its expiry + grace: 7 s)
    assert deleted == {b"t3", *(f"t{n}".encode() for n in range(950, 1_000))}


def test_every_so_many_passes_one_looks_at_every_thread(monkeypatch):
    monkeypatch.setattr(sweep_module, "FULL_EVERY", 3)
    pair, _ = make_pair(retention=RETENTION)
    for n in range(10):
        state = ThreadState(f"t{n}", RunStatus.SUCCEEDED, updated_ms=50_000)
        pair.store.load(changelog.encode_held(state), state.thread_id)
    looked = _counting_looks(pair)
    counts = []
    for now_ms in range(6):
        looked.clear()
        pair.sweep(now_ms)
        counts.append(len(looked))
    assert counts == [10, 0, 0, 10, 0, 0]


def test_a_restored_store_is_looked_at_whole():
    pair, _ = make_pair(retention=RETENTION)
    pair.sweep(now_ms=0)
    restored, _ = make_pair(retention=RETENTION)
    old = ThreadState("old", RunStatus.SUCCEEDED, updated_ms=0)
    restored.store.load(changelog.encode_held(old), "old")
    pair.load_store(restored.store, set(), 0)
    pair.sweep(now_ms=20_000)
    assert [(r.key, r.value) for r in pair.round.changelog_records()] == [(b"old", None)]


def test_a_thread_decoded_but_not_due_is_looked_at_again_at_its_next_expiry():
    """Past the view's bound on its retention (10 s after it changed) a thread with
    interrupts is decoded: kept until its last expiry + grace (62 s), it has one
    expiring at 20 s to announce first."""
    soon = InterruptRecord("soon", "r", expires_at="1970-01-01T00:00:20Z")
    late = InterruptRecord("late", "r", expires_at="1970-01-01T00:01:00Z")
    state = ThreadState("t", RunStatus.INTERRUPTED, interrupts=(soon, late), updated_ms=0)
    pair, _ = make_pair(retention=RETENTION)
    pair.store.load(changelog.encode_held(state), "t")
    looked = _counting_looks(pair)
    pair.sweep(now_ms=12_000)
    assert looked == ["t"] and pair.round.out == []
    pair.sweep(now_ms=19_999)
    assert looked == ["t"]
    pair.sweep(now_ms=20_000)
    assert [r.key for r in pair.round.changelog_records()] == [b"t"]
    assert b"interrupt_expired" in pair.round.out[0].value
