"""The inbox's JSON API: Starlette routes over an InboxSource, behind a bearer token.

- `GET /interrupts`: open interrupts, filtered, oldest first, a page (400 for a
  parameter it cannot read, naming it);
- `GET /threads/{agent}/{thread}`: what the view knows of a thread (404: nothing);
- `GET /interrupts/summary`: per agent, open counts, by reason, response latency;
- `GET /interrupts/events`: server-sent events, each `event: change` with a Change.

Every route asks `authorize` first and answers 401 (with `WWW-Authenticate: Bearer`)
when it says no, and why when it says (`Refused`). `bearer(settings)` is the
authorizer the settings describe (`gateway.inbox.auth`): the `inbox_token`, compared in
constant time, or a person's JWT verified as the edge verifies it (or a session
cookie); nothing set refuses everything unless `inbox_open`. No credential is ever
logged or echoed. The API only reads: it has no write path to attest.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any, Protocol

import orjson
from sse_starlette.sse import EventSourceResponse
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from gateway.inbox.auth import Authorizer, Principal, Refused
from gateway.settings import Settings

# an authorizer answers who (a Principal) or why not (Refused, false); a plain bool will do
Authorize = Callable[[Request], Awaitable[Principal | Refused | bool]]
KEEPALIVE_S = 15.0


class Source(Protocol):
    """The contract's InboxSource, as the API reads it."""

    def interrupts(self, query: Mapping[str, list[str]]) -> dict[str, Any]: ...
    def thread(self, agent: str, thread: str) -> dict[str, Any] | None: ...
    def summary(self) -> dict[str, Any]: ...
    def changes(self) -> AsyncIterator[dict[str, Any]]: ...


def bearer(settings: Settings) -> Authorize:
    """The settings' authorizer: `Authorization: Bearer <inbox_token or a JWT>` (or a
    session cookie)."""
    return Authorizer(settings).authorize


def _json(body: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(body) + b"\n", status_code=status, media_type="application/json")


_UNAUTHORIZED = {"error": "unauthorized", "detail": "a valid bearer token is required"}


def routes(source: Source, authorize: Authorize) -> list[Route]:
    """The API's routes, to mount on any Starlette app."""

    def guarded(
        handler: Callable[[Request], Awaitable[Response]],
    ) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            found = await authorize(request)
            if not found:
                detail = found.detail if isinstance(found, Refused) else _UNAUTHORIZED["detail"]
                response = _json({"error": "unauthorized", "detail": detail}, 401)
                response.headers["WWW-Authenticate"] = 'Bearer realm="inbox"'
                return response
            return await handler(request)

        return endpoint

    async def interrupts(request: Request) -> Response:
        params: dict[str, list[str]] = {}
        for name, value in request.query_params.multi_items():
            params.setdefault(name, []).append(value)
        answer = source.interrupts(params)
        if "error" in answer:  # a parameter the source cannot read
            return _json({"error": answer["error"], "detail": answer.get("detail", "")}, 400)
        return _json(answer)

    async def thread(request: Request) -> Response:
        found = source.thread(request.path_params["agent"], request.path_params["thread"])
        if found is None:
            return _json({"error": "not_found", "detail": "the inbox holds nothing of it"}, 404)
        return _json(found)

    async def summary(request: Request) -> Response:
        return _json(source.summary())

    async def events(request: Request) -> Response:
        async def frames() -> AsyncIterator[dict[str, str]]:
            async for change in source.changes():
                yield {"event": "change", "data": orjson.dumps(change).decode()}

        return EventSourceResponse(
            frames(),
            ping=KEEPALIVE_S,
            sep="\n",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )

    return [
        Route("/interrupts", guarded(interrupts), methods=["GET"]),
        Route("/interrupts/summary", guarded(summary), methods=["GET"]),
        Route("/interrupts/events", guarded(events), methods=["GET"]),
        Route("/threads/{agent}/{thread:path}", guarded(thread), methods=["GET"]),
    ]
