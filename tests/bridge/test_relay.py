"""Each way an agent cuts a run short ends in its own RUN_ERROR (real broker, real HTTP)."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

from tests.bridge.agents import Served, scripted_agent
from tests.bridge.support import BridgeProcess, TopicReader, bridge_settings, closed_runs
from tests.integration.support import Namespace, free_port, header, produce

pytestmark = pytest.mark.integration

AGENT = "faulty"
DOWN = "down"


def request(thread: str, mode: str) -> dict[str, Any]:
    return {
        "threadId": thread,
        "runId": f"run-{uuid.uuid4().hex[:8]}",
        "messages": [],
        "forwardedProps": {"mode": mode},
    }


async def test_agent_faults_end_in_their_run_error(ns: Namespace, tmp_path) -> None:
    await asyncio.gather(ns.create_agent(AGENT, partitions=2), ns.create_agent(DOWN, partitions=1))
    app, counters = scripted_agent()
    async with Served(app) as agent:
        endpoints = {
            AGENT: {"url": agent.url, "read_timeout_s": 1.0, "concurrent_runs": 8},
            DOWN: {"url": f"http://127.0.0.1:{free_port()}/", "connect_timeout_s": 1.0},
        }
        bridge = await BridgeProcess(
            ns,
            tmp_path,
            "bridge",
            # tiny buffers: every event waits for room, a partition pauses at each request
            **bridge_settings(
                ns,
                endpoints,
                bridge_max_event_bytes=1024,
                bridge_buffer_bytes=1,
                bridge_pending_requests=1,
            ),
        ).start()
        try:
            modes = ["ok", "503", "hang", "early_close", "oversize", "invalid"]
            await produce(
                ns.bootstrap,
                ns.run_requests(AGENT),
                [(f"t-{mode}", request(f"t-{mode}", mode)) for mode in modes]
                # one thread, two runs: the second waits for the first to end
                + [("t-seq", request("t-seq", "hang")), ("t-seq", request("t-seq", "ok"))]
                # a stream left open after its run closed does not hold up the next run
                + [
                    ("t-linger", request("t-linger", "linger")),
                    ("t-linger", request("t-linger", "ok")),
                ],
                headers=[("agui-correlation-id", b"corr-1")],
            )
            await produce(
                ns.bootstrap, ns.run_requests(DOWN), [("t-down", request("t-down", "ok"))]
            )
            async with TopicReader(ns.bootstrap, ns.events(AGENT)) as events:
                expected = {f"t-{m}": 1 for m in modes} | {"t-seq": 2, "t-linger": 2}
                await events.wait(
                    lambda _: all(closed_runs(events.thread(t)) >= n for t, n in expected.items()),
                    timeout=60,
                )
                await events.poll(2.0)  # anything duplicated would show up now
                by_thread = events.events_by_thread()
                assert all(header(r, "agui-correlation-id") == "corr-1" for r in events.records)
            async with TopicReader(ns.bootstrap, ns.events(DOWN)) as down:
                await down.wait(lambda _: closed_runs(down.thread("t-down")) >= 1)
                await down.poll(1.0)
                down_events = down.thread("t-down")
        finally:
            await bridge.stop()

    def types(thread: str) -> list[str]:
        return [e["type"] for e in by_thread[thread]]

    def code(thread: str) -> str:
        return by_thread[thread][-1]["code"]

    assert types("t-ok") == [
        "RUN_STARTED",
        "TEXT_MESSAGE_START",
        "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_END",
        "RUN_FINISHED",
    ]
    # passed through as the agent sent them: no member added or changed
    assert by_thread["t-ok"][0] == {
        "type": "RUN_STARTED",
        "threadId": "t-ok",
        "runId": by_thread["t-ok"][0]["runId"],
    }
    assert types("t-503") == ["RUN_ERROR"] and code("t-503") == "agent_http_503"
    assert "overloaded" in by_thread["t-503"][0]["message"]
    assert types("t-hang") == ["RUN_STARTED", "RUN_ERROR"] and code("t-hang") == "agent_timeout"
    assert types("t-early_close") == ["RUN_STARTED", "RUN_ERROR"]
    assert code("t-early_close") == "agent_stream_ended"
    assert types("t-oversize") == ["RUN_STARTED", "RUN_ERROR"]
    assert code("t-oversize") == "agent_event_too_large"
    assert types("t-invalid") == ["RUN_STARTED", "RUN_ERROR"]
    assert code("t-invalid") == "agent_stream_invalid"
    assert types("t-seq") == [
        "RUN_STARTED",
        "RUN_ERROR",
        "RUN_STARTED",
        "TEXT_MESSAGE_START",
        "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_END",
        "RUN_FINISHED",
    ]
    assert types("t-linger") == [
        "RUN_STARTED",
        "RUN_FINISHED",
        "RUN_STARTED",
        "TEXT_MESSAGE_START",
        "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_END",
        "RUN_FINISHED",
    ]
    assert [e["type"] for e in down_events] == ["RUN_ERROR"]
    assert down_events[0]["code"] == "agent_unreachable"
    # every request reached the agent exactly once
    assert sorted(counters.modes) == sorted(modes + ["hang", "ok", "linger", "ok"])
