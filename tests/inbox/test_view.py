"""The inbox's view: records in, the contract's answers and live changes out."""

from __future__ import annotations

import asyncio

import orjson
import pytest

from gateway.codec import interrupts as records
from gateway.inbox.view import MAX_PENDING_CHANGES, InboxView
from tests.inbox.support import audit, check, closed, opened


class Clock:
    def __init__(self, now_s: float = 100.0) -> None:
        self.now_s = now_s

    def __call__(self) -> float:
        return self.now_s


def view_with(*records, now_s: float = 100.0, max_open: int = 100) -> InboxView:
    view = InboxView(max_open, Clock(now_s))
    for key, value in records:
        view.apply(key, value, {})
    return view


def test_an_opened_interrupt_is_listed_as_the_contract_says() -> None:
    view = view_with(opened("bot", "t1", "a", 40_000, message="Approve?", expires_at_ms=200_000))
    answer = view.interrupts({})
    check("interrupts", answer)
    [item] = answer["items"]
    assert (item["agent"], item["thread"], item["run"], item["interrupt"]) == (
        "bot",
        "t1",
        "r1",
        "a",
    )
    assert item["message"] == "Approve?" and item["responseSchema"] == {"type": "boolean"}
    assert item["openedAt"] == "1970-01-01T00:00:40.000Z" and item["ageSeconds"] == 60.0
    assert item["expiresAtMs"] == 200_000 and item["expiresAt"] == "1970-01-01T00:03:20.000Z"
    assert answer["total"] == 1 and answer["next"] is None and answer["asOfMs"] == 100_000
    assert answer["lagSeconds"] is None  # no reader has said yet


def test_a_tombstone_closes_it_and_its_latency_counts_in_the_summary() -> None:
    view = view_with(opened("bot", "t1", "a", 40_000), opened("bot", "t2", "b", 50_000))
    key, headers = closed("bot", "t1", "a", "resolved", at_ms=70_000, opened_at_ms=40_000)
    view.apply(key, None, headers)
    assert [i["thread"] for i in view.interrupts({})["items"]] == ["t2"]
    summary = view.summary()
    check("summary", summary)
    [bot] = summary["agents"]
    assert bot["open"] == 1 and bot["byReason"] == {"tool_call": 1}
    assert bot["latency"] == {"p50Seconds": 30.0, "p95Seconds": 30.0}


def test_only_answers_count_towards_latency_and_only_the_last_hour() -> None:
    view = view_with(now_s=10_000)
    for status, at in [("superseded", 9_000_000), ("expired", 9_500_000), ("cancelled", 9_900_000)]:
        key, headers = closed("bot", "t1", status, status, at_ms=at, opened_at_ms=at - 5_000)
        view.apply(key, None, headers)
    key, headers = closed("bot", "t1", "old", at_ms=1_000_000, opened_at_ms=0)  # > 1 h ago
    view.apply(key, None, headers)
    [bot] = view.summary()["agents"]
    assert bot["latency"] == {"p50Seconds": 5.0, "p95Seconds": 5.0} and bot["open"] == 0


def test_counted_warnings_show_per_agent_in_the_summary() -> None:
    view = view_with(now_s=10_000)
    view.warning("bot", "uncovered_interrupt", 9_999_000)
    view.warning("bot", "unrecognised_entry", 9_999_000)
    view.warning("bot", "unrecognised_entry", 9_999_500)
    view.warning("bot", "thread_unknown", 9_999_000)  # not one the summary counts
    view.warning("bot", "uncovered_interrupt", 1_000)  # over an hour ago
    [bot] = view.summary()["agents"]
    assert (bot["unrecognisedEntries"], bot["uncoveredInterrupts"]) == (2, 1)


def test_a_thread_shows_its_open_interrupts_and_their_runs() -> None:
    view = view_with(opened("bot", "t/1", "a", 1_000), opened("bot", "t/1", "b", 1_000))
    answer = view.thread("bot", "t/1")
    assert answer is not None
    check("thread", answer)
    assert [i["interrupt"] for i in answer["open"]] == ["a", "b"]
    assert answer["runs"] == [
        {"run": "r1", "status": "interrupted", "startedAtMs": None, "closedAtMs": 1_000,
         "interrupts": [{"interrupt": "a", "status": "open", "closedAtMs": None},
                        {"interrupt": "b", "status": "open", "closedAtMs": None}],
         "interruptsOmitted": 0}
    ]  # fmt: skip
    assert view.thread("bot", "t2") is None


