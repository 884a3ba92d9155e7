"""Real HTTP AG-UI agents for the bridge tests, served by uvicorn on 127.0.0.1.

- `approval_agent()`: a pydantic-ai agent (its AG-UI adapter) with a `FunctionModel`
  (no model, no network) and one tool that requires approval; counts requests and
  tool calls, and keeps the `runId` of each request.
- `langgraph_agent()`: a LangGraph graph whose node calls `interrupt()`, served by
  ag-ui-langgraph's FastAPI endpoint with the 1.0 interrupt outcome; counts
  requests and the node's runs past its interrupt.
- `scripted_agent()`: an agent whose answer is chosen by the input's
  `forwardedProps.mode`, for the bridge's faults: 503, a hang, an early close, a
  slow run, a run held until the test releases it, an oversize or unreadable event,
  a stream left open after its run closed.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import orjson
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from gateway.demo.real_agent import approval_agent
from tests.integration.support import free_port

__all__ = ["Counters", "Served", "approval_agent", "langgraph_agent", "scripted_agent"]


@dataclass
class Counters:
    requests: int = 0
    tool_calls: int = 0
    modes: list[str] = field(default_factory=list)
    run_ids: list[str] = field(default_factory=list)
    release: asyncio.Event = field(default_factory=asyncio.Event)  # ends the "held" runs


LANGGRAPH_SCHEMA = {
    "type": "object",
    "properties": {"approved": {"type": "boolean"}},
    "required": ["approved"],
}


def langgraph_agent() -> tuple[Any, Counters]:
    from ag_ui_langgraph import LangGraphAgent, add_langgraph_fastapi_endpoint
    from fastapi import FastAPI
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.graph import END, START, MessagesState, StateGraph
    from langgraph.types import interrupt

    counters = Counters()

    def ask(state: MessagesState) -> dict[str, Any]:
        answer = interrupt(
            {
                "message": "Approve transfer of 100 to alice?",
                "reason": "tool_call",
                "responseSchema": LANGGRAPH_SCHEMA,
            }
        )
        counters.tool_calls += 1
        return {"messages": [{"role": "assistant", "content": f"answered {answer}"}]}

    graph = StateGraph(MessagesState)
    graph.add_node("ask", ask)
    graph.add_edge(START, "ask")
    graph.add_edge("ask", END)
    agent = LangGraphAgent(
        name="approvals",
        graph=graph.compile(checkpointer=InMemorySaver()),
        emit_interrupt_outcome=True,
    )
    app = FastAPI()

    @app.middleware("http")
    async def count(request: Request, call_next: Any) -> Any:
        if request.method == "POST":
            counters.requests += 1
        return await call_next(request)

    add_langgraph_fastapi_endpoint(app, agent, "/")
    return app, counters


def _sse(event: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(event) + b"\n\n"


def scripted_agent() -> tuple[Starlette, Counters]:
    counters = Counters()

    async def run(request: Request) -> Response:
        counters.requests += 1
        body = orjson.loads(await request.body())
        mode = (body.get("forwardedProps") or {}).get("mode", "ok")
        counters.modes.append(mode)
        counters.run_ids.append(body["runId"])
        thread, run_id = body["threadId"], body["runId"]
        started = {"type": "RUN_STARTED", "threadId": thread, "runId": run_id}
        finished = {"type": "RUN_FINISHED", "threadId": thread, "runId": run_id}
        if mode == "503":
            return Response("overloaded", status_code=503)

        async def stream() -> AsyncIterator[bytes]:
            yield _sse(started)
            if mode == "ok":
                yield _sse({"type": "TEXT_MESSAGE_START", "messageId": "m1", "role": "assistant"})
                yield _sse({"type": "TEXT_MESSAGE_CONTENT", "messageId": "m1", "delta": "hi"})
                yield _sse({"type": "TEXT_MESSAGE_END", "messageId": "m1"})
                yield _sse(finished)
            elif mode == "linger":  # closes its run, then keeps the stream open for ever
                yield _sse(finished)
                while True:
                    await asyncio.sleep(0.5)
                    yield b": keep-alive\n\n"
            elif mode == "held":  # runs until the test sets `counters.release`
                await counters.release.wait()
                yield _sse(finished)
            elif mode in ("hang", "slow"):
                await asyncio.sleep(3600)
            elif mode == "early_close":
                return
            elif mode == "oversize":
                yield b"data: " + b"x" * 5000 + b"\n\n"
                await asyncio.sleep(3600)
            elif mode == "invalid":
                yield b"data: {not json\n\n"
                await asyncio.sleep(3600)

        return StreamingResponse(stream(), media_type="text/event-stream")

    return Starlette(routes=[Route("/", run, methods=["POST"])]), counters


class Served:
    """An ASGI app served by uvicorn in this event loop."""

    def __init__(self, app: Any) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/"
        self.server = uvicorn.Server(
            uvicorn.Config(
                app, host="127.0.0.1", port=self.port, log_level="warning", lifespan="off"
            )
        )
        self.task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Served:
        self.task = asyncio.create_task(self.server.serve())
        while not self.server.started:
            if self.task.done():
                self.task.result()
            await asyncio.sleep(0.02)
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.server.force_exit = True
        assert self.task is not None
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.task, timeout=10)
