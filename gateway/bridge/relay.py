"""One run: POST the RunAgentInput to the agent, pass each SSE event on as sent.

The relay reads just enough of each event to know whether the run has closed
(`type` of a JSON object); the bytes it hands on are the agent's own. A run the
agent cuts short ends with a `RUN_ERROR` the bridge writes, with a code:

| code | when |
|---|---|
| `agent_http_<status>` | the agent answered a status other than 2xx (nothing started) |
| `agent_unreachable` | the connection could not be made |
| `agent_timeout` | no byte arrived for the read timeout (or the request could not be sent in time) |
| `agent_stream_ended` | the stream ended (or broke) before `RUN_FINISHED` / `RUN_ERROR` |
| `agent_stream_invalid` | a 2xx answer that is not `text/event-stream`, or an event that is not a JSON object with a string `type` |
| `agent_event_too_large` | an event over `bridge_max_event_bytes` |

Nothing is written for a stream that already closed its run: trouble after the
close (a hang, a broken connection) is logged, never turned into a late
`RUN_ERROR` that would mark a finished run failed. A stream still open
`CLOSE_GRACE_S` after its run closed is left (its late events still arriving
by then are relayed), so the thread's next run is not held up by it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import httpx
import orjson
from ag_ui.core import RunErrorEvent

from gateway.bridge.sse import EventTooLarge, SseReader

log = logging.getLogger("gateway.bridge.relay")

BODY_EXCERPT = 300  # characters of a non-2xx body quoted in the RUN_ERROR message
CLOSE_GRACE_S = 5.0  # how long a stream is read after its run closed (for a late RUN_ERROR)

Emit = Callable[[bytes, str], Awaitable[None]]  # (event bytes, event type)


@dataclass(slots=True)
class RunResult:
    result: str  # success | interrupt | cancelled | run_error | a bridge code below
    code: str | None = None  # the RUN_ERROR code the bridge wrote, if it wrote one
    http_status: int | None = None
    events: int = 0  # events relayed from the agent


def run_error(code: str, message: str) -> bytes:
    """A `RUN_ERROR` written by the bridge, with the protocol's own model."""
    event = RunErrorEvent(message=message, code=code, timestamp=int(time.time() * 1000))
    return orjson.dumps(event.model_dump(mode="json", by_alias=True, exclude_none=True))


def _close_result(event: dict[str, object]) -> str | None:
    kind = event.get("type")
    if kind == "RUN_ERROR":
        return "run_error"
    if kind == "RUN_FINISHED":
        outcome = event.get("outcome")
        if isinstance(outcome, dict) and outcome.get("type") in ("interrupt", "cancelled"):
            return str(outcome["type"])
        return "success"
    return None


class _Cut(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


async def relay(
    client: httpx.AsyncClient,
    url: str,
    body: bytes,
    headers: dict[str, str],
    emit: Emit,
    max_event_bytes: int,
) -> RunResult:
    """Run one request against the agent; every event goes to `emit`, in order."""
    result = RunResult("agent_stream_ended")
    closed: str | None = None
    try:
        async with client.stream(
            "POST",
            url,
            content=body,
            headers={
                "Content-Type": "application/json",
                "Accept": "text/event-stream",
                **headers,
            },
        ) as response:
            result.http_status = response.status_code
            if not 200 <= response.status_code < 300:
                excerpt = await _excerpt(response)
                raise _Cut(
                    f"agent_http_{response.status_code}",
                    f"the agent answered HTTP {response.status_code}: {excerpt}",
                )
            content_type = response.headers.get("content-type", "")
            if not content_type.lower().startswith("text/event-stream"):
                raise _Cut(
                    "agent_stream_invalid",
                    f"the agent answered {content_type or 'no content type'}, "
                    "not text/event-stream",
                )
            reader = SseReader(max_event_bytes)
            closed_at = 0.0
            async for chunk in response.aiter_bytes():
                if closed is not None and time.monotonic() - closed_at > CLOSE_GRACE_S:
                    log.warning("agent kept its stream open after the run closed; left")
                    return result
                for data in reader.feed(chunk):
                    try:
                        event = orjson.loads(data)
                    except orjson.JSONDecodeError:
                        event = None
                    if not isinstance(event, dict) or not isinstance(event.get("type"), str):
                        if closed is not None:
                            log.warning("agent sent an unreadable event after the run closed")
                            return result
                        raise _Cut(
                            "agent_stream_invalid",
                            "the agent sent an event that is not a JSON object with a type",
                        )
                    await emit(data, event["type"])
                    result.events += 1
                    if event["type"] == "RUN_STARTED":
                        closed = None
                    was_closed = closed
                    closed = _close_result(event) or closed
                    if closed is not None:
                        result.result = closed
                        if was_closed is None:
                            closed_at = time.monotonic()
            if closed is None:
                raise _Cut("agent_stream_ended", "the agent's stream ended before the run closed")
            return result
    except EventTooLarge as exc:
        cut = _Cut("agent_event_too_large", f"the agent sent {exc}")
    except _Cut as exc:
        cut = exc
    except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
        cut = _Cut("agent_unreachable", f"the agent could not be reached: {type(exc).__name__}")
    except httpx.TimeoutException as exc:
        cut = _Cut("agent_timeout", f"the agent did not answer in time: {type(exc).__name__}")
    except (httpx.TransportError, httpx.StreamError) as exc:
        cut = _Cut("agent_stream_ended", f"the agent's stream broke: {type(exc).__name__}")
    if closed is not None:
        log.warning(
            "agent stream trouble after the run closed",
            extra={"code": cut.code, "detail": cut.message},
        )
        return result
    await emit(run_error(cut.code, cut.message), "RUN_ERROR")
    result.result = "agent_http_error" if cut.code.startswith("agent_http_") else cut.code
    result.code = cut.code
    return result


async def _excerpt(response: httpx.Response) -> str:
    """The start of an error body, bounded in bytes read."""
    got = bytearray()
    async for chunk in response.aiter_bytes():
        got += chunk
        if len(got) >= BODY_EXCERPT * 4:
            break
    text = got.decode("utf-8", "replace").strip()
    return text[:BODY_EXCERPT] or "(empty body)"