@pytest.mark.parametrize(
    ("key", "value"),
    [(b"no length prefix", b"{}"), (opened()[0], b"not json"), (opened()[0], b'{"v": 99}')],
)
def test_an_unreadable_record_is_counted_and_skipped(key: bytes, value: bytes) -> None:
    view = view_with()
    view.apply(key, value, {})
    assert view.unreadable == 1 and view.interrupts({})["total"] == 0
    view.apply(*opened(), {})
    assert view.interrupts({})["total"] == 1


async def test_changes_stream_opens_and_closes_from_now_on() -> None:
    view = view_with(opened("bot", "t0", "old", 1_000))
    got: list[dict] = []

    async def listen() -> None:
        async for change in view.changes():
            got.append(change)

    task = asyncio.create_task(listen())
    await asyncio.sleep(0)
    view.apply(*opened("bot", "t1", "a", 2_000), {})
    key, headers = closed("bot", "t1", "a", "cancelled")
    view.apply(key, None, headers)
    view.stop()
    await asyncio.wait_for(task, 1)
    assert [c["op"] for c in got] == ["open", "close"]
    for change in got:
        check("change", change)
    assert got[1]["status"] == "cancelled" and got[1]["key"] == got[0]["item"]["key"]


async def test_a_listener_too_far_behind_is_ended_not_buffered_without_bound() -> None:
    view = view_with(max_open=MAX_PENDING_CHANGES * 2)
    stream = view.changes()
    first = asyncio.ensure_future(stream.__anext__())
    await asyncio.sleep(0)
    for n in range(MAX_PENDING_CHANGES + 10):
        view.apply(*opened("bot", f"t{n}", "a", n), {})
    assert (await first)["op"] == "open"
    rest = [change async for change in stream]
    assert len(rest) < MAX_PENDING_CHANGES  # ended, not every change kept
    assert not view._listeners


def test_a_query_it_cannot_read_is_an_error_answer_naming_the_parameter() -> None:
    view = view_with(opened())
    answer = view.interrupts({"olderThan": ["soon"]})
    assert answer["error"] == "bad_query" and "olderThan" in answer["detail"]
    assert answer["items"] == [] and answer["total"] == 0


def test_a_threads_interrupts_of_one_run_keep_the_runs_order() -> None:
    from gateway.codec import interrupts as records

    view = view_with()
    # their records are on different partitions: they may arrive in any order
    for position, interrupt in [(2, "m"), (0, "z"), (1, "a")]:
        record = records.Opened(
            "bot", "t1", "r1", interrupt, None, None, None, None, None, 1_000, None,
            position=position,
        )  # fmt: skip
        view.apply(records.key("bot", "t1", interrupt), record.to_json(), {})
    key, headers = closed("bot", "t1", "z", "resolved", at_ms=2_000)
    view.apply(key, None, headers)
    answer = view.thread("bot", "t1")
    assert answer is not None and [i["interrupt"] for i in answer["open"]] == ["a", "m"]
    [run] = answer["runs"]
    assert [(i["interrupt"], i["status"]) for i in run["interrupts"]] == [
        ("z", "resolved"), ("a", "open"), ("m", "open"),
    ]  # fmt: skip


def reading(view: InboxView, since_ms: int | None = 50, topic: str = "agui.audit") -> None:
    """As the audit trail's reader says once it found the topic."""
    view.trail.reading(frozenset({topic}), lambda agent: topic, since_ms)


