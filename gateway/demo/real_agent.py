"""The demo's real agent: an offline pydantic-ai agent behind its AG-UI adapter.

A `FunctionModel` stands in for the model (no model, no network): the first run
calls the `transfer_funds` tool, which requires approval, so the run ends with
an interrupt; the run resumed with an approval executes the tool and answers.
It is served by uvicorn on 127.0.0.1 in the demo's own event loop, and counts
the requests it got and the tool's real calls.

Needs the `demo` extra (`pydantic-ai-slim[ag-ui]`); `missing()` says when it is absent.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson
import uvicorn

TOOL = "transfer_funds"
TOOL_ARGS = '{"amount": 100, "to": "alice"}'
START_TIMEOUT_S = 10.0
STOP_TIMEOUT_S = 10.0


def missing() -> str | None:
    """None when the agent can run here; otherwise one line saying how to install it."""
    try:
        import pydantic_ai.ui.ag_ui  # noqa: F401  (needed by approval_agent)
    except ImportError:
        pass
    else:
        return None
    return (
        "--real-agent needs pydantic-ai's AG-UI adapter: "
        "pip install 'agui-gateway[demo]' (./scripts/run.sh installs it)"
    )


@dataclass
class AgentCounters:
    requests: int = 0  # HTTP runs the agent was asked for
    tool_calls: int = 0  # times the approved tool really ran
    run_ids: list[str] = field(default_factory=list)  # the runId of each run asked for


def approval_agent() -> tuple[Any, AgentCounters]:
    """The agent as an ASGI app, and its counters."""
    from pydantic_ai import Agent, DeferredToolRequests
    from pydantic_ai.messages import (
        ModelMessage,
        ModelResponse,
        TextPart,
        ToolCallPart,
        ToolReturnPart,
    )
    from pydantic_ai.models.function import AgentInfo, DeltaToolCall, FunctionModel
    from pydantic_ai.ui.ag_ui import AGUIAdapter
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Route

    counters = AgentCounters()

    def returned(messages: list[ModelMessage]) -> ToolReturnPart | None:
        return next((p for p in messages[-1].parts if isinstance(p, ToolReturnPart)), None)

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        done = returned(messages)
        if done is not None:
            return ModelResponse(parts=[TextPart(f"Done: {done.content}")])
        return ModelResponse(parts=[ToolCallPart(TOOL, TOOL_ARGS)])

    async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[Any]:
        done = returned(messages)
        if done is not None:
            yield f"Done: {done.content}"
            return
        yield {0: DeltaToolCall(name=TOOL, json_args=TOOL_ARGS)}

    agent: Agent[None, str | DeferredToolRequests] = Agent(
        FunctionModel(model, stream_function=stream), output_type=[str, DeferredToolRequests]
    )

    @agent.tool_plain(requires_approval=True)
    def transfer_funds(amount: int, to: str) -> str:
        """Send money."""
        counters.tool_calls += 1
        return f"sent {amount} to {to}"

    async def run(request: Request) -> Response:
        counters.requests += 1
        try:
            run_id = orjson.loads(await request.body()).get("runId")
        except (orjson.JSONDecodeError, AttributeError):
            run_id = None  # the adapter answers what it cannot read
        counters.run_ids.append(str(run_id))
        return await AGUIAdapter.dispatch_request(request, agent=agent)

    return Starlette(routes=[Route("/", run, methods=["POST"])]), counters


class _Server(uvicorn.Server):
    """uvicorn without its signal handlers: the demo owns SIGINT/SIGTERM and stops it."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class ServedAgent:
    """The agent served by uvicorn on 127.0.0.1 (a free port) in the running event loop."""

    def __init__(self) -> None:
        app, self.counters = approval_agent()
        self.server = _Server(
            uvicorn.Config(
                app, host="127.0.0.1", port=0, log_level="warning", lifespan="off", access_log=False
            )
        )
        self.task: asyncio.Task[None] | None = None
        self.url = ""

    async def start(self) -> str:
        """Serve; returns the agent's URL."""
        self.task = asyncio.create_task(self.server.serve(), name="real-agent")
        async with asyncio.timeout(START_TIMEOUT_S):
            while not self.server.started:
                if self.task.done():
                    self.task.result()
                    raise OSError("the agent's server stopped while starting")
                await asyncio.sleep(0.02)
        port = self.server.servers[0].sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}/"
        return self.url

    async def stop(self) -> None:
        if self.task is None:
            return
        self.server.should_exit = True
        self.server.force_exit = True
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.task, timeout=STOP_TIMEOUT_S)
