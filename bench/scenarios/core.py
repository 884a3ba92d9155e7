"""5. The core alone, and one partition pair without Kafka (informative).

- `judge`: validations/s over the decision workload's requests (each judged
  against its thread's interrupted state, already decoded), overall and per
  kind.
- `apply_event`: events/s over the events workload (decoded dicts, state
  carried per thread), overall, for lifecycle events only and for deltas.
- `PartitionPair` without Kafka: records/s through `take` + `process` +
  the round's bookkeeping as a commit does it (`seal`, the round's `records()`
  with its changelog encoding, `committed_round`), in rounds of the gateway's
  `max_poll_records`: the processing ceiling before any client or broker cost.
"""

from __future__ import annotations

import dataclasses
import itertools
import time
from collections import Counter
from datetime import UTC, datetime
from typing import Any

import orjson
from prometheus_client import CollectorRegistry

from bench.config import Context
from bench.gatewayrun import AGENT, Names, make_settings
from bench.report import Figure, figure
from bench.workload import DELTA_TYPES, DecisionWorkload, EventShape, EventStream
from gateway.codec.records import TIMESTAMP_LOG_APPEND, InRecord
from gateway.core import Policy, ThreadState, apply_event, judge
from gateway.kafka.pairs.pair import PartitionPair
from gateway.kafka.runner import Gateway
from gateway.observe.metrics import Metrics


def _rate(work: Any, items: int, budget: float) -> float:
    """Items/s of `work()` (which processes `items`), best of repeats within `budget` s."""
    best = 0.0
    deadline = time.perf_counter() + budget
    runs = 0
    least = 1 if budget < 0.5 else 3  # tiny (the smoke test): one pass is enough
    while runs < least or time.perf_counter() < deadline:
        started = time.perf_counter()
        work()
        best = max(best, items / (time.perf_counter() - started))
        runs += 1
        if runs >= 50:
            break
    return best


def _judge_rates(ctx: Context) -> tuple[dict[str, float], int]:
    workload = DecisionWorkload(2000, 1, ctx.seed + 4)
    at = int(datetime.now(UTC).timestamp() * 1000)
    state: dict[str, ThreadState | None] = {}
    for _, key, value in workload.events():
        tid = key.decode()
        state[tid] = apply_event(state.get(tid), tid, orjson.loads(value), at).state
    cases: list[tuple[str, ThreadState | None, Any, str]] = []
    for request in workload.requests():
        if request.body is None:
            continue  # not JSON: never reaches the judge
        tid = request.key.decode()
        cases.append((request.kind, state.get(tid), orjson.loads(request.value()), tid))
    policy = Policy()

    def judge_all(subset: list[tuple[str, ThreadState | None, Any, str]]) -> None:
        for _, s, raw, tid in subset:
            judge(s, raw, at, policy, tid)

    rates = {"all": _rate(lambda: judge_all(cases), len(cases), ctx.size.core_seconds)}
    for kind in ("valid", "uncovered", "malformed", "unrecognised"):
        subset = [c for c in cases if c[0] == kind]
        if subset:
            rates[kind] = _rate(lambda s=subset: judge_all(s), len(subset), ctx.size.core_seconds)
    return rates, len(cases)


def _event_rates(ctx: Context, events: list[tuple[str, dict[str, Any]]]) -> dict[str, float]:
    at = int(datetime.now(UTC).timestamp() * 1000)

    def apply_all(subset: list[tuple[str, dict[str, Any]]]) -> None:
        states: dict[str, ThreadState | None] = {}
        for tid, event in subset:
            states[tid] = apply_event(states.get(tid), tid, event, at).state

    budget = ctx.size.core_seconds
    rates = {"all": _rate(lambda: apply_all(events), len(events), budget)}
    # deltas on active threads: the stream with its lifecycle events, timed on deltas alone
    lifecycle = [(t, e) for t, e in events if e["type"] not in DELTA_TYPES]
    rates["lifecycle"] = _rate(lambda: apply_all(lifecycle), len(lifecycle), budget)
    return rates


def _fresh_pair(gateway: Gateway) -> PartitionPair:
    """A new pair of the bench agent, partition 0, with every reply topic taken as existing."""
    context = dataclasses.replace(gateway.context, topic_exists=lambda topic: True)
    return PartitionPair(gateway.names.for_agent(AGENT), 0, context)


def _commit(pair: PartitionPair) -> None:
    """What a committed round costs the pair: seal it, build the records its transaction
    writes (outputs, changelog), fold it into the committed store."""
    done = pair.seal()
    done.records()
    pair.committed_round(done, time.monotonic())


