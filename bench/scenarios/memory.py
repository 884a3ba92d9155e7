"""3. Memory: resident bytes per tracked thread (see bench/memprobe.py).

Each figure comes from a fresh process building N states in a ThreadStore
through `apply_event` (RSS before and after, after a warm-up). tracemalloc,
which slows building down several times, runs on a quarter as many threads
(bytes per thread do not depend on N); "resumed" threads need the judge per
thread and also run on a fifth.

The soak (bench/soakprobe.py) then runs many events with fresh ids on a fixed set
of threads: resident memory after all of them divided by the memory after the
first tenth (flat: 1.0), and the bytes per thread after that traffic, not only
after building the states.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import orjson

from bench.broker import REPO_ROOT
from bench.config import Context
from bench.report import Figure, figure


async def _probe(kind: str, threads: int, seed: int, traced: bool) -> dict[str, Any]:
    args = [sys.executable, "-m", "bench.memprobe", "--kind", kind, "--threads", str(threads)]
    args += ["--seed", str(seed)] + (["--tracemalloc"] if traced else [])
    proc = await asyncio.create_subprocess_exec(
        *args,
        cwd=str(REPO_ROOT),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"memprobe {kind} failed ({proc.returncode}):\n{err.decode()}")
    result: dict[str, Any] = orjson.loads(out.splitlines()[-1])
    return result


async def _soak(ctx: Context) -> dict[str, Any]:
    size = ctx.size
    args = [sys.executable, "-m", "bench.soakprobe", "--threads", str(size.soak_threads)]
    args += ["--events", str(size.soak_events), "--seed", str(ctx.seed)]
    proc = await asyncio.create_subprocess_exec(
        *args, cwd=str(REPO_ROOT), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"soakprobe failed ({proc.returncode}):\n{err.decode()}")
    result: dict[str, Any] = orjson.loads(out.splitlines()[-1])
    return result


async def run(ctx: Context) -> tuple[list[Figure], dict[str, Any]]:
    n = ctx.size.memory_threads
    plan = [
        ("idle", n, False),
        ("interrupted", n, False),
        ("idle", max(1000, n // 4), True),
        ("interrupted", max(1000, n // 4), True),
        ("resumed", max(1000, n // 5), False),
        ("restored", n, False),
    ]
    results: list[dict[str, Any]] = []
    # Two probes at a time: memory figures do not depend on CPU contention.
    for start in range(0, len(plan), 2):
        batch = plan[start : start + 2]
        results += await asyncio.gather(
            *(_probe(kind, threads, ctx.seed, traced) for kind, threads, traced in batch)
        )
    soak = await _soak(ctx)
    ctx.log(
        f"memory soak ({soak['events']:,} events on {soak['threads']:,} threads, "
        f"{soak['events_per_second']:,} events/s): {soak['ratio']:.3f} of the memory after "
        f"{soak['checkpoint_events']:,}; {soak['bytes_per_thread_after_traffic']:,.0f} B/thread"
    )
    by = {(r["kind"], r["method"]): r for r in results}
    for r in results:
        ctx.log(
            f"memory {r['kind']} ({r['method']}, {r['threads']:,} threads): "
            f"{r['bytes_per_thread']:,.0f} B/thread"
        )
    figures = [
        figure(
            "memory.idle_bytes_per_thread",
            f"Memory per idle thread (closed success), RSS at {n:,} threads",
            by[("idle", "rss")]["bytes_per_thread"],
            "bytes",
            "RSS delta ÷ threads, fresh process",
            target="<= 256",
        ),
        figure(
            "memory.interrupted_bytes_per_thread",
            f"Memory per thread with open interrupts (1-3), RSS at {n:,} threads",
            by[("interrupted", "rss")]["bytes_per_thread"],
            "bytes",
            "RSS delta ÷ threads, fresh process",
            target="<= 1024",
        ),
        figure(
            "memory.idle_traced_bytes_per_thread",
            "Memory per idle thread, tracemalloc",
            by[("idle", "tracemalloc")]["bytes_per_thread"],
            "bytes",
            f"traced bytes ÷ threads at {by[('idle', 'tracemalloc')]['threads']:,} threads",
        ),
        figure(
            "memory.interrupted_traced_bytes_per_thread",
            "Memory per thread with open interrupts, tracemalloc",
            by[("interrupted", "tracemalloc")]["bytes_per_thread"],
            "bytes",
            f"traced bytes ÷ threads at {by[('interrupted', 'tracemalloc')]['threads']:,} threads",
        ),
        figure(
            "memory.resumed_bytes_per_thread",
            "Memory per idle thread that was resumed once (remembers 1 forward), RSS",
            by[("resumed", "rss")]["bytes_per_thread"],
            "bytes",
            f"RSS delta ÷ threads at {by[('resumed', 'rss')]['threads']:,} threads",
        ),
        figure(
            "memory.restored_bytes_per_thread",
            "Memory per idle thread restored and not yet read (changelog bytes), RSS",
            by[("restored", "rss")]["bytes_per_thread"],
            "bytes",
            f"RSS delta ÷ threads at {n:,} threads",
        ),
        figure(
            "memory.soak_ratio",
            f"Memory after {soak['events']:,} events on {soak['threads']:,} threads "
            f"÷ after the first {soak['checkpoint_events']:,}",
            soak["ratio"],
            "ratio",
            "RSS, fresh process, fresh ids every run",
            target="<= 1.05",
        ),
        figure(
            "memory.soak_bytes_per_thread",
            f"Memory per thread after {soak['events']:,} events (RSS)",
            soak["bytes_per_thread_after_traffic"],
            "bytes",
            "RSS delta ÷ threads after the soak, caches included",
        ),
    ]
    return figures, {"probes": results, "soak": soak}
