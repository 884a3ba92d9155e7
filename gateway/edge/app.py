"""The edge's HTTP endpoints: `POST /agents/{agent}`, `/healthz`, `/readyz`, `/metrics`.

A run input is published to the agent's requests topic through `GatewayClient`
(pinned reply consumer, run watched before the request exists), then answered
by the gateway's verdict (README, "Calling agents through the gateway"). For an
agent of a group (`Settings.groups`) that is the group's requests topic, the
request naming the agent in `agui-agent`, and the stream follows the agent's
run on the group's events topic by agent and thread:

- forward: 200 `text/event-stream`, the run's events (`stream.py`);
- reject, or malformed before publishing: 422, the rejection record as JSON;
- duplicate: 409, the duplicate reply (no new run follows it);
- no verdict within `edge_verdict_timeout_s`: 504; an unknown agent: 404;
  a body over `edge_max_body_bytes`: 413; `edge_max_streams` open: 503;
- a body not read whole within `edge_body_timeout_s` of the headers: 408, and the
  connection is closed (the headers' deadline and the connection cap: `guard.py`);
- with tokens verified (`auth.py`), no valid bearer token: 401 and why. The caller's
  identity is then attested on the request record, signed with the edge's key
  (`attest_private_key_file`), for the gateway's approver policy.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

from aiokafka.errors import KafkaError
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from sse_starlette.sse import EventSourceResponse
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from gateway.client import (
    DuplicateReply,
    GatewayClient,
    RejectReply,
    ReplyTimeout,
    UnknownAgent,
)
from gateway.client.replies import ForwardReply
from gateway.codec import jsonio
from gateway.core.values.codes import Reason, Verdict
from gateway.core.values.identity import Identity
from gateway.edge import auth
from gateway.edge.auth import TokenVerifier, Unauthorized
from gateway.edge.guard import BODY_TIMEOUT, PEER_CERT
from gateway.edge.metrics import NO_VERDICT, EdgeMetrics
from gateway.edge.stream import run_frames
from gateway.kafka.wire import clients
from gateway.kafka.wire.brokerwatch import BrokerWatch
from gateway.settings import Settings

log = logging.getLogger("gateway.edge")


class _TooLarge(Exception):
    pass


class Edge:
    """The edge's state: settings, the shared GatewayClient, metrics."""

    def __init__(self, settings: Settings, registry: CollectorRegistry) -> None:
        self.settings = settings
        self.registry = registry
        self.metrics = EdgeMetrics(registry)
        self.client = GatewayClient(
            reply_topic=settings.edge_reply_topic,
            create_reply_topic=True,
            reply_topic_partitions=settings.edge_reply_partitions,
            settings=settings,
            event_buffer=settings.edge_stream_buffer,
        )
        self.broker = BrokerWatch(
            lambda: clients.probe(self.client.producer), settings.broker_timeout_s
        )
        self.tokens: TokenVerifier | None = None
        self.client_certs = settings.edge_client_certs != "off"
        if auth.enabled(settings) or self.client_certs:
            if self.client.signer is None:
                raise auth.JwksError(
                    "verifying callers needs a key to attest their identity to the "
                    "gateway: set attest_key_id and attest_private_key_file"
                )
        if auth.enabled(settings):
            self.tokens = TokenVerifier(settings)

    # --- endpoints -------------------------------------------------------------------------

    async def run_agent(self, request: Request) -> Response:
        agent = request.path_params["agent"]
        identity: Identity | None = None
        if self.tokens is not None or self.client_certs:
            try:
                identity = await self._caller(request)
            except Unauthorized as exc:
                response = self._answer(
                    NO_VERDICT, 401, {"error": "unauthorized", "detail": exc.detail}
                )
                response.headers["WWW-Authenticate"] = 'Bearer error="invalid_token"'
                return response
        try:
            async with asyncio.timeout(self.settings.edge_body_timeout_s):
                body = await _read_body(request, self.settings.edge_max_body_bytes)
        except TimeoutError:
            self.metrics.connections_closed.labels(BODY_TIMEOUT).inc()
            response = self._answer(
                NO_VERDICT,
                408,
                {
                    "error": "request_timeout",
                    "detail": f"the body did not arrive within "
                    f"{self.settings.edge_body_timeout_s:g} s",
                },
            )
            response.headers["Connection"] = "close"
            return response
        except _TooLarge:
            record = _pre_publish_rejection(
                agent,
                None,
                Reason.INPUT_TOO_LARGE,
                f"the body is over {self.settings.edge_max_body_bytes} bytes",
                "",
            )
            return self._answer(NO_VERDICT, 413, record)
        try:
            run_input = jsonio.loads(body)
        except (jsonio.JSONDecodeError, jsonio.TooDeep) as exc:
            record = _pre_publish_rejection(
                agent, None, Reason.MALFORMED_INPUT, f"the body is not JSON: {exc}", ""
            )
            return self._answer(Verdict.REJECT, 422, record)
        problem = _keys_problem(run_input)
        if problem is not None:
            detail, path = problem
            record = _pre_publish_rejection(agent, run_input, Reason.MALFORMED_INPUT, detail, path)
            return self._answer(Verdict.REJECT, 422, record)
        thread_id, run_id = run_input["threadId"], run_input["runId"]
        if self.metrics.streams >= self.settings.edge_max_streams:
            return self._answer(
                NO_VERDICT,
                503,
                {"error": "busy", "detail": "too many open event streams; retry later"},
            )
        started = time.monotonic()
        try:
            reply, watch = await self.client.open_run(
                agent,
                thread_id,
                run_id,
                body,
                self.settings.edge_verdict_timeout_s,
                identity=identity,
            )
        except UnknownAgent as exc:
            return self._answer(NO_VERDICT, 404, {"error": "unknown_agent", "detail": str(exc)})
        except KafkaError as exc:
            log.warning("publishing failed", extra={"agent": agent, "error": repr(exc)})
            return self._answer(
                NO_VERDICT,
                503,
                {"error": "kafka_unavailable", "detail": f"the request was not published: {exc!r}"},
            )
        except ReplyTimeout as exc:
            return self._answer(
                NO_VERDICT,
                504,
                {
                    "error": "verdict_timeout",
                    "detail": f"the gateway's verdict did not arrive within {exc.timeout:g} s. "
                    "The request was published and is still decided exactly once: a retry "
                    "with the same runId is answered as a duplicate if it was forwarded",
                    "correlationId": exc.correlation_id,
                    "threadId": thread_id,
                    "runId": run_id,
                },
            )
        self.metrics.verdict_seconds.observe(time.monotonic() - started)
        if isinstance(reply, RejectReply):
            return self._answer(Verdict.REJECT, 422, _record(reply))
        if isinstance(reply, DuplicateReply):
            return self._answer(Verdict.DUPLICATE, 409, _record(reply))
        assert isinstance(reply, ForwardReply) and watch is not None
        self.metrics.requests.labels(str(Verdict.FORWARD), "200").inc()
        tap = await self.client.tap(agent)
        s = self.settings
        return EventSourceResponse(
            run_frames(tap, watch, s.edge_run_start_timeout_s, s.edge_run_timeout_s, self.metrics),
            ping=s.edge_keepalive_s,
            sep="\n",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )

    async def _caller(self, request: Request) -> Identity:
        """Who is calling: a bearer token's identity when one is given (or when no
        client certificate came), else the verified client certificate's."""
        authorization = request.headers.get("authorization")
        peer = request.scope.get("state", {}).get(PEER_CERT) if self.client_certs else None
        if self.tokens is not None and (authorization or peer is None):
            return await self.tokens.identity(authorization)
        if peer is None:
            raise Unauthorized("no client certificate (and no bearer token)")
        return auth.cert_identity(peer)

    def _answer(self, verdict: str, status: int, body: dict[str, Any]) -> Response:
        self.metrics.requests.labels(str(verdict), str(status)).inc()
        return Response(jsonio.dumps(body), status_code=status, media_type="application/json")

    async def healthz(self, request: Request) -> Response:
        return JSONResponse({"status": "alive"})

    async def readyz(self, request: Request) -> Response:
        broker_ok, broker = self.broker.state()
        ready = self.client.ready and broker_ok
        return JSONResponse({"ready": ready, "broker": broker}, status_code=200 if ready else 503)

    async def metrics_endpoint(self, request: Request) -> Response:
        return Response(generate_latest(self.registry), media_type=CONTENT_TYPE_LATEST)

    # --- the application -------------------------------------------------------------------

    def app(self) -> Starlette:
        @contextlib.asynccontextmanager
        async def lifespan(_app: Starlette) -> AsyncIterator[None]:
            if self.tokens is not None:
                await self.tokens.start()
            await self.client.start()
            self.broker.start()
            log.info("edge ready", extra={"reply_topic": self.settings.edge_reply_topic})
            try:
                yield
            finally:
                await self.broker.stop()
                await self.client.stop()

        middleware = []
        if self.settings.edge_cors_origins:
            middleware.append(
                Middleware(
                    CORSMiddleware,
                    allow_origins=self.settings.edge_cors_origins,
                    allow_methods=["GET", "POST"],
                    allow_headers=["*"],
                )
            )
        return Starlette(
            routes=[
                Route("/agents/{agent}", self.run_agent, methods=["POST"]),
                Route("/healthz", self.healthz, methods=["GET"]),
                Route("/readyz", self.readyz, methods=["GET"]),
                Route("/metrics", self.metrics_endpoint, methods=["GET"]),
            ],
            middleware=middleware,
            lifespan=lifespan,
        )


