"""The page's HTTP routes: `GET /inbox` and what it calls.

- `GET /inbox`: the open interrupts (the filters as query parameters), the per-agent
  summary and the view's lag, server-rendered;
- `GET /inbox/events`: the page's own live stream (SSE), fed by the source's
  `changes()`: `event: interrupt-open` carries the row's HTML (rendered here,
  escaped) and its key, `event: interrupt-close` the key and how it closed;
- `GET /inbox/thread?agent=&thread=`: the thread's open interrupts and the one form
  that answers them all;
- `POST /inbox/check`: the form read back and checked against each `responseSchema`
  with the gateway's own check, nothing sent (the errors shown before sending);
- `POST /inbox/answer`: the same, then the next `RunAgentInput` sent through
  `GatewayClient` and the gateway's verdict returned as JSON;
- `GET /inbox/summary`: the summary as JSON (the page refreshes its table with it);
- `GET /inbox/assets/inbox.js|inbox.css|icon.svg`.

Every route asks `authorize` first (401 when it says no). A POST whose `Origin` is
another site's is refused (403), so a page elsewhere cannot answer with the
person's credentials. The pages say who is signed in. An answer from a person whose
identity was verified (a `Principal` with an identity: a JWT, or its session) is sent
attested with the inbox's signing key; with no signing key it is sent unattested and
the page says so, before and after sending. Logs name agents, threads, interrupt ids,
the answering subject, verdicts and codes, never payloads or credentials.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any
from urllib.parse import parse_qsl

from aiokafka.errors import KafkaError
from sse_starlette.sse import EventSourceResponse
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Route

from gateway.client import (
    AttestationError,
    DuplicateReply,
    ForwardReply,
    ReplyTimeout,
    ReplyTopicMissing,
    UnknownAgent,
)
from gateway.codec import jsonio
from gateway.core.values.identity import Identity
from gateway.inbox.auth import Principal, Refused
from gateway.inbox.page import assets, render, resume
from gateway.inbox.page.sender import AnswerSender, KafkaSender
from gateway.inbox.page.source import InboxSource
from gateway.settings import Settings

log = logging.getLogger("gateway.inbox.page")

# who (a Principal) or why not (Refused, false); a plain bool will do (no identity)
Authorize = Callable[[Request], Awaitable[Principal | Refused | bool]]
PRINCIPAL = "inbox.principal"  # where the guard leaves who was let in, in the scope
UNATTESTED = (
    "this inbox has no signing key (attest_key_id, attest_private_key_file): answers "
    "reach the gateway unattested, and where the approver policy wants a verified "
    "approver they are rejected approver_unverified"
)

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
    "img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
FILTER_NAMES = ("agent", "reason", "olderThan", "expiringBefore", "q")


MAX_FIELDS = 10_000  # fields of one submitted form


class _TooLarge(Exception):
    pass


def _now_ms() -> int:
    return int(time.time() * 1000)


class InboxPage:
    """The page's state: where it reads (`source`), who may see it, where it sends."""

    def __init__(
        self,
        source: InboxSource,
        authorize: Authorize,
        settings: Settings,
        sender: AnswerSender | None = None,
        clock: Callable[[], int] = _now_ms,
        login: Callable[[Request], str] | None = None,
    ) -> None:
        self.source = source
        self.authorize = authorize
        # where an unauthenticated navigation to a page is sent (None: 401 like the rest)
        self.login = login
        self.settings = settings
        self.sender: AnswerSender = sender if sender is not None else KafkaSender(settings)
        self.clock = clock
        # whether a person's answer can be attested (the sender signs with this key)
        self.attests = settings.attest_private_key_file is not None

    def routes(self) -> list[Route]:
        return [
            Route("/inbox", self._guard(self.inbox, page=True), methods=["GET"]),
            Route("/inbox/events", self._guard(self.events), methods=["GET"]),
            Route("/inbox/summary", self._guard(self.summary), methods=["GET"]),
            Route("/inbox/thread", self._guard(self.thread, page=True), methods=["GET"]),
            Route("/inbox/check", self._guard(self.check), methods=["POST"]),
            Route("/inbox/answer", self._guard(self.answer), methods=["POST"]),
            Route("/inbox/assets/{name}", self._guard(self.asset), methods=["GET"]),
        ]

    async def aclose(self) -> None:
        """Stop the sender (its Kafka clients), if it was started."""
        await self.sender.aclose()

    # --- plumbing ---------------------------------------------------------------------------

    def _guard(
        self, handler: Callable[[Request], Awaitable[Response]], page: bool = False
    ) -> Callable[[Request], Awaitable[Response]]:
        async def guarded(request: Request) -> Response:
            found = await self.authorize(request)
            if not found:
                if page and self.login is not None:  # a person navigating: sign in first
                    return _secured(RedirectResponse(self.login(request), status_code=303))
                body = {"error": "unauthorized"}
                if isinstance(found, Refused):
                    body["detail"] = found.detail
                return _secured(JSONResponse(body, status_code=401))
            request.scope[PRINCIPAL] = found if isinstance(found, Principal) else None
            if request.method == "POST" and not _same_origin(request):
                return _secured(JSONResponse({"error": "cross_origin"}, status_code=403))
            return _secured(await handler(request))

        return guarded

    def _who(self, request: Request) -> tuple[Identity | None, str | None]:
        """Who was let in (a verified identity or none) and how ("token", ...; None: an
        authorizer that does not say)."""
        found = request.scope.get(PRINCIPAL)
        if isinstance(found, Principal):
            return found.identity, found.via
        return None, None

    def _signed_in(self, request: Request) -> str:
        identity, via = self._who(request)
        return render.signed_in(identity, via, self.attests)

    def _base(self, request: Request) -> str:
        return str(request.scope.get("root_path", "")) + "/inbox"

    async def _fields(self, request: Request) -> dict[str, str]:
        limit = self.settings.inbox_page_max_body_bytes
        body = bytearray()
        async for chunk in request.stream():
            body += chunk
            if len(body) > limit:
                raise _TooLarge
        text = bytes(body).decode("utf-8", errors="replace")
        try:
            return dict(parse_qsl(text, keep_blank_values=True, max_num_fields=MAX_FIELDS))
        except ValueError:  # more fields than any form of the page has
            raise _TooLarge from None

    # --- pages ------------------------------------------------------------------------------

    async def inbox(self, request: Request) -> Response:
        filters = {name: request.query_params.get(name, "").strip() for name in FILTER_NAMES}
        query: dict[str, list[str]] = {"limit": [str(self.settings.inbox_page_rows)]}
        for name, value in filters.items():
            if not value:
                continue
            if name == "agent":
                query[name] = [a.strip() for a in value.split(",") if a.strip()]
            else:
                query[name] = [value]
        try:
            listing = self.source.interrupts(query)
        except ValueError as exc:  # a view may refuse a filter by raising
            listing = {"error": "bad_request", "detail": str(exc)}
        if "error" in listing and not listing.get("items"):
            # the view refused a filter (its own 400): the page says so, without rows
            refused = str(listing.get("detail") or listing.get("error"))
            listing = {"items": [], "lagSeconds": listing.get("lagSeconds"), "refused": refused}
        page = render.inbox(
            self._base(request),
            listing,
            self.source.summary(),
            filters,
            self.clock(),
            refresh_s=self.settings.inbox_page_summary_refresh_s,
            signout=self.login is not None,
            who=self._signed_in(request),
        )
        return HTMLResponse(page)

    async def summary(self, request: Request) -> Response:
        return JSONResponse(self.source.summary())

    async def thread(self, request: Request) -> Response:
        agent = request.query_params.get("agent", "")
        thread = request.query_params.get("thread", "")
        answer = self.source.thread(agent, thread) if agent and thread else None
        page = render.thread_page(
            self._base(request), agent, thread, answer, self.clock(), who=self._signed_in(request)
        )
        return HTMLResponse(page, status_code=200 if answer is not None else 404)

    async def asset(self, request: Request) -> Response:
        found = assets.ASSETS.get(request.path_params["name"])
        if found is None:
            return Response(status_code=404)
        media_type, text = found
        return Response(text, media_type=media_type)

    async def events(self, request: Request) -> Response:
        base = self._base(request)

        async def stream() -> AsyncIterator[dict[str, Any]]:
            changes = self.source.changes()
            try:
                async for change in changes:
                    frame = self._frame(base, change)
                    if frame is not None:
                        yield frame
            finally:
                closer = getattr(changes, "aclose", None)
                if closer is not None:
                    with contextlib.suppress(Exception):
                        await closer()

        return EventSourceResponse(
            stream(), ping=int(max(1, self.settings.inbox_page_keepalive_s)), sep="\n"
        )

    def _frame(self, base: str, change: dict[str, Any]) -> dict[str, Any] | None:
        op = change.get("op")
        if op == "open" and isinstance(change.get("item"), dict):
            item = change["item"]
            data = {
                "key": item.get("key"),
                "openedAtMs": item.get("openedAtMs"),
                "html": render.row(base, item, self.clock()),
            }
            return {"event": "interrupt-open", "data": jsonio.dumps(data).decode()}
        if op == "close":
            data = {k: change.get(k) for k in ("key", "agent", "thread", "interrupt", "status")}
            return {"event": "interrupt-close", "data": jsonio.dumps(data).decode()}
        return None

    # --- answering --------------------------------------------------------------------------

    async def _plan(
        self, request: Request
    ) -> tuple[dict[str, str], resume.Plan | None, Response | None]:
        try:
            fields = await self._fields(request)
        except _TooLarge:
            return {}, None, JSONResponse({"error": "too_large"}, status_code=413)
        agent, thread = fields.get("agent", ""), fields.get("thread", "")
        answer = self.source.thread(agent, thread) if agent and thread else None
        if answer is None:
            return fields, None, JSONResponse({"error": "unknown_thread"}, status_code=404)
        open_items = [i for i in answer.get("open") or [] if isinstance(i, dict)]
        if not open_items:
            return fields, None, JSONResponse({"error": "nothing_open"}, status_code=409)
        return fields, resume.plan(open_items, fields, self.clock()), None

    async def check(self, request: Request) -> Response:
        _fields, plan, refused = await self._plan(request)
        if refused is not None:
            return refused
        assert plan is not None
        return JSONResponse({"issues": render.issues_json(plan.issues)})

    async def answer(self, request: Request) -> Response:
        fields, plan, refused = await self._plan(request)
        if refused is not None:
            return refused
        assert plan is not None
        confirmed = fields.get("confirm") == "1"
        if not plan.readable or (plan.issues and not confirmed):
            # Unreadable parts are never sent; schema issues are sent only once the person
            # has seen them and confirmed (the gateway then judges, and rejects).
            return JSONResponse(
                {
                    "sent": False,
                    "issues": render.issues_json(plan.issues),
                    "confirmable": plan.readable,
                },
                status_code=422,
            )
        agent, thread = fields["agent"], fields["thread"]
        run_id = resume.new_run_id()
        run_input = resume.run_input(thread, run_id, plan.entries)
        identity, _via = self._who(request)
        return await self._send(agent, thread, run_id, run_input, identity)

    async def _send(
        self,
        agent: str,
        thread: str,
        run_id: str,
        run_input: dict[str, Any],
        identity: Identity | None = None,
    ) -> Response:
        answered = [(e["interruptId"], e["status"]) for e in run_input["resume"]]
        # a person's answer is attested when the inbox can sign; else sent unattested,
        # and said so (never silently)
        attested = identity if self.attests else None
        try:
            if attested is not None:
                verdict = await self.sender.send(agent, run_input, identity=attested)
            else:
                verdict = await self.sender.send(agent, run_input)
        except UnknownAgent as exc:
            return JSONResponse({"sent": False, "error": "unknown_agent", "detail": str(exc)}, 404)
        except ReplyTimeout as exc:
            log.warning("inbox answer: no verdict", extra={"agent": agent, "thread_id": thread})
            return JSONResponse(
                {
                    "sent": True,
                    "verdict": None,
                    "runId": run_id,
                    "error": "verdict_timeout",
                    "detail": f"no verdict within {exc.timeout:g} s; the answer is still "
                    "judged exactly once: reload the thread to see what happened",
                },
                504,
            )
        except AttestationError as exc:  # the signing key cannot be used: say so, send nothing
            log.error("inbox answer: cannot attest", extra={"agent": agent, "error": str(exc)})
            return JSONResponse(
                {"sent": False, "error": "attestation_failed", "detail": str(exc)}, 500
            )
        except (TimeoutError, KafkaError, OSError, ReplyTopicMissing) as exc:
            log.warning(
                "inbox answer: not sent",
                extra={"agent": agent, "thread_id": thread, "error": type(exc).__name__},
            )
            return JSONResponse(
                {"sent": False, "error": "kafka_unavailable", "detail": type(exc).__name__}, 503
            )
        body: dict[str, Any] = {
            "sent": True,
            "verdict": str(verdict.verdict),
            "runId": run_id,
            "correlationId": verdict.correlation_id,
            "warnings": [_finding(w) for w in getattr(verdict, "warnings", [])],
            "attestedAs": attested.subject if attested is not None else None,
        }
        if identity is not None and attested is None:
            body["unattested"] = UNATTESTED
        if isinstance(verdict, ForwardReply):
            codes: list[str] = []
        elif isinstance(verdict, DuplicateReply):
            codes = []
        else:
            body["reasons"] = [_finding(r) for r in verdict.reasons]
            codes = [str(r.code) for r in verdict.reasons]
        log.info(
            "inbox answer",
            extra={
                "agent": agent,
                "thread_id": thread,
                "run_id": run_id,
                "answered": answered,
                "subject": identity.subject if identity is not None else None,
                "attested": attested is not None,
                "verdict": body["verdict"],
                "reasons": codes,
            },
        )
        return JSONResponse(body)


def _finding(finding: Any) -> dict[str, Any]:
    return {
        "code": str(finding.code),
        "detail": finding.detail,
        "interruptId": finding.interrupt_id,
        "path": finding.path,
    }


def _secured(response: Response) -> Response:
    for name, value in SECURITY_HEADERS.items():
        response.headers.setdefault(name, value)
    return response


def _same_origin(request: Request) -> bool:
    """A POST from this site, or from no browser page at all (no Origin header)."""
    origin = request.headers.get("origin")
    if origin is None:
        return True
    host = request.headers.get("host", "")
    return origin in (f"http://{host}", f"https://{host}")


def routes(
    source: InboxSource,
    authorize: Authorize,
    settings: Settings,
    *,
    sender: AnswerSender | None = None,
) -> list[Route]:
    """The page's routes (`GET /inbox` and its parts), reading `source` and answering
    through `sender` (default: a `GatewayClient` on `settings`, started on the first
    answer; build an `InboxPage` to be able to stop it)."""
    return InboxPage(source, authorize, settings, sender).routes()
