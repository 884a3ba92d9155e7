"""The inbox's view at size, measured in a process of its own.

    python -m bench.inboxprobe --interrupts N [--queries Q] [--seed S]

Feeds N open interrupts to an `InboxView` as the reader does (interrupts topic
records: key, JSON value), spread over 1,000 agents (a fifth of them in 20 groups),
each with a reason, a message of 20-200 characters, a small responseSchema, a third
with an expiresAt; then answers Q requests through the inbox's HTTP routes (the
Starlette app the gateway serves, over an in-process ASGI transport, with the bearer
token): a mix of the first page, an agent, a group, a reason, olderThan,
expiringBefore, a text search (and one right after an interrupt opened, which builds
the search's haystack again), a page deep in the list, the summary and a thread.
Prints one JSON object: resident bytes per open interrupt (RSS delta over the build,
after a warm-up), and each kind's and all requests' p50/p99 in milliseconds.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import random
import sys
import time
from typing import Any

import httpx
import orjson
from prometheus_client import CollectorRegistry
from pydantic import SecretStr

from gateway import http
from gateway.codec import interrupts as records
from gateway.inbox.api import bearer, routes
from gateway.inbox.view import InboxView
from gateway.settings import Settings

AGENTS = 1_000
GROUPS = 20
REASONS = ("tool_approval", "question", "confirm_payment", "review", "escalation")
TOKEN = "bench-token"


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def record(rng: random.Random, n: int, now_ms: int) -> tuple[bytes, bytes]:
    agent = f"agent-{rng.randrange(AGENTS):04d}"
    number = int(agent[-4:])
    group = f"group-{number % GROUPS:02d}" if number % 5 == 0 else None
    opened = records.Opened(
        agent=agent,
        thread=f"thread-{n:08d}",
        run=f"run-{n:08d}",
        interrupt=f"int-{rng.randrange(10**6):06d}",
        reason=rng.choice(REASONS),
        message="Please approve " + "x" * rng.randrange(5, 185),
        tool_call_id=f"call-{n}" if n % 2 else None,
        response_schema={"type": "object", "properties": {"approve": {"type": "boolean"}}},
        subagent_run_id=None,
        opened_at_ms=now_ms - rng.randrange(7 * 24 * 3_600_000),
        expires_at_ms=now_ms + rng.randrange(3_600_000) if n % 3 == 0 else None,
        group=group,
    )
    # copied as a consumer's record holds it (orjson's own result keeps a larger buffer)
    value = bytes(memoryview(opened.to_json()))
    return records.key(opened.agent, opened.thread, opened.interrupt), value


def build(view: InboxView, count: int, seed: int, now_ms: int) -> None:
    rng = random.Random(seed)
    for n in range(count):
        key, value = record(rng, n, now_ms)
        view.apply(key, value, {})


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * fraction))]


async def measure(view: InboxView, queries: int, seed: int, now_ms: int) -> dict[str, Any]:
    authorize = bearer(Settings(inbox_token=SecretStr(TOKEN)))
    app = http.app(CollectorRegistry(), lambda: (True, {}), routes(view, authorize))
    rng = random.Random(seed + 1)
    deep = view.interrupts({"limit": ["500"]})
    for _ in range(20):  # a cursor about 10,000 items in (or as far as there are)
        if deep["next"] is None:
            break
        deep = view.interrupts({"limit": ["500"], "cursor": [deep["next"]]})
    cursor = deep["next"] or ""
    some = view.interrupts({"limit": ["1"]})["items"]
    thread = f"/threads/{some[0]['agent']}/{some[0]['thread']}" if some else "/threads/a/b"
    opened = iter(range(10**9, 2 * 10**9))

    def text_after_change() -> tuple[str, dict[str, str]]:
        """An interrupt opens (as under traffic), so the search joins the texts again."""
        view.apply(*record(rng, next(opened), now_ms), {})
        return "/interrupts", {"q": f"thread-{rng.randrange(10**4):04d}"}

    kinds: dict[str, Any] = {
        "first_page": lambda: ("/interrupts", {}),
        "agent": lambda: ("/interrupts", {"agent": f"agent-{rng.randrange(AGENTS):04d}"}),
        "group": lambda: ("/interrupts", {"group": f"group-{rng.randrange(GROUPS):02d}"}),
        "reason": lambda: ("/interrupts", {"reason": rng.choice(REASONS)}),
        "older_than": lambda: ("/interrupts", {"olderThan": str(rng.randrange(86_400 * 6))}),
        "expiring_before": lambda: (
            "/interrupts",
            {"expiringBefore": str(now_ms + rng.randrange(3_600_000))},
        ),
        "text": lambda: ("/interrupts", {"q": f"thread-{rng.randrange(10**4):04d}"}),
        "text_after_change": text_after_change,
        "deep_page": lambda: ("/interrupts", {"cursor": cursor} if cursor else {}),
        "summary": lambda: ("/interrupts/summary", {}),
        "thread": lambda: (thread, {}),
    }
    times: dict[str, list[float]] = {k: [] for k in kinds}
    headers = {"Authorization": f"Bearer {TOKEN}"}
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://inbox") as client:
        for n in range(queries + len(kinds) * 2):
            kind = list(kinds)[n % len(kinds)]
            path, params = kinds[kind]()
            started = time.perf_counter()
            answer = await client.get(path, params=params, headers=headers)
            elapsed = (time.perf_counter() - started) * 1000
            if answer.status_code != 200:
                raise RuntimeError(f"{kind}: {answer.status_code} {answer.text[:300]}")
            if n >= len(kinds) * 2:  # the first two of each kind warm up
                times[kind].append(elapsed)
    every = [t for ts in times.values() for t in ts]
    return {
        "p50_ms": round(percentile(every, 0.50), 2),
        "p99_ms": round(percentile(every, 0.99), 2),
        "by_kind_p99_ms": {k: round(percentile(v, 0.99), 2) for k, v in times.items() if v},
        "requests": len(every),
    }


def main() -> int:
    p = argparse.ArgumentParser(prog="python -m bench.inboxprobe")
    p.add_argument("--interrupts", type=int, required=True)
    p.add_argument("--queries", type=int, default=1_000)
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args()
    now_ms = int(time.time() * 1000)
    view = InboxView(max(args.interrupts, 1), lambda: now_ms / 1000)
    build(view, min(1_000, args.interrupts), args.seed + 7, now_ms)  # warm-up: caches, arenas
    view = InboxView(max(args.interrupts, 1), lambda: now_ms / 1000)
    gc.collect()
    before = rss_bytes()
    build(view, args.interrupts, args.seed, now_ms)
    gc.collect()
    after = rss_bytes()
    held = len(view.index)
    result = {
        "interrupts": held,
        "bytes_per_interrupt": round((after - before) / max(held, 1)),
        "rss_after_bytes": after,
        **asyncio.run(measure(view, args.queries, args.seed, now_ms)),
    }
    sys.stdout.write(orjson.dumps(result).decode() + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
