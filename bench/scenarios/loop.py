"""The whole loop as a person feels it (issue 25, section 3): approve, and wait.

`agui-gateway edge`, `agui-gateway run` and `agui-gateway bridge` run as the
service runs them (processes of their own, one agent on topics of its own),
and the bridge calls an agent stub served here (uvicorn, in this process) that
answers at once: a run with no resume streams RUN_STARTED, a tool call and
RUN_FINISHED with an interrupt; the resumed run RUN_STARTED, a text message and
RUN_FINISHED (success). A driver runs `loop_concurrency` conversations at a time
over HTTP as a person's client does: POST the first input to the edge, read its
SSE stream to the interrupt, POST the approving resume, read to RUN_FINISHED.

Every time is this process's wall clock (`time.time()`), noted by the driver and
the stub. For each approving resume:

- verdict: resume POST sent -> the edge's response headers (the edge answers
  once the gateway's verdict reached it);
- to_agent: those headers -> the stub receiving the bridge's POST;
- agent: the stub's own time, its request's arrival -> its RUN_FINISHED written;
- to_client: the stub's RUN_FINISHED written -> the driver reading it from the edge;
- resume: resume POST sent -> RUN_FINISHED read (what the person waits);
- own: resume minus agent, the loop's own share.

The first `loop_warmup` conversations (connections being opened, the first
transactions) are left out of the percentiles.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import orjson
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from bench.config import Context
from bench.cpu import broker_pid, cpu_seconds
from bench.gatewayrun import AGENT, GatewayProcess, Names, create_topics, make_settings
from bench.report import Figure, figure, percentile
from gateway.demo import events as ev

PARTITIONS = 2  # the agent's topics; 8 conversations at a time need no more
OWN_P50_TARGET = "<= 60"
OWN_P95_TARGET = "<= 250"
HOPS = ("verdict", "to_agent", "agent", "to_client", "resume", "own")
LABELS = {
    "verdict": "Resume POST → verdict (edge's response headers)",
    "to_agent": "Verdict → the agent receiving the resumed run",
    "to_client": "Agent's RUN_FINISHED → client's RUN_FINISHED",
    "resume": "Resume POST → RUN_FINISHED (what the person waits)",
    "own": "The loop's own share (resume minus the agent's time)",
}


def _sse(event: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(event) + b"\n\n"


@dataclass
class StubTimes:
    arrived: dict[str, float] = field(default_factory=dict)  # runId -> request received
    finished: dict[str, float] = field(default_factory=dict)  # runId -> RUN_FINISHED written
    requests: int = 0


def stub_agent() -> tuple[Starlette, StubTimes]:
    """An HTTP AG-UI agent that answers at once, noting when each run arrived and ended."""
    times = StubTimes()

    async def run(request: Request) -> Response:
        arrived = time.time()
        body = orjson.loads(await request.body())
        thread, run_id = body["threadId"], body["runId"]
        times.requests += 1
        times.arrived[run_id] = arrived
        if body.get("resume"):
            middle = ev.text_message(f"m-{run_id}", ["Done"])
            outcome = ev.success()
        else:
            middle = ev.tool_call(f"tc-{run_id}", "transfer_funds", '{"amount": 100}')
            outcome = ev.interrupted(
                [
                    {
                        "id": f"approve-{run_id}",
                        "reason": "tool_call",
                        "message": "Send 100?",
                        "toolCallId": f"tc-{run_id}",
                        "responseSchema": ev.APPROVAL_SCHEMA,
                    }
                ]
            )

        async def stream() -> AsyncIterator[bytes]:
            yield _sse(ev.run_started(thread, run_id))
            for event in middle:
                yield _sse(event)
            times.finished[run_id] = time.time()
            yield _sse(ev.run_finished(thread, run_id, outcome))

        return StreamingResponse(stream(), media_type="text/event-stream")

    return Starlette(routes=[Route("/", run, methods=["POST"])]), times


class _Server(uvicorn.Server):
    """uvicorn without its signal handlers (the bench owns the process)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


@contextlib.asynccontextmanager
async def served(app: Any) -> AsyncIterator[str]:
    server = _Server(
        uvicorn.Config(
            app, host="127.0.0.1", port=0, log_level="warning", lifespan="off", access_log=False
        )
    )
    task = asyncio.create_task(server.serve())
    try:
        while not server.started:
            if task.done():
                task.result()
                raise OSError("the agent stub stopped while starting")
            await asyncio.sleep(0.02)
        port = server.servers[0].sockets[0].getsockname()[1]
        yield f"http://127.0.0.1:{port}/"
    finally:
        server.should_exit = True
        server.force_exit = True
        with contextlib.suppress(Exception):
            await asyncio.wait_for(task, timeout=10)


