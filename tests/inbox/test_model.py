"""The read model against the gateway's own state: after a random run of events and
requests, with rounds that commit, rounds that abort (read again) and restarts (a new
pair on the committed store, as a rebalance or a restart leaves it), the view built
from the committed interrupts topic records lists exactly the open interrupts the
committed thread states hold, for every thread. No Kafka: the pair and its rounds."""

from __future__ import annotations

import random

import pytest

from gateway.codec import interrupts as records
from gateway.codec.records import InRecord
from gateway.core import RunStatus
from gateway.inbox.view import InboxView
from gateway.kafka.pairs.pair import PartitionPair
from gateway.state.retention import Retention
from tests.inbox.test_records import TOPIC, make_pair
from tests.kafka.test_pair import Feed

THREADS = [f"t{n}" for n in range(6)]


def event(rng: random.Random, thread: str, run: int) -> dict:
    kind = rng.choices(["start", "interrupt", "success", "error"], [3, 3, 1, 1])[0]
    if kind == "start":
        return {"type": "RUN_STARTED", "threadId": thread, "runId": f"r{run}"}
    if kind == "error":
        return {"type": "RUN_ERROR", "message": "boom"}
    if kind == "success":
        return {"type": "RUN_FINISHED", "threadId": thread, "runId": f"r{run}"}
    ids = rng.sample(["a", "b", "c", "d"], rng.randint(1, 3))
    return {
        "type": "RUN_FINISHED",
        "threadId": thread,
        "runId": f"r{run}",
        "outcome": {"type": "interrupt", "interrupts": [{"id": i, "reason": "r"} for i in ids]},
    }


def request(rng: random.Random, thread: str, run: int) -> dict:
    ids = rng.sample(["a", "b", "c", "d", "zz"], rng.randint(1, 4))
    return {
        "threadId": thread,
        "runId": f"q{run}",
        "messages": [],
        "resume": [
            {"interruptId": i, "status": rng.choice(["resolved", "cancelled"])} for i in ids
        ],
    }


def held_open(pair: PartitionPair) -> set[tuple[str, str, str | None, str]]:
    """(thread, interrupt id, run, reason): an id raised again by a later run is another."""
    return {
        (state.thread_id, interrupt_id, state.interrupts_run_id, interrupt.reason)
        for state in pair.store.committed()
        for interrupt_id, interrupt in records.open_interrupts(state).items()
    }


def listed(view: InboxView) -> set[tuple[str, str, str | None, str]]:
    items = view.interrupts({"limit": ["500"]})["items"]
    return {(i["thread"], i["interrupt"], i["run"], i["reason"]) for i in items}


def restarted(old: PartitionPair, retention: Retention) -> PartitionPair:
    """A new owner of the pair: the committed store, nothing pending."""
    pair = make_pair(retention=retention)
    active = {s.thread_id for s in old.store.committed() if s.status is RunStatus.ACTIVE}
    pair.load_store(old.store, active, old.store.open_interrupts())
    return pair


@pytest.mark.parametrize("seed", range(12))
def test_the_view_lists_exactly_what_the_committed_states_hold(seed: int) -> None:
    rng = random.Random(seed)
    retention = Retention(10**9, 10**9, 10**9) if seed % 3 else Retention(400, 400, 400)
    pair = make_pair(retention=retention)
    view = InboxView(10_000, lambda: 10.0)
    feed = Feed()
    pending: list[tuple[str, InRecord]] = []  # read since the last commit
    ts = 0
    for step in range(400):
        ts += rng.randint(1, 20)
        thread = rng.choice(THREADS)
        side = "events" if rng.random() < 0.65 else "requests"
        value = event(rng, thread, step) if side == "events" else request(rng, thread, step)
        record = feed.rec(side, value, ts, key=thread)
        pending.append((side, record))
        pair.take(side, [record])
        pair.set_fence(events_end=feed.offsets["events"])
        pair.process(events_position=feed.offsets["events"], mono_now=0.0, wall_ms=ts)
        if rng.random() < 0.1:
            pair.sweep(now_ms=ts)
        fate = rng.random()
        if fate < 0.5:
            continue  # the round goes on
        if fate < 0.85:  # commit: its interrupts topic records become visible
            done = pair.seal()
            for out in done.records():
                if out.topic == TOPIC:
                    view.apply(out.key, out.value, dict(out.headers))
            pair.committed_round(done, 0.0)
            pending = []
        elif fate < 0.95:  # abort: the same records are read again from the last commit
            pair.aborted()
            for again_side, again in pending:
                pair.take(again_side, [again])
        else:  # a restart or rebalance: a new owner reads again from the last commit
            pair = restarted(pair, retention)
            for again_side, again in pending:
                pair.take(again_side, [again])
        assert listed(view) == held_open(pair)
    assert held_open(pair), "the random run should leave something open"
