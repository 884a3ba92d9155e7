"""Holding back a backlog (`gateway.kafka.exactly_once.holdback`), on the runner's fake
clients: a pair whose commit is under way stops fetching once the rounds pending hold
pending_max_bytes, resumes when the commit ends, and nothing is lost or read twice."""

from __future__ import annotations

import asyncio
import dataclasses

import orjson
from aiokafka import TopicPartition

from gateway.codec import changelog
from gateway.codec.records import OutRecord
from gateway.core import RunStatus, ThreadState
from gateway.kafka.pairs.round import Round
from tests.kafka.test_runner import (
    assign,
    gw,
    producer,
    rec,
    rounds,
    settle,
    tps,
    transactions,
)

__all__ = ["gw"]  # the fixture, used by name

BOUND = 500  # bytes: about a dozen short thread states


def interrupted(tp: TopicPartition, first: int, threads: int) -> list:
    """RUN_STARTED and an interrupting RUN_FINISHED on each of `threads` threads, from
    offset `first` (two events a thread: thread ids from t<first / 2>)."""
    out = []
    for n in range(threads):
        thread, offset = f"t{first // 2 + n}", first + 2 * n
        started = {"type": "RUN_STARTED", "threadId": thread, "runId": f"r{n}"}
        finished = {
            "type": "RUN_FINISHED",
            "threadId": thread,
            "runId": f"r{n}",
            "outcome": {"type": "interrupt", "interrupts": [{"id": "a", "reason": "tool_call"}]},
        }
        for i, event in enumerate((started, finished)):
            value = orjson.dumps(event)
            record = rec(tp, offset + i, 1, value)
            out.append(dataclasses.replace(record, key=thread.encode()))
    return out


def held_back(g) -> float:
    return g.metrics.fetch_held_back._value.get()


def threads_written(sent: list[tuple[str, object]]) -> set[str]:
    return {
        changelog.decode(value).thread_id
        for topic, value in sent
        if topic == "agui.bot.gateway-changelog" and value is not None
    }


async def backlog_with_a_hanging_commit(g):
    """Pair bot/0 with a first round committing (its commit hangs) and a second round
    over the bound: (slot, producer, events partition, requests partition)."""
    ev, rq = tps()
    await assign(g, ev, rq)
    g.hold_back.max_bytes = BOUND
    made = producer(g)
    made.commit_gate = asyncio.Event()
    slot = g.assignment.slots[("bot", 0)]
    first = interrupted(ev, 0, 20)
    async with g.assignment.lock:
        await rounds(g, {ev: first})  # over the bound: due at once, and its commit hangs
    assert g.assignment.committer.in_flight(slot)
    assert ev not in g.consumer.paused  # its open round holds nothing yet
    second = interrupted(ev, len(first), 20)
    async with g.assignment.lock:
        await rounds(g, {ev: second})
    return slot, made, ev, rq


async def test_a_pair_whose_commit_is_under_way_stops_fetching_once_its_rounds_hold_the_bound(
    gw,
):
    slot, made, ev, rq = await backlog_with_a_hanging_commit(gw)
    assert slot.pair.round.held_bytes() >= BOUND
    assert {ev, rq} <= gw.consumer.paused  # held back: its open round grows no more
    assert held_back(gw) == 1
    assert gw.hold_back.held(slot)
    made.commit_gate.set()
    await gw.assignment.committer.drain()
    # the commit ended: the held round committed at once, and the pair fetches again
    assert not ({ev, rq} & gw.consumer.paused)
    assert not gw.hold_back.held(slot)
    assert slot.pair.round.empty() and slot.pair.sealed is None
    assert transactions(gw, "committed") == 2
    assert gw.consumer.committed_offsets[ev] == 80  # every event, each once
    assert threads_written(made.sent) == {f"t{n}" for n in range(40)}
    assert len(slot.pair.store) == 40


async def test_under_the_bound_nothing_is_held_back_and_events_wait_for_the_interval(gw):
    ev, rq = tps()
    await assign(gw, ev, rq)
    made = producer(gw)
    made.commit_gate = asyncio.Event()
    slot = gw.assignment.slots[("bot", 0)]
    async with gw.assignment.lock:
        await rounds(gw, {ev: interrupted(ev, 0, 2)})
    # events alone, under the bound: not due before commit_interval_ms
    assert not gw.assignment.committer.in_flight(slot) and not slot.pair.round.empty()
    assert not gw.consumer.paused and held_back(gw) == 0


async def test_a_held_pair_whose_commit_fails_is_resumed_by_its_prepare_only(gw):
    slot, made, ev, rq = await backlog_with_a_hanging_commit(gw)
    made.commit_error = RuntimeError("broker gone")
    assert gw.hold_back.held(slot)
    made.commit_gate.set()
    await gw.assignment.committer.drain()
    # the failed commit forgot both rounds and rewound the pair: not resumed, not launched
    assert not slot.ready and not slot.pair.has_pending()
    assert {ev, rq} <= gw.consumer.paused
    assert gw.consumer.positions[ev] == 0
    assert not gw.hold_back.held(slot)
    await settle(gw)  # prepared again with a fresh producer: it resumes the pair
    assert slot.ready and not ({ev, rq} & gw.consumer.paused)
    assert transactions(gw, "committed") == 0


# --- what a round holds -----------------------------------------------------------------------


def test_a_rounds_bytes_are_its_outputs_and_the_changelog_values_it_keeps():
    r = Round("bot", "agui.bot.gateway-changelog", 0)
    a, b = ThreadState("a", RunStatus.ACTIVE), ThreadState("b", RunStatus.SUCCEEDED)
    a_again = ThreadState("a", RunStatus.SUCCEEDED, run_id="r" * 300)
    r.put(None, a)
    r.put(None, b)
    assert r.held_bytes() == len(changelog.encode(a)) + len(changelog.encode(b))
    r.put(a, a_again)  # the thread's latest value only
    assert r.held_bytes() == len(changelog.encode(a_again)) + len(changelog.encode(b))
    r.delete(b)  # a tombstone holds nothing
    states = len(changelog.encode(a_again))
    assert r.held_bytes() == states
    r.out.append(OutRecord("agui.rejections", b"k1", b"x" * 100))
    assert r.held_bytes() == states + 102
    assert r.held_bytes() == states + 102  # each output counted once
    mark = r.mark()
    r.out.append(OutRecord("agui.warnings", b"k2", b"y" * 50))
    assert r.held_bytes() == states + 102 + 52
    r.undo(mark)  # a record that failed half way: its outputs are taken back
    assert r.held_bytes() == states + 102
    r.out.append(OutRecord("agui.warnings", None, b"z" * 10))
    assert r.held_bytes() == states + 112
