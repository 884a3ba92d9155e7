"""2d. Latency with one core taken by a CPU hog.

The latency run (an `agui-gateway run` process, its threads' events consumed,
requests offered at a fixed rate) with a busy-loop process started just
before the first request and stopped after the last forward was seen. On 2
cores that leaves one for the gateway, the broker and the load generator.
"""

from __future__ import annotations

from typing import Any

from bench.config import Context
from bench.report import Figure, figure
from bench.scenarios.latency import one_run, rounded, workload_for, worst_of


async def run(ctx: Context) -> tuple[list[Figure], dict[str, Any]]:
    size = ctx.size
    rate, seconds = size.hog_rate, size.hog_seconds
    workload = workload_for(ctx, rate, seconds, 6)
    runs: list[dict[str, Any]] = []
    for rep in range(size.disturb_repeat):
        result = await one_run(ctx, f"h{rep}", workload, rate, hog=True)
        result.pop("latencies")
        runs.append(rounded(result))
        ctx.log(
            f"hog rep {rep + 1}/{size.disturb_repeat} at {result['offered_rate']:.0f} req/s with "
            f"a CPU hog ({result['hog_cpu_percent']}% of a core): p50 {result['p50_ms']:.1f} ms, "
            f"p99 {result['p99_ms']:.1f} ms; gateway CPU {result['gateway_cpu_percent']}%"
        )
    how = (
        worst_of(runs)
        + f" at {rate:,.0f} requests/s for {seconds:g} s, first {size.latency_warmup_seconds:g} s excluded"
    )
    figures = [
        figure(
            "hog.p99_ms",
            f"Request → visible forward p99 with one core taken by a CPU hog (at {rate:,.0f} req/s)",
            max(r["p99_ms"] for r in runs),
            "ms",
            how,
            target="<= 1000",
        ),
        figure(
            "hog.p50_ms",
            "Request → visible forward p50 with a CPU hog",
            max(r["p50_ms"] for r in runs),
            "ms",
            how,
        ),
    ]
    detail = {
        "threads": len(workload.threads),
        "offered_rate": rate,
        "offered_seconds": seconds,
        "runs": runs,
    }
    return figures, detail
