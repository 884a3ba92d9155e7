"""/healthz, /readyz and /metrics: a Starlette app served by uvicorn on the gateway's loop.

/metrics renders in a worker thread (Starlette's thread pool), never on the event
loop, so a scrape does not hold up the rounds however many series there are. The
registry's collectors are therefore called from that thread: a collector must read
an immutable snapshot (or values the loop replaces whole), never iterate structures
the loop mutates. The prometheus_client metrics themselves are thread-safe.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import gzip
import logging
import socket
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import orjson
import uvicorn
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.exposition import gzip_accepted
from prometheus_client.metrics_core import Metric
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

log = logging.getLogger("gateway.http")

Readiness = Callable[[], tuple[bool, dict[str, Any]]]


def app(
    registry: CollectorRegistry, readiness: Readiness, routes: Iterable[BaseRoute] = ()
) -> Starlette:
    """The endpoints, and `routes` (the inbox's API when it is enabled). GET and HEAD only
    (Starlette answers 405 otherwise, 404 elsewhere)."""

    async def healthz(request: Request) -> Response:
        return Response(b'{"status":"alive"}\n', media_type="application/json")

    async def readyz(request: Request) -> Response:
        ok, details = readiness()
        body = orjson.dumps({"ready": ok, **details}) + b"\n"
        return Response(body, status_code=200 if ok else 503, media_type="application/json")

    async def metrics(request: Request) -> Response:
        compress = gzip_accepted(request.headers.get("accept-encoding", ""))
        body = await run_in_threadpool(render, registry, compress)
        headers = {"Content-Type": CONTENT_TYPE_LATEST, "Vary": "Accept-Encoding"}
        if compress:
            headers["Content-Encoding"] = "gzip"
        return Response(body, headers=headers)

    return Starlette(
        routes=[
            Route("/healthz", healthz, methods=["GET"]),
            Route("/readyz", readyz, methods=["GET"]),
            Route("/metrics", metrics, methods=["GET"]),
            *routes,
        ]
    )


def exposition(registry: CollectorRegistry) -> bytes:
    """The registry in Prometheus text format, without the `_created` samples.

    The text format carries a counter's or histogram's creation time as a series of
    its own (`x_created`); nothing here queries them, and they would double the
    size of every counter.
    """
    return generate_latest(_WithoutCreated(registry))


def render(registry: CollectorRegistry, compress: bool) -> bytes:
    """The /metrics body (gzip-compressed when the scraper accepts it): CPU only, no I/O."""
    body = exposition(registry)
    return gzip.compress(body, compresslevel=6) if compress else body


class _WithoutCreated:
    """The registry's families with the `_created` samples left out."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._registry = registry

    def collect(self) -> Iterable[Metric]:
        for family in self._registry.collect():
            created = family.name + "_created"
            if any(sample.name == created for sample in family.samples):
                family = copy.copy(family)
                family.samples = [s for s in family.samples if s.name != created]
            yield family


class _Server(uvicorn.Server):
    """uvicorn inside the gateway's own loop: the gateway owns SIGTERM and SIGINT."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class HttpServer:
    def __init__(
        self,
        host: str,
        port: int,
        registry: CollectorRegistry,
        readiness: Readiness,
        routes: Iterable[BaseRoute] = (),
    ):
        self.host = host
        self.port = port
        self.registry = registry
        self.readiness = readiness
        self.routes = list(routes)
        self._server: _Server | None = None
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> int:
        """Bind (an OSError when the address cannot be bound) and serve; the bound port."""
        sock = _bind(self.host, self.port)
        port = int(sock.getsockname()[1])
        config = uvicorn.Config(
            app(self.registry, self.readiness, self.routes),
            log_config=None,  # uvicorn's records go to the gateway's JSON handler
            access_log=False,
            lifespan="off",
            timeout_keep_alive=5,
        )
        server = _Server(config)
        self._server = server
        self._task = asyncio.create_task(server.serve(sockets=[sock]))
        while not server.started:
            if self._task.done():
                sock.close()
                self._task.result()  # its exception, if it failed
                raise OSError(f"the HTTP server on {self.host}:{port} stopped while starting")
            await asyncio.sleep(0.01)
        log.info("http listening", extra={"host": self.host, "port": port})
        return port

    async def stop(self) -> None:
        if self._server is None or self._task is None:
            return
        self._server.should_exit = True
        with contextlib.suppress(Exception):
            await self._task
        self._server = self._task = None


def _bind(host: str, port: int) -> socket.socket:
    family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(128)
    except BaseException:
        sock.close()
        raise
    sock.setblocking(False)
    return sock
