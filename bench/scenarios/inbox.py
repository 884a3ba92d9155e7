"""The inbox's view at size (issue 28): bytes per open interrupt, the API's p99.

A fresh process (bench/inboxprobe.py) feeds `inbox_interrupts` open interrupts to an
`InboxView` as its reader does, then answers a mix of requests through the inbox's
HTTP routes in process (first page, agent, group, reason, olderThan, expiringBefore,
text, a deep page, summary, thread). No broker: what is measured is the view and the
API, not Kafka. Targets (the issue's): p99 <= 50 ms at 100,000 open interrupts.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import orjson

from bench.broker import REPO_ROOT
from bench.config import Context
from bench.report import Figure, figure


async def _probe(interrupts: int, queries: int, seed: int) -> dict[str, Any]:
    args = [sys.executable, "-m", "bench.inboxprobe", "--interrupts", str(interrupts)]
    args += ["--queries", str(queries), "--seed", str(seed)]
    proc = await asyncio.create_subprocess_exec(
        *args, cwd=str(REPO_ROOT), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"inboxprobe failed ({proc.returncode}):\n{err.decode()}")
    result: dict[str, Any] = orjson.loads(out.splitlines()[-1])
    return result


async def run(ctx: Context) -> tuple[list[Figure], dict[str, Any]]:
    n = ctx.size.inbox_interrupts
    result = await _probe(n, ctx.size.inbox_queries, ctx.seed)
    ctx.log(
        f"inbox ({result['interrupts']:,} open interrupts): {result['bytes_per_interrupt']:,} "
        f"B each, API p50 {result['p50_ms']} ms, p99 {result['p99_ms']} ms"
    )
    figures = [
        figure(
            "inbox.bytes_per_interrupt",
            f"Inbox view: memory per open interrupt, RSS at {n:,}",
            result["bytes_per_interrupt"],
            "bytes",
            "RSS delta ÷ interrupts, fresh process",
        ),
        figure(
            "inbox.api_p99_ms",
            f"Inbox API p99 at {n:,} open interrupts (mixed requests, in process)",
            result["p99_ms"],
            "ms",
            f"p99 of {result['requests']:,} requests",
            target="<= 50",
        ),
        figure(
            "inbox.api_p50_ms",
            f"Inbox API p50 at {n:,} open interrupts",
            result["p50_ms"],
            "ms",
            f"p50 of {result['requests']:,} requests",
        ),
    ]
    return figures, result