def test_a_thread_shows_its_runs_how_their_interrupts_closed_and_its_verdicts() -> None:
    view = view_with(
        opened("bot", "t1", "a", 1_000, run="r1"), opened("bot", "t1", "b", 1_000, run="r1")
    )
    reading(view)
    # a resume leaving b uncovered is rejected; the next answers both and starts r2
    view.verdict(audit(verdict="reject", run="n1", codes=("uncovered_interrupt",)), ("au", 0, 1))
    view.verdict(
        audit(run="n2", at_ms=4_000, entries=(("a", "resolved"), ("b", "cancelled")),
              subject="ada@example.com", correlation="c-2"),
        ("au", 0, 2),
    )  # fmt: skip
    for interrupt, status in (("a", "resolved"), ("b", "cancelled")):
        key, headers = closed("bot", "t1", interrupt, status, at_ms=4_000, opened_at_ms=1_000)
        view.apply(key, None, headers)
    view.apply(*opened("bot", "t1", "c", 6_000, run="n2"), {})
    answer = view.thread("bot", "t1")
    assert answer is not None
    check("thread", answer)
    assert [i["interrupt"] for i in answer["open"]] == ["c"]
    assert answer["runs"] == [
        {"run": "r1", "status": "interrupted", "startedAtMs": None, "closedAtMs": 1_000,
         "interrupts": [{"interrupt": "a", "status": "resolved", "closedAtMs": 4_000},
                        {"interrupt": "b", "status": "cancelled", "closedAtMs": 4_000}],
         "interruptsOmitted": 0},
        {"run": "n2", "status": "interrupted", "startedAtMs": 4_000, "closedAtMs": 6_000,
         "interrupts": [{"interrupt": "c", "status": "open", "closedAtMs": None}],
         "interruptsOmitted": 0},
    ]  # fmt: skip
    forward, reject = answer["verdicts"]  # newest first
    assert (forward["verdict"], forward["forwardedRun"], forward["reasons"]) == (
        "forward",
        "n2",
        [],
    )
    assert (forward["attestation"], forward["subject"], forward["correlationId"]) == (
        "verified", "ada@example.com", "c-2",
    )  # fmt: skip
    assert forward["interrupts"] == [
        {"interrupt": "a", "status": "resolved", "forwarded": True},
        {"interrupt": "b", "status": "cancelled", "forwarded": True},
    ]
    assert (reject["verdict"], reject["reasons"], reject["forwardedRun"]) == (
        "reject", ["uncovered_interrupt"], None,
    )  # fmt: skip
    assert (reject["attestation"], reject["subject"], reject["atMs"]) == ("unattested", None, 3_000)
    assert answer["verdictsKnown"] and answer["verdictsUnknownReason"] is None
    assert answer["verdictsSinceMs"] == 50 and answer["closesWithoutRun"] == []


def test_a_thread_shows_how_each_run_closed_from_its_run_records() -> None:
    """A run that succeeded, failed or was cancelled is in the answer, as the thread's
    run records say; a forwarded run shows as forwarded until its close is read."""
    view = view_with(opened("bot", "t1", "a", 1_000, run="r1"))
    reading(view)

    def ran(run: str, status: str, at_ms: int) -> None:
        value = records.RunClosed("bot", "t1", run, status, at_ms).to_json()
        view.apply(records.run_key("bot", "t1"), value, {})

    ran("r1", "interrupted", 1_000)
    view.verdict(audit(run="n2", at_ms=2_000, entries=(("a", "resolved"),)), ("au", 0, 1))
    key, headers = closed("bot", "t1", "a", "resolved", at_ms=2_000, opened_at_ms=1_000)
    view.apply(key, None, headers)
    answer = view.thread("bot", "t1")
    assert answer is not None
    assert [(r["run"], r["status"]) for r in answer["runs"]] == [
        ("r1", "interrupted"),
        ("n2", "forwarded"),
    ]
    ran("n2", "succeeded", 2_500)
    ran("r3", "failed", 3_000)
    ran("r4", "cancelled", 4_000)
    view.apply(records.run_key("bot", "t1"), None, {})  # the thread forgotten: its past stays
    answer = view.thread("bot", "t1")
    assert answer is not None
    check("thread", answer)
    assert [(r["run"], r["status"], r["closedAtMs"]) for r in answer["runs"]] == [
        ("r1", "interrupted", 1_000),
        ("n2", "succeeded", 2_500),
        ("r3", "failed", 3_000),
        ("r4", "cancelled", 4_000),
    ]
    assert view.unreadable == 0
    view.apply(records.run_key("bot", "t1"), b'{"v":1,"kind":"run","status":"later"}', {})
    assert view.unreadable == 1


def test_a_thread_with_nothing_open_is_still_answered_from_its_history() -> None:
    view = view_with()
    reading(view)
    assert view.thread("bot", "t1") is None
    view.verdict(audit(run="n1"), ("au", 0, 1))  # a forward: it started n1
    key, headers = closed("bot", "t1", "old", "expired", at_ms=5_000, opened_at_ms=None)
    view.apply(key, None, headers)  # its opening was compacted away before the view read it
    answer = view.thread("bot", "t1")
    assert answer is not None
    check("thread", answer)
    assert answer["open"] == []
    assert answer["runs"] == [
        {"run": "n1", "status": "forwarded", "startedAtMs": 3_000, "closedAtMs": None,
         "interrupts": [], "interruptsOmitted": 0}
    ]  # fmt: skip
    assert answer["closesWithoutRun"] == [
        {"interrupt": "old", "status": "expired", "openedAtMs": None, "closedAtMs": 5_000}
    ]
    assert [v["verdict"] for v in answer["verdicts"]] == ["forward"]


