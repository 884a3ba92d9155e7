"""2c. Pause recovery: the gateway process stopped for 2 s in the middle of the latency run.

The same run as the latency scenario (a `agui-gateway run` process, its
threads' events consumed, requests offered at the latency rate), except that
the gateway is sent SIGSTOP some seconds into the load and SIGCONT
`pause_seconds` later. Requests keep arriving at the same rate meanwhile.

Reported: p99 of the requests sent after SIGCONT, and the recovery time: the
time from SIGCONT to the start of the first 0.5 s window (by send time) from
which every window's p99 is at or under 250 ms until the end of the load.
When the last window is still over, the gateway has not recovered within the
run; the figure is then the time from SIGCONT to the end of the load, and
marked as such.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from typing import Any

from bench.config import Context
from bench.gatewayrun import GatewayProcess
from bench.report import Figure, figure, percentile
from bench.scenarios.latency import one_run, rounded, workload_for, worst_of

WINDOW_S = 0.5
BACK_MS = 250.0


def recovery(
    latencies: list[tuple[float, float]],
    resumed_at: float,
    sent_until: float,
    window: float = WINDOW_S,
    limit_ms: float = BACK_MS,
) -> dict[str, Any]:
    """How long after `resumed_at` the p99 stayed at or under `limit_ms` per window.

    `latencies` are (seconds after the load started, latency s) by send time;
    only whole windows before `sent_until` count.
    """
    windows: list[tuple[float, int, float]] = []  # (start after resume, requests, p99 ms)
    start = resumed_at
    while start + window <= sent_until + 1e-9:
        inside = [lat for sent, lat in latencies if start <= sent < start + window]
        if inside:
            windows.append((start - resumed_at, len(inside), 1000 * percentile(inside, 99)))
        start += window
    recovered_from: float | None = None
    for offset, _, p99 in windows:
        if p99 <= limit_ms:
            if recovered_from is None:
                recovered_from = offset
        else:
            recovered_from = None
    return {
        "windows": [[round(o, 2), n, round(p, 1)] for o, n, p in windows],
        "recovered": recovered_from is not None,
        "recovery_seconds": recovered_from
        if recovered_from is not None
        else max(0.0, sent_until - resumed_at),
    }


def _pauser(at: float, seconds: float) -> Any:
    async def pause(gateway: GatewayProcess, started_wall: float) -> dict[str, Any]:
        assert gateway.proc is not None
        pid = gateway.proc.pid
        await asyncio.sleep(max(0.0, started_wall + at - time.time()))
        stopped = time.time()
        os.kill(pid, signal.SIGSTOP)
        try:
            await asyncio.sleep(seconds)
        finally:
            os.kill(pid, signal.SIGCONT)
        resumed = time.time()
        return {"stopped_at_s": stopped - started_wall, "resumed_at_s": resumed - started_wall}

    return pause


async def run(ctx: Context) -> tuple[list[Figure], dict[str, Any]]:
    size = ctx.size
    rate, seconds = size.latency_rate, size.pause_run_seconds
    workload = workload_for(ctx, rate, seconds, 5)
    runs: list[dict[str, Any]] = []
    for rep in range(size.disturb_repeat):
        result = await one_run(
            ctx, f"p{rep}", workload, rate, _pauser(size.pause_at_seconds, size.pause_seconds)
        )
        latencies: list[tuple[float, float]] = result.pop("latencies")
        paused = result["disturbance"]
        sent_until = max(sent for sent, _ in latencies)
        before = [
            lat
            for sent, lat in latencies
            if size.latency_warmup_seconds <= sent < paused["stopped_at_s"]
        ]
        during = [
            lat
            for sent, lat in latencies
            if paused["stopped_at_s"] <= sent < paused["resumed_at_s"]
        ]
        after = [lat for sent, lat in latencies if sent >= paused["resumed_at_s"]]
        if not after:
            raise RuntimeError("no forward of a request sent after the pause was seen")
        found = recovery(latencies, paused["resumed_at_s"], sent_until)
        result.update(
            {
                "p99_before_pause_ms": 1000 * percentile(before, 99) if before else None,
                "p99_during_pause_ms": 1000 * percentile(during, 99) if during else None,
                "p99_after_pause_ms": 1000 * percentile(after, 99),
                "max_after_pause_ms": 1000 * max(after),
                **found,
            }
        )
        runs.append(rounded(result))
        ctx.log(
            f"pause rep {rep + 1}/{size.disturb_repeat}: {size.pause_seconds:g} s SIGSTOP at "
            f"{paused['stopped_at_s']:.1f} s; p99 after it {result['p99_after_pause_ms']:.0f} ms; "
            + (
                f"p99 back <= {BACK_MS:.0f} ms {found['recovery_seconds']:.1f} s after SIGCONT"
                if found["recovered"]
                else "p99 NOT back by the end of the load"
            )
        )
    how = (
        worst_of(runs)
        + f" at {rate:,.0f} requests/s for {seconds:g} s, SIGSTOP {size.pause_seconds:g} s"
    )
    worst = max(runs, key=lambda r: (not r["recovered"], r["recovery_seconds"]))
    figures = [
        figure(
            "pause.recovery_seconds",
            f"Pause recovery: seconds after a {size.pause_seconds:g} s SIGSTOP until p99 is back "
            f"≤ {BACK_MS:.0f} ms ({WINDOW_S:g} s windows)"
            + ("" if worst["recovered"] else "; NOT back by the end of the load"),
            worst["recovery_seconds"],
            "s",
            how,
            target="<= 3",
        ),
        figure(
            "pause.p99_after_ms",
            "Pause recovery: p99 of requests sent after SIGCONT",
            max(r["p99_after_pause_ms"] for r in runs),
            "ms",
            how,
        ),
    ]
    detail = {
        "threads": len(workload.threads),
        "offered_rate": rate,
        "offered_seconds": seconds,
        "pause_at_seconds": size.pause_at_seconds,
        "pause_seconds": size.pause_seconds,
        "window_seconds": WINDOW_S,
        "runs": runs,
    }
    if not worst["recovered"]:
        figures[0].met = False
    return figures, detail
