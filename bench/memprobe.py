"""Memory per tracked thread, measured in a process of its own.

    python -m bench.memprobe --kind idle|interrupted|resumed|restored --threads N
                             [--tracemalloc]

Builds N thread states in a `ThreadStore` the way the gateway does (events
decoded from their JSON bytes and fed through `gateway.core.apply_event`,
states put and committed in rounds) and prints one JSON object: resident
set size before and after (from /proc/self/statm), or with --tracemalloc the
bytes Python allocated and still holds.

- idle: the latest run closed with success (RUN_STARTED, RUN_FINISHED).
- interrupted: the latest run closed with 1-3 open interrupts (tool approvals,
  questions with a responseSchema, some raised by a subagent, some expiring).
- resumed: an interrupted thread whose resume was forwarded (judged) and whose
  next run then succeeded: idle again, remembering the forward.
- restored: an idle thread as a restore leaves it when the store keeps
  changelog values undecoded until first read (`ThreadStore.load(bytes)`).
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import sys
import time
from datetime import UTC, datetime, timedelta

import orjson

from bench.workload import (
    Ids,
    idle_thread_events,
    interrupted_thread_events,
    iso,
    payload_for,
    run_input,
)
from gateway.codec import changelog
from gateway.core import Policy, apply_event, judge
from gateway.state.store import ThreadStore

ROUND = 2000  # states committed per round, like a busy round of the gateway


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def build(kind: str, threads: int, seed: int, store: ThreadStore) -> None:
    rng = random.Random(seed)
    ids = Ids(rng)
    now = datetime.now(UTC)
    expires = iso(now + timedelta(days=1))
    at = int(now.timestamp() * 1000)
    policy = Policy()
    for n in range(threads):
        thread_id = ids.uuid()
        state = None
        if kind in ("idle", "restored"):
            events = idle_thread_events(rng, ids, thread_id)
        else:
            events, interrupts = interrupted_thread_events(rng, ids, thread_id, expires)
        for value in events:
            state = apply_event(state, thread_id, orjson.loads(value), at).state
        if kind == "resumed":
            assert state is not None
            entries = [
                {"interruptId": i["id"], "status": "resolved", "payload": payload_for(i, rng)}
                for i in interrupts
            ]
            raw = orjson.loads(
                orjson.dumps(run_input(rng, ids, thread_id, state.run_id or "", entries))
            )
            decision, state = judge(state, raw, at, policy, thread_id)
            assert str(decision.verdict) == "forward", decision
            for value in idle_thread_events(rng, ids, thread_id):
                state = apply_event(state, thread_id, orjson.loads(value), at).state
        assert state is not None
        if kind == "restored":
            store.load(changelog.encode(state), thread_id)
            continue
        store.put(state)
        if n % ROUND == ROUND - 1:
            store.commit()
    store.commit()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.memprobe")
    p.add_argument("--kind", choices=("idle", "interrupted", "resumed", "restored"), required=True)
    p.add_argument("--threads", type=int, required=True)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--tracemalloc", action="store_true")
    args = p.parse_args(argv)

    warm = ThreadStore()
    build(args.kind, 200, args.seed + 1, warm)  # imports, model builds, caches: not per thread
    del warm
    gc.collect()
    if args.tracemalloc:
        import tracemalloc

        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
    else:
        before = rss_bytes()
    store = ThreadStore()
    started = time.perf_counter()
    build(args.kind, args.threads, args.seed, store)
    seconds = time.perf_counter() - started
    gc.collect()
    after = tracemalloc.get_traced_memory()[0] if args.tracemalloc else rss_bytes()
    assert len(store) == args.threads
    out = {
        "kind": args.kind,
        "threads": args.threads,
        "method": "tracemalloc" if args.tracemalloc else "rss",
        "before_bytes": before,
        "after_bytes": after,
        "bytes_per_thread": (after - before) / args.threads,
        "open_interrupts": store.open_interrupts() if args.kind != "restored" else 0,
        "build_seconds": round(seconds, 2),
    }
    sys.stdout.write(orjson.dumps(out).decode() + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