def test_verdicts_not_read_are_null_with_why_not_an_empty_list() -> None:
    view = view_with(opened("bot", "t1", "a", 1_000), opened("cat", "t2", "b", 1_000))
    starting = view.thread("bot", "t1")
    assert starting is not None
    check("thread", starting)
    assert (starting["verdicts"], starting["verdictsKnown"]) == (None, False)
    assert starting["verdictsUnknownReason"] == "starting"
    view.trail.off()
    off = view.thread("bot", "t1")
    assert off is not None and off["verdicts"] is None
    assert off["verdictsUnknownReason"] == "audit_disabled"
    # a topic per agent: bot's is read, cat's does not exist
    view.trail.reading(frozenset({"agui.bot.audit"}), lambda a: f"agui.{a}.audit", None)
    bot, cat = view.thread("bot", "t1"), view.thread("cat", "t2")
    assert bot is not None and cat is not None
    check("thread", cat)
    assert (bot["verdicts"], bot["verdictsKnown"], bot["verdictsSinceMs"]) == ([], True, None)
    assert (cat["verdicts"], cat["verdictsUnknownReason"]) == (None, "topic_missing")
    view.trail.reading(frozenset(), lambda a: "agui.audit", 50)  # one for all, missing
    gone = view.thread("bot", "t1")
    assert gone is not None and gone["verdictsUnknownReason"] == "topic_missing"


def test_an_unreadable_audit_record_is_counted_and_skipped() -> None:
    view = view_with()
    reading(view)
    for value in (b"not json", b'{"auditVersion": 2}', b'{"auditVersion": 1, "verdict": "x"}'):
        view.verdict(value, None)
    assert view.unreadable_audit == 3
    # a record naming no usable agent or thread is about no thread: skipped, not unreadable
    no_thread = orjson.loads(audit())
    no_thread["threadId"] = None
    view.verdict(orjson.dumps(no_thread), None)
    assert view.unreadable_audit == 3 and len(view.history) == 0


def test_a_forgotten_threads_verdicts_are_known_only_from_when_it_came_back() -> None:
    view = InboxView(10, Clock(), max_threads=2)
    reading(view)
    for n, thread in enumerate(("t1", "t2", "t3"), 1):
        view.verdict(audit("bot", thread, at_ms=n * 1_000), None)  # t1 forgotten at t3
    assert view.thread("bot", "t1") is None
    view.apply(*opened("bot", "t1", "a", 3_500), {})  # back (t2 forgotten in its turn)
    t1, t3 = view.thread("bot", "t1"), view.thread("bot", "t3")
    assert t1 is not None and t3 is not None
    check("thread", t1)
    assert (t1["verdicts"], t1["verdictsSinceMs"]) == ([], 3_500)
    assert ([v["atMs"] for v in t3["verdicts"]], t3["verdictsSinceMs"]) == ([3_000], 50)
    assert view.history.evicted == 2


def test_verdicts_are_never_said_known_from_before_the_trails_start() -> None:
    """A thread met again after the history forgot threads, by an interrupt opened before
    the trail's window: its verdicts are known from the window's start, not before."""
    view = InboxView(10, Clock(), max_threads=1)
    reading(view, since_ms=5_000)
    view.verdict(audit("bot", "t1", at_ms=6_000), None)
    view.verdict(audit("bot", "t2", at_ms=7_000), None)  # t1 forgotten
    view.apply(*opened("bot", "t3", "a", 1_000), {})  # opened long ago
    t3 = view.thread("bot", "t3")
    assert t3 is not None and t3["verdictsSinceMs"] == 5_000
    from_the_beginning = InboxView(10, Clock(), max_threads=1)
    reading(from_the_beginning, since_ms=None)
    from_the_beginning.verdict(audit("bot", "t1", at_ms=6_000), None)
    from_the_beginning.verdict(audit("bot", "t2", at_ms=7_000), None)  # t1 forgotten
    from_the_beginning.apply(*opened("bot", "t3", "a", 1_000), {})
    t3 = from_the_beginning.thread("bot", "t3")
    assert t3 is not None and t3["verdictsSinceMs"] == 1_000
