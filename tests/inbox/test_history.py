"""The bounded per-thread history: runs, how their interrupts closed, the last verdicts."""

from __future__ import annotations

import gc
import tracemalloc

import orjson
import pytest

from gateway.inbox import verdicts
from gateway.inbox.history import (
    MAX_LOOSE_CLOSES,
    MAX_RUN_INTERRUPTS,
    MAX_RUNS,
    MAX_VERDICTS,
    History,
)
from tests.inbox.support import audit


def verdict(thread: str = "t1", n: int = 0, **kw) -> verdicts.Verdict:
    found = verdicts.read(audit("bot", thread, correlation=f"c{n}", at_ms=1_000 + n, **kw))
    assert found is not None
    return found


def shown(history: History, thread: str = "t1") -> list[dict]:
    entry = history.get("bot", thread)
    assert entry is not None
    return [orjson.loads(v) for v in entry.verdicts]


def test_the_last_ten_verdicts_are_kept_in_order() -> None:
    history = History(10)
    for n in range(MAX_VERDICTS + 5):
        assert history.verdict(verdict(n=n), ("audit", 0, n))
    assert [v["correlationId"] for v in shown(history)] == [f"c{n}" for n in range(5, 15)]


def test_a_verdict_read_again_is_not_taken_twice() -> None:
    history = History(10)
    assert history.verdict(verdict(n=1), ("audit", 0, 5))
    assert not history.verdict(verdict(n=1), ("audit", 0, 5))  # the reader started again
    assert not history.verdict(verdict(n=0), ("audit", 0, 4))
    assert history.verdict(verdict(n=2), ("audit", 0, 6))
    assert history.verdict(verdict(n=3), ("audit", 1, 0))  # another partition: its own
    assert [v["correlationId"] for v in shown(history)] == ["c1", "c2", "c3"]


def test_the_least_recently_active_thread_is_forgotten_past_max_threads() -> None:
    history = History(3)
    for thread in ("t1", "t2", "t3"):
        history.verdict(verdict(thread))
    history.opened("bot", "t1", "r1", "a", 5_000)  # t1 active again: t2 is now the oldest
    history.verdict(verdict("t4", n=9))
    assert history.get("bot", "t2") is None
    assert [e.key[1] for e in history.threads()] == ["t3", "t1", "t4"]
    assert history.evicted == 1 and history.forgot_at_ms == 5_000
    # the kept ones knew everything from the trail's start; one made after forgetting
    # knows its thread from its first record on (it may have been forgotten before)
    assert history.get("bot", "t4").since_ms is None  # type: ignore[union-attr]
    history.verdict(verdict("t2", n=11))
    t2 = history.get("bot", "t2")
    assert t2 is not None and t2.since_ms == 1_011


