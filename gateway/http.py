"""/healthz, /readyz and /metrics over a minimal asyncio HTTP/1.1 server."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

import orjson
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

log = logging.getLogger("gateway.http")

Readiness = Callable[[], tuple[bool, dict[str, Any]]]


class HttpServer:
    def __init__(self, host: str, port: int, registry: CollectorRegistry, readiness: Readiness):
        self.host = host
        self.port = port
        self.registry = registry
        self.readiness = readiness
        self._server: asyncio.Server | None = None

    async def start(self) -> int:
        self._server = await asyncio.start_server(self._handle, self.host, self.port)
        port = self._server.sockets[0].getsockname()[1]
        log.info("http listening", extra={"host": self.host, "port": port})
        return int(port)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=10)
            method, target = request.split(b"\r\n", 1)[0].decode("latin-1").split(" ")[:2]
            status, content_type, body = self._route(method, target.split("?", 1)[0])
            writer.write(
                f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
                + (body if method != "HEAD" else b"")
            )
            await writer.drain()
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError, ValueError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    def _route(self, method: str, path: str) -> tuple[str, str, bytes]:
        if method not in ("GET", "HEAD"):
            return "405 Method Not Allowed", "text/plain", b"method not allowed\n"
        if path == "/healthz":
            return "200 OK", "application/json", b'{"status":"alive"}\n'
        if path == "/readyz":
            ok, details = self.readiness()
            body = orjson.dumps({"ready": ok, **details}) + b"\n"
            return ("200 OK" if ok else "503 Service Unavailable"), "application/json", body
        if path == "/metrics":
            return "200 OK", CONTENT_TYPE_LATEST, generate_latest(self.registry)
        return "404 Not Found", "text/plain", b"not found\n"