async def _stream(
    http: httpx.AsyncClient, url: str, body: dict[str, Any]
) -> tuple[float, float, float, list[dict[str, Any]]]:
    """POST a run input; (sent, headers received, RUN_FINISHED read, events)."""
    events: list[dict[str, Any]] = []
    sent = time.time()
    async with http.stream(
        "POST",
        url,
        content=orjson.dumps(body),
        headers={"Content-Type": "application/json", "Accept": "text/event-stream"},
    ) as response:
        headers_at = time.time()
        if response.status_code != 200:
            raw = await response.aread()
            raise RuntimeError(f"the edge answered {response.status_code}: {raw[:500]!r}")
        data: list[str] = []
        async for line in response.aiter_lines():
            if line.startswith("data:"):
                data.append(line[5:].lstrip(" "))
            elif not line and data:
                event = orjson.loads("\n".join(data))
                data = []
                events.append(event)
                if event["type"] in ("RUN_FINISHED", "RUN_ERROR"):
                    return sent, headers_at, time.time(), events
    raise RuntimeError(f"the stream ended before the run did: {events[-3:]}")


async def conversation(http: httpx.AsyncClient, url: str, n: int) -> dict[str, Any]:
    """One person's conversation: ask, read to the interrupt, approve, read to the end."""
    thread = f"loop-{n}-{uuid.uuid4().hex[:8]}"
    message = {"id": f"u-{thread}", "role": "user", "content": "Send 100 to alice"}
    first = {"threadId": thread, "runId": f"{thread}-1", "messages": [message]}
    sent1, _, done1, events1 = await _stream(http, url, first)
    last = events1[-1]
    if last["type"] != "RUN_FINISHED" or last.get("outcome", {}).get("type") != "interrupt":
        raise RuntimeError(f"the first run did not end in an interrupt: {last}")
    interrupt = last["outcome"]["interrupts"][0]
    resume = {
        "threadId": thread,
        "runId": f"{thread}-2",
        "messages": [message],
        "resume": [
            {
                "interruptId": interrupt["id"],
                "status": "resolved",
                "payload": {"approved": True},
            }
        ],
    }
    sent, headers_at, done, events2 = await _stream(http, url, resume)
    end = events2[-1]
    if end["type"] != "RUN_FINISHED" or end.get("outcome", {"type": "success"})["type"] != (
        "success"
    ):
        raise RuntimeError(f"the resumed run did not succeed: {end}")
    return {
        "run": resume["runId"],
        "first_s": done1 - sent1,
        "sent": sent,
        "headers": headers_at,
        "done": done,
    }


def hops(convo: dict[str, Any], times: StubTimes) -> dict[str, float]:
    """One approving resume's hops, in seconds."""
    arrived, finished = times.arrived[convo["run"]], times.finished[convo["run"]]
    agent = finished - arrived
    resume = convo["done"] - convo["sent"]
    return {
        "verdict": convo["headers"] - convo["sent"],
        "to_agent": arrived - convo["headers"],
        "agent": agent,
        "to_client": convo["done"] - finished,
        "resume": resume,
        "own": resume - agent,
    }


async def _drive(
    ctx: Context, url: str, times: StubTimes
) -> tuple[list[dict[str, float]], list[float], float]:
    size = ctx.size
    gate = asyncio.Semaphore(size.loop_concurrency)
    limits = httpx.Limits(max_connections=2 * size.loop_concurrency)
    timeout = httpx.Timeout(60.0)

    async with httpx.AsyncClient(limits=limits, timeout=timeout) as http:

        async def one(n: int) -> dict[str, Any]:
            async with gate:
                return await conversation(http, url, n)

        started = time.perf_counter()
        done = await asyncio.gather(*(one(n) for n in range(size.loop_conversations)))
        seconds = time.perf_counter() - started
    measured = done[size.loop_warmup :]
    return [hops(c, times) for c in measured], [c["first_s"] for c in measured], seconds


def _process(
    settings: dict[str, Any], ctx: Context, name: str, command: str, port_setting: str
) -> GatewayProcess:
    process = GatewayProcess(
        settings, ctx.work / f"loop-{name}.log", [sys.executable, "-m", "gateway", command]
    )
    if port_setting != "http_port":
        process.env[f"AGUI_GATEWAY_{port_setting.upper()}"] = str(process.port)
    return process