def _pair_events_rate(ctx: Context, records: list[InRecord]) -> float:
    settings = make_settings(Names("x", "x", "x"), ctx.bootstrap)
    gateway = Gateway(settings, Metrics(CollectorRegistry()))
    per_round = settings.max_poll_records

    def work() -> None:
        pair = _fresh_pair(gateway)
        wall = int(time.time() * 1000)
        for start in range(0, len(records), per_round):
            pair.take("events", records[start : start + per_round])
            pair.process(None, time.monotonic(), wall)
            _commit(pair)

    return _rate(work, len(records), ctx.size.core_seconds)


def _pair_decisions_rate(ctx: Context) -> tuple[float, int]:
    settings = make_settings(Names("x", "x", "x"), ctx.bootstrap)
    gateway = Gateway(settings, Metrics(CollectorRegistry()))
    workload = DecisionWorkload(2000, 1, ctx.seed + 5)
    ts = int(time.time() * 1000)
    events = [
        InRecord("e", 0, n, ts, TIMESTAMP_LOG_APPEND, key, value)
        for n, (_, key, value) in enumerate(workload.events())
    ]
    requests = [
        InRecord(
            "r",
            0,
            n,
            ts + 1,
            TIMESTAMP_LOG_APPEND,
            r.key,
            r.value(),
            tuple((k, v) for k, v in r.headers("replies")),
        )
        for n, r in enumerate(workload.requests())
    ]
    per_round = settings.max_poll_records

    def work() -> None:
        pair = _fresh_pair(gateway)
        wall = int(time.time() * 1000)
        pair.take("events", events)
        pair.process(None, time.monotonic(), wall)
        _commit(pair)
        for start in range(0, len(requests), per_round):
            pair.take("requests", requests[start : start + per_round])
            pair.set_fence(len(events))
            pair.process(len(events), time.monotonic(), wall)
            _commit(pair)

    # the events part is a few thousand lifecycle events: small next to the requests
    return _rate(work, len(requests), ctx.size.core_seconds), len(requests)


async def run(ctx: Context) -> tuple[list[Figure], dict[str, Any]]:
    size = ctx.size
    judge_rates, judged = _judge_rates(ctx)
    stream = EventStream(EventShape(threads=400, partitions=1, concurrency=50), ctx.seed + 6)
    raw = list(itertools.islice(stream, size.pair_events))
    decoded = [(key.decode(), orjson.loads(value)) for _, key, value in raw]
    event_rates = _event_rates(ctx, decoded)
    ts = int(time.time() * 1000)
    records = [
        InRecord("e", 0, n, ts, TIMESTAMP_LOG_APPEND, key, value)
        for n, (_, key, value) in enumerate(raw)
    ]
    pair_events = _pair_events_rate(ctx, records)
    pair_decisions, pair_requests = _pair_decisions_rate(ctx)
    kinds = Counter(e["type"] for _, e in decoded)
    how = f"best of repeats within {size.core_seconds:g} s"
    figures = [
        figure(
            "core.judge_per_s",
            "Core: judge, typical request mix",
            judge_rates["all"],
            "validations/s",
            how,
        ),
        figure(
            "core.judge_valid_per_s",
            "Core: judge, valid resumes",
            judge_rates["valid"],
            "validations/s",
            how,
        ),
        figure(
            "core.apply_event_per_s",
            "Core: apply_event, realistic stream",
            event_rates["all"],
            "events/s",
            how,
        ),
        figure(
            "core.apply_event_lifecycle_per_s",
            "Core: apply_event, non-delta events only",
            event_rates["lifecycle"],
            "events/s",
            how,
        ),
        figure(
            "pair.events_per_s",
            "PartitionPair without Kafka: events (process + round bookkeeping)",
            pair_events,
            "events/s",
            how,
        ),
        figure(
            "pair.decisions_per_s",
            "PartitionPair without Kafka: requests judged with their effects",
            pair_decisions,
            "requests/s",
            how,
        ),
    ]
    detail = {
        "judge_rates": {k: round(v) for k, v in judge_rates.items()},
        "judged_requests": judged,
        "apply_event_rates": {k: round(v) for k, v in event_rates.items()},
        "events": len(decoded),
        "delta_share": round(
            sum(n for t, n in kinds.items() if t in DELTA_TYPES) / len(decoded), 3
        ),
        "pair_requests": pair_requests,
    }
    return figures, detail
