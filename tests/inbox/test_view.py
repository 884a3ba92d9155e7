"""The inbox's view: records in, the contract's answers and live changes out."""

from __future__ import annotations

import asyncio

import pytest

from gateway.inbox.view import MAX_PENDING_CHANGES, InboxView
from tests.inbox.support import check, closed, opened


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
    assert answer["runs"] == [{"run": "r1", "status": "interrupted", "closedAtMs": 1_000}]
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
    for position, interrupt in enumerate(["z", "a", "m"]):
        record = records.Opened(
            "bot", "t1", "r1", interrupt, None, None, None, None, None, 1_000, None,
            position=position,
        )  # fmt: skip
        view.apply(records.key("bot", "t1", interrupt), record.to_json(), {})
    answer = view.thread("bot", "t1")
    assert answer is not None and [i["interrupt"] for i in answer["open"]] == ["z", "a", "m"]