async def run(ctx: Context) -> tuple[list[Figure], dict[str, Any]]:
    from bench.broker import Admin

    size = ctx.size
    prefix = f"{ctx.namespace}-loop"
    names = Names(prefix, prefix, f"{prefix}-gw")
    base = names.settings(ctx.bootstrap)
    edge_replies = f"{prefix}.edge-replies"
    async with Admin(ctx.bootstrap) as admin:
        await create_topics(
            admin, names, make_settings(names, ctx.bootstrap), PARTITIONS, inputs=True
        )
        await admin.create({edge_replies: (1, {})})
    app, times = stub_agent()
    async with served(app) as agent_url:
        gateway = _process(base, ctx, "gateway", "run", "http_port")
        bridge = _process(
            {
                **base,
                "client_id": f"{prefix}-bridge",
                "bridge_agents": {AGENT: {"url": agent_url}},
                "bridge_group_id": f"{prefix}-bridge",
                "bridge_runs_topic": f"{prefix}.{{agent}}.bridge-runs",
            },
            ctx,
            "bridge",
            "bridge",
            "bridge_http_port",
        )
        edge = _process(
            {
                **base,
                "client_id": f"{prefix}-edge",
                "edge_reply_topic": edge_replies,
                "edge_reply_partitions": 1,
            },
            ctx,
            "edge",
            "edge",
            "edge_port",
        )
        processes = (gateway, bridge, edge)
        try:
            for process in processes:
                process.start()
            for process in processes:
                await process.wait_ready(120)
            url = f"http://127.0.0.1:{edge.port}/agents/{AGENT}"
            cpu = _LoopCpu(ctx.bootstrap, {"gateway": gateway, "bridge": bridge, "edge": edge})
            measured, firsts, seconds = await _drive(ctx, url, times)
            cpu_ms = cpu.ms_per_run(2 * size.loop_conversations)
        finally:
            for process in processes:
                await process.stop()
    by_hop = {hop: [m[hop] for m in measured] for hop in HOPS}
    result: dict[str, Any] = {
        "conversations": size.loop_conversations,
        "concurrency": size.loop_concurrency,
        "warmup": size.loop_warmup,
        "measured": len(measured),
        "agent_requests": times.requests,
        "seconds": round(seconds, 1),
        "first_run_p50_ms": round(1000 * percentile(firsts, 50), 1),
        "first_run_p95_ms": round(1000 * percentile(firsts, 95), 1),
        # CPU per run (two runs a conversation: to the interrupt, then the resumed one)
        # over the whole drive, warm-up included: the broker's, each process's, and
        # this one's (the driver and the agent stub)
        "cpu_ms_per_run": cpu_ms,
        "hops_ms": {
            hop: {
                "p50": round(1000 * percentile(values, 50), 2),
                "p95": round(1000 * percentile(values, 95), 2),
                "max": round(1000 * max(values), 2),
            }
            for hop, values in by_hop.items()
        },
    }
    ctx.log(
        f"loop: {len(measured)} approving resumes measured, {size.loop_concurrency} at a time: "
        + ", ".join(
            f"{hop} p50 {v['p50']:.1f} / p95 {v['p95']:.1f} ms"
            for hop, v in result["hops_ms"].items()
        )
        + "; CPU ms per run: "
        + ", ".join(f"{name} {ms}" for name, ms in cpu_ms.items())
    )
    how = (
        f"{len(measured)} approving resumes ({size.loop_conversations} conversations, "
        f"{size.loop_concurrency} at a time, the first {size.loop_warmup} left out)"
    )
    figures = []
    for hop in ("own", "resume", "verdict", "to_agent", "to_client"):
        for q in (50, 95):
            target = None
            if hop == "own":
                target = OWN_P50_TARGET if q == 50 else OWN_P95_TARGET
            figures.append(
                figure(
                    f"loop.{hop}_p{q}_ms",
                    f"{LABELS[hop]}, p{q}",
                    result["hops_ms"][hop][f"p{q}"],
                    "ms",
                    how,
                    target,
                )
            )
    figures.append(
        figure(
            "loop.broker_cpu_ms_per_run",
            "Broker CPU per agent run in the loop",
            cpu_ms["broker"],
            "ms",
            f"{2 * size.loop_conversations} runs ({size.loop_conversations} conversations), "
            "the whole drive",
        )
    )
    return figures, result


class _LoopCpu:
    """CPU seconds of the broker, the loop's processes and this one from now on."""

    def __init__(self, bootstrap: str, processes: dict[str, GatewayProcess]) -> None:
        broker = broker_pid(bootstrap)
        self.pids: dict[str, int | None] = {
            "broker": broker,
            **{name: p.proc.pid if p.proc else None for name, p in processes.items()},
            "driver_and_stub": os.getpid(),
        }
        self.start = self._now()

    def _now(self) -> dict[str, float]:
        return {name: cpu_seconds(pid) if pid else math.nan for name, pid in self.pids.items()}

    def ms_per_run(self, runs: int) -> dict[str, float]:
        end = self._now()
        return {name: round(1000 * (end[name] - self.start[name]) / runs, 2) for name in self.pids}
