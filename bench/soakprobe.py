"""Memory under a long stretch of traffic on a fixed set of threads, in a process of its own.

    python -m bench.soakprobe --threads N --events E [--checkpoint C] [--seed S]

Runs E events through the core and a `ThreadStore` the way the gateway does
(events decoded from their JSON bytes through `apply_event`, resumes judged,
states put and committed in rounds) on N threads, every run with fresh ids:
70% of runs close with success, 30% with 1-3 interrupts (60% of those are then
resumed and judged before the next run, the rest superseded by it: enough forwards
that every thread holds as many as it remembers, FORWARDS_KEPT, within the first
tenth, so that what follows measures growth, not threads filling their bounded state).
Every id is fresh; the interrupts' `responseSchema`s come from a fixed set, as an
agent's tools have (a schema new on every interrupt would fill the byte-bounded
schema cache, 16 MiB, over the first million events: bounded, but not flat yet).
Prints one JSON object: resident set size before the threads exist, after the
first C events and after all E, their ratio (flat memory: 1.0), and the bytes
per thread after the traffic. A cache keyed by what records carry, or a state
that remembers every run, shows as a ratio above 1.
"""

from __future__ import annotations

import argparse
import gc
import random
import sys
import time
from datetime import UTC, datetime, timedelta

import orjson

from bench.memprobe import ROUND, rss_bytes
from bench.workload import (
    Ids,
    idle_thread_events,
    interrupted_thread_events,
    iso,
    payload_for,
    run_input,
)
from gateway.core import Policy, apply_event, judge
from gateway.state.store import ThreadStore


class Soak:
    def __init__(self, threads: int, seed: int, resume_share: float = 0.6) -> None:
        self.rng = random.Random(seed)
        self.resume_share = resume_share
        self.ids = Ids(self.rng)
        self.thread_ids = [self.ids.uuid() for _ in range(threads)]
        self.store = ThreadStore()
        self.policy = Policy()
        self.expires = iso(datetime.now(UTC) + timedelta(days=1))
        self.at = int(datetime.now(UTC).timestamp() * 1000)
        self.events = 0
        self.judged = 0
        self._puts = 0

    def run(self, until: int) -> None:
        """Runs on every thread in turn until `until` events have gone through."""
        while self.events < until:
            for thread_id in self.thread_ids:
                self._one_run(thread_id)
                if self.events >= until:
                    break
        self.store.commit()

    def _one_run(self, thread_id: str) -> None:
        rng, state = self.rng, self.store.get(thread_id)
        if rng.random() < 0.7:
            events = idle_thread_events(rng, self.ids, thread_id)
            interrupts: list = []
        else:
            events, interrupts = interrupted_thread_events(
                rng, self.ids, thread_id, self.expires, unique_schema_share=0.0
            )
        for value in events:
            state = apply_event(state, thread_id, orjson.loads(value), self.at).state
            self.events += 1
        if interrupts and rng.random() < self.resume_share and state is not None:
            entries = [
                {"interruptId": i["id"], "status": "resolved", "payload": payload_for(i, rng)}
                for i in interrupts
            ]
            raw = orjson.loads(
                orjson.dumps(run_input(rng, self.ids, thread_id, state.run_id or "", entries))
            )
            _, state = judge(state, raw, self.at, self.policy, thread_id)
            self.judged += 1
        if state is not None:
            self.store.put(state)
            self._puts += 1
            if self._puts % ROUND == 0:
                self.store.commit()
        self.at += 1


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.soakprobe")
    p.add_argument("--threads", type=int, required=True)
    p.add_argument("--events", type=int, required=True)
    p.add_argument("--checkpoint", type=int, default=0, help="default: a tenth of --events")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--resume-share", type=float, default=0.6, help="interrupted runs resumed")
    args = p.parse_args(argv)
    checkpoint = args.checkpoint or max(1, args.events // 10)

    warm = Soak(200, args.seed + 1)  # imports, model builds: not the soak's
    warm.run(20_000)
    del warm
    gc.collect()
    before = rss_bytes()
    soak = Soak(args.threads, args.seed, args.resume_share)
    started = time.perf_counter()
    soak.run(checkpoint)
    gc.collect()
    first = rss_bytes()
    soak.run(args.events)
    seconds = time.perf_counter() - started
    gc.collect()
    last = rss_bytes()
    assert len(soak.store) == args.threads
    out = {
        "threads": args.threads,
        "events": soak.events,
        "checkpoint_events": checkpoint,
        "judged": soak.judged,
        "before_bytes": before,
        "checkpoint_bytes": first,
        "after_bytes": last,
        "ratio": last / first,
        "bytes_per_thread_after_traffic": (last - before) / args.threads,
        "open_interrupts": soak.store.open_interrupts(),
        "seconds": round(seconds, 1),
        "events_per_second": round(soak.events / seconds),
    }
    sys.stdout.write(orjson.dumps(out).decode() + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