def test_bytes_are_counted_and_bound_the_threads_kept() -> None:
    one = History(100)
    one.verdict(verdict("t0"))
    per_thread = one.bytes
    assert per_thread > len(verdict("t0").value)
    history = History(100, max_bytes=per_thread * 3 + per_thread // 2)
    for n in range(5):
        history.verdict(verdict(f"t{n}"))
    assert [e.key[1] for e in history.threads()] == ["t2", "t3", "t4"]
    assert history.bytes == sum(e.measure() for e in history.threads()) == 3 * per_thread
    assert history.evicted == 2


def test_runs_from_forwards_and_interrupt_records_and_how_each_interrupt_closed() -> None:
    history = History(10)
    history.verdict(verdict(run="r2", n=0))  # a forward started r2
    history.opened("bot", "t1", "r1", "a", 900)
    history.opened("bot", "t1", "r2", "c", 2_000, 1)  # the other partition's came first
    history.opened("bot", "t1", "r2", "b", 2_000, 0)
    history.closed("bot", "t1", "a", "resolved", 1_000, 900)
    history.closed("bot", "t1", "b", "cancelled", 3_000, 2_000)
    history.closed("bot", "t1", "gone", "expired", 3_500, None)  # its opening never seen
    entry = history.get("bot", "t1")
    assert entry is not None
    r2 = entry.runs["r2"]
    assert (r2.started_at_ms, r2.finished_at_ms) == (1_000, 2_000)
    assert r2.interrupts == {"b": ("cancelled", 3_000, 0), "c": ("open", None, 1)}
    assert entry.runs["r1"].interrupts == {"a": ("resolved", 1_000, 0)}
    assert [(c.interrupt, c.status) for c in entry.loose] == [("gone", "expired")]
    # the same tombstones read again (the reader started over) change nothing
    bytes_before = history.bytes
    history.closed("bot", "t1", "b", "cancelled", 3_000, 2_000)
    history.closed("bot", "t1", "gone", "expired", 3_500, None)
    assert r2.interrupts["b"] == ("cancelled", 3_000, 0) and len(entry.loose) == 1
    assert history.bytes == bytes_before


def test_a_raised_again_id_closes_in_its_old_run_and_opens_in_the_new() -> None:
    history = History(10)
    history.opened("bot", "t1", "r1", "a", 1_000)
    history.closed("bot", "t1", "a", "superseded", 2_000, 1_000)
    history.opened("bot", "t1", "r2", "a", 2_000)
    entry = history.get("bot", "t1")
    assert entry is not None
    assert entry.runs["r1"].interrupts == {"a": ("superseded", 2_000, 0)}
    assert entry.runs["r2"].interrupts == {"a": ("open", None, 0)}


def test_per_thread_lists_are_bounded() -> None:
    history = History(10)
    for n in range(MAX_RUNS + 3):
        history.opened("bot", "t1", f"r{n}", "a", n)
    for n in range(MAX_RUN_INTERRUPTS + 4):
        history.opened("bot", "t1", "big", f"i{n}", 100)
    for n in range(MAX_LOOSE_CLOSES + 5):
        history.closed("bot", "t1", f"x{n}", "expired", n, None)
    entry = history.get("bot", "t1")
    assert entry is not None
    assert len(entry.runs) == MAX_RUNS and "r0" not in entry.runs and "big" in entry.runs
    big = entry.runs["big"]
    assert len(big.interrupts) == MAX_RUN_INTERRUPTS and big.omitted == 4
    assert len(entry.loose) == MAX_LOOSE_CLOSES and entry.loose[-1].interrupt == "x24"


def _fill(history: History, n: int, raws: list[bytes]) -> None:
    for i in range(n):
        history.opened("billing-agent", f"thread-{i:08d}", f"run-{i:08d}-1", "approve", 1_000)
        history.opened("billing-agent", f"thread-{i:08d}", f"run-{i:08d}-1", "limit", 1_000)
    for i, raw in enumerate(raws):
        found = verdicts.read(raw)
        assert found is not None
        history.verdict(found, ("audit", 0, i))
    for i in range(n):
        history.closed("billing-agent", f"thread-{i:08d}", "approve", "resolved", 2_000, 1_000)
        history.closed("billing-agent", f"thread-{i:08d}", "limit", "cancelled", 2_000, 1_000)


@pytest.mark.parametrize("n", [2_000])
def test_the_counted_bytes_hold_above_what_is_allocated(n: int) -> None:
    """A typical thread (a run with two interrupts, both closed, and a reject then a
    forward starting a second run): what tracemalloc sees allocated for the history is
    under what it is counted as, and not far under (the overheads stay honest)."""
    raws = [
        audit(
            "billing-agent",
            f"thread-{i:08d}",
            verdict,
            run=f"run-{i:08d}-2",
            codes=codes,
            entries=(("approve", "resolved"), ("limit", "cancelled")),
            subject="ada@example.com",
            correlation=f"corr-{i:08d}-0123456789abcdef",
            at_ms=1_500,
        )
        for verdict, codes in (("reject", ("uncovered_interrupt",)), ("forward", ()))
        for i in range(n)
    ]
    verdicts.read(raws[0])  # warm-up
    history = History(n * 2)
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        _fill(history, n, raws)
        gc.collect()
        allocated = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert len(history) == n
    assert allocated < history.bytes < allocated * 1.5, (allocated / n, history.bytes / n)


def test_a_verdict_keeps_twenty_codes_and_entries_and_counts_the_rest() -> None:
    entries = tuple((f"i{n}", "resolved") for n in range(30))
    body = orjson.loads(audit(verdict="reject", entries=entries))
    # more codes than today's 18 (a later version's, kept as they come), one twice
    codes = [f"code_{n}" for n in range(25)] + ["code_0"]
    body["reasons"] = [{"code": code, "detail": ""} for code in codes]
    found = verdicts.read(orjson.dumps(body))
    assert found is not None and found.forwarded_run is None
    shown = orjson.loads(found.value)
    assert shown["reasons"] == [f"code_{n}" for n in range(20)] and shown["reasonsOmitted"] == 5
    assert [e["interrupt"] for e in shown["interrupts"]] == [f"i{n}" for n in range(20)]
    assert shown["interruptsOmitted"] == 10
    # what the audit record itself left out is counted too
    body = orjson.loads(audit(verdict="reject", codes=("uncovered_interrupt",)))
    body |= {"reasonsOmitted": 3, "interruptsOmitted": 60}
    again = verdicts.read(orjson.dumps(body))
    assert again is not None
    assert orjson.loads(again.value)["reasonsOmitted"] == 3
    assert orjson.loads(again.value)["interruptsOmitted"] == 60
