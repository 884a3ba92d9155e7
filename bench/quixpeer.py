"""The gateway's event tracking written on Quix Streams: the peer of the ingest figure.

    python -m bench.quixpeer --bootstrap HOST:PORT --topic EVENTS --group GROUP
                             --state-dir DIR --total N --report FILE
                             [--commit-interval 1.0]

A Quix Streams application, exactly-once on, reads an agent's events topic
and keeps each thread's state in its own state store (RocksDB, one store per
partition, backed by its changelog topic), applying every event with the
project's pure core (`gateway.core.apply_event`) as the gateway does. Like
the gateway, a streaming delta of a run that is active changes nothing and
is only recognised (`classify`), without reading the thread's state: the
store keeps a one-byte "active" flag beside the encoded state (the gateway's
own changelog encoding, `gateway.codec.changelog`).

It runs until SIGTERM. To FILE it writes JSON lines: the wall time
(`time.time()`) of the first record it processed, and of the record that
made `N`. Whether and when those records were committed the bench reads from
the group's committed offsets, as for any consumer.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import orjson

from gateway.codec import changelog
from gateway.core import EventKind, RunStatus, apply_event, classify

ACTIVE, IDLE = b"\x01", b"\x00"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.quixpeer")
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--group", required=True)
    p.add_argument("--state-dir", required=True, type=Path)
    p.add_argument("--total", required=True, type=int)
    p.add_argument("--report", required=True, type=Path)
    p.add_argument("--commit-interval", type=float, default=1.0)
    args = p.parse_args(argv)

    from quixstreams import Application
    from quixstreams.state import State

    app = Application(
        broker_address=args.bootstrap,
        consumer_group=args.group,
        processing_guarantee="exactly-once",
        auto_offset_reset="earliest",
        state_dir=args.state_dir,
        commit_interval=args.commit_interval,
        loglevel="WARNING",
    )
    topic = app.topic(args.topic, key_deserializer="str", value_deserializer="json")
    report = args.report.open("ab", buffering=0)
    seen = 0

    def note(what: str) -> None:
        report.write(orjson.dumps({"what": what, "at": time.time(), "seen": seen}) + b"\n")

    def track(value: Any, key: str, timestamp: int, headers: Any, state: State) -> None:
        nonlocal seen
        seen += 1
        if seen == 1:
            note("first")
        if seen == args.total:
            note("total")
        kind = classify(value.get("type")) if isinstance(value, dict) else None
        if kind is EventKind.STREAM and state.get_bytes("active") == ACTIVE:
            return  # a delta inside an active run: nothing to change
        stored = state.get_bytes("thread")
        current = changelog.decode(stored) if stored is not None else None
        new = apply_event(current, key, value, timestamp).state
        if new is not None and new is not current:
            state.set_bytes("thread", changelog.encode(new))
            state.set_bytes("active", ACTIVE if new.status is RunStatus.ACTIVE else IDLE)

    sdf = app.dataframe(topic)
    sdf = sdf.update(track, stateful=True, metadata=True)
    app.run()  # the dataframe is tracked by the application
    return 0


if __name__ == "__main__":
    sys.exit(main())