async def _read_body(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise _TooLarge
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise _TooLarge
        chunks.append(chunk)
    return b"".join(chunks)


def _keys_problem(run_input: Any) -> tuple[str, str] | None:
    """What keeps an input from being published (the record key is its threadId)."""
    if not isinstance(run_input, dict):
        return "a RunAgentInput is a JSON object", ""
    for name in ("threadId", "runId"):
        if not isinstance(run_input.get(name), str):
            return f"{name} must be a string", f"/{name}"
    return None


def _pre_publish_rejection(
    agent: str, run_input: Any, code: Reason, detail: str, path: str
) -> dict[str, Any]:
    """A rejection record, shaped as the gateway's, for input the edge cannot publish."""
    reason: dict[str, Any] = {"code": str(code), "detail": detail}
    if path:
        reason["path"] = path
    known = run_input if isinstance(run_input, dict) else {}
    thread_id, run_id = known.get("threadId"), known.get("runId")
    return {
        "verdict": str(Verdict.REJECT),
        "agent": agent,
        "threadId": thread_id if isinstance(thread_id, str) else None,
        "runId": run_id if isinstance(run_id, str) else None,
        "correlationId": None,
        "reasons": [reason],
        "warnings": [],
        "input": run_input,
        "at": datetime.now(UTC).isoformat(timespec="milliseconds"),
        "source": None,
    }


def _record(reply: RejectReply | DuplicateReply) -> dict[str, Any]:
    """The reply record as the gateway wrote it (members it had, no defaults added)."""
    return reply.model_dump(mode="json", by_alias=True, exclude_unset=True)
