"""The demo's real agent: served over HTTP, it interrupts, and runs its tool once approved."""

from __future__ import annotations

import sys
from typing import Any

import httpx
import orjson
import pytest

from gateway.commands import demo
from gateway.demo.bridged import history, run_input
from gateway.demo.real_agent import ServedAgent, missing
from gateway.settings import Settings


async def run(client: httpx.AsyncClient, url: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    """POST a RunAgentInput; the SSE stream's events."""
    response = await client.post(
        url,
        content=orjson.dumps(body),
        headers={"content-type": "application/json", "accept": "text/event-stream"},
    )
    assert response.status_code == 200, response.text
    return [
        orjson.loads(line[len("data: ") :])
        for line in response.text.splitlines()
        if line.startswith("data: ")
    ]


async def test_the_agent_interrupts_then_runs_its_tool_once_approved() -> None:
    served = ServedAgent()
    url = await served.start()
    try:
        assert url.startswith("http://127.0.0.1:")
        async with httpx.AsyncClient(timeout=10) as client:
            first = await run(client, url, run_input("t1", history([])))
            assert first[0]["type"] == "RUN_STARTED"
            assert first[-1]["type"] == "RUN_FINISHED"
            assert first[-1]["outcome"]["type"] == "interrupt"
            interrupt = first[-1]["outcome"]["interrupts"][0]
            assert served.counters.requests == 1
            assert served.counters.tool_calls == 0

            approving = [
                {
                    "interruptId": interrupt["id"],
                    "status": "resolved",
                    "payload": {"approved": True},
                }
            ]
            second = await run(client, url, run_input("t1", history(first), approving))
            assert second[-1]["type"] == "RUN_FINISHED"
            assert second[-1].get("outcome", {"type": "success"})["type"] == "success"
            assert served.counters.requests == 2
            assert served.counters.tool_calls == 1
    finally:
        await served.stop()
    assert served.task is not None and served.task.done()


def test_the_option_without_the_demo_extra_is_refused_in_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert missing() is None  # the dev install has it
    for name in ("pydantic_ai", "pydantic_ai.ui", "pydantic_ai.ui.ag_ui"):
        monkeypatch.setitem(sys.modules, name, None)  # as if it were not installed
    problem = missing()
    assert problem is not None and "agui-gateway[demo]" in problem
    settings = Settings(bootstrap_servers="127.0.0.1:1")  # never reached
    assert demo.main(settings, "demo", 3, 5.0, None, real_agent=True) == 2
    err = capsys.readouterr().err
    assert err == f"agui-gateway demo: {problem}\n", err
