"""Running `agui-gateway edge` as a real subprocess, and reading its SSE answers."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import ssl
import time
from pathlib import Path
from typing import Any

import httpx
import orjson

from tests.integration.support import GATEWAY_BIN, REPO_ROOT, Namespace, free_port


class EdgeProcess:
    """One `agui-gateway edge` subprocess on its own port, logging to a file."""

    def __init__(
        self,
        ns: Namespace,
        log_dir: Path,
        name: str = "edge",
        *,
        tls_ca: Path | None = None,
        **settings: Any,
    ) -> None:
        self.ns = ns
        self.tls_ca = tls_ca  # over TLS: the CA its certificate is verified against
        self.port = free_port()
        self.log_path = log_dir / f"{name}.log"
        self.settings = {
            "edge_reply_topic": f"{ns.prefix}.edge-replies",
            "edge_reply_partitions": 1,
            **settings,
        }
        self.proc: asyncio.subprocess.Process | None = None

    @property
    def url(self) -> str:
        scheme = "https" if self.tls_ca is not None else "http"
        return f"{scheme}://127.0.0.1:{self.port}"

    async def start(self, ready_timeout: float = 60) -> EdgeProcess:
        env = self.ns.env(edge_port=self.port, **self.settings)
        log = self.log_path.open("ab")
        self.proc = await asyncio.create_subprocess_exec(
            str(GATEWAY_BIN), "edge", env=env, stdout=log, stderr=log, cwd=str(REPO_ROOT)
        )
        log.close()
        deadline = time.monotonic() + ready_timeout
        verify: Any = True
        if self.tls_ca is not None:
            verify = ssl.create_default_context(cafile=str(self.tls_ca))
        async with httpx.AsyncClient(verify=verify) as http:
            while time.monotonic() < deadline:
                if self.proc.returncode is not None:
                    raise AssertionError(f"edge exited {self.proc.returncode}:\n{self.log_tail()}")
                with contextlib.suppress(httpx.HTTPError):
                    if (await http.get(self.url + "/readyz")).status_code == 200:
                        return self
                await asyncio.sleep(0.2)
        raise AssertionError(f"edge not ready in {ready_timeout}s:\n{self.log_tail()}")

    def log_tail(self, lines: int = 60) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    async def stop(self, timeout: float = 30) -> int:
        if self.proc is None or self.proc.returncode is not None:
            return self.proc.returncode if self.proc else 0
        self.proc.send_signal(signal.SIGTERM)
        try:
            return await asyncio.wait_for(self.proc.wait(), timeout=timeout)
        except TimeoutError:
            self.proc.kill()
            await self.proc.wait()
            raise AssertionError(f"edge did not stop:\n{self.log_tail()}") from None


def sse_events(raw: bytes) -> tuple[list[dict[str, Any]], list[bytes]]:
    """(events, comments) of an SSE body framed with LF only; fails on CR."""
    assert b"\r" not in raw, "the stream must be framed with LF only"
    events: list[dict[str, Any]] = []
    comments: list[bytes] = []
    for block in raw.split(b"\n\n"):
        data = []
        for line in block.split(b"\n"):
            if line.startswith(b"data:"):
                data.append(line[5:].lstrip(b" "))
            elif line.startswith(b":"):
                comments.append(line)
        if data:
            events.append(orjson.loads(b"\n".join(data)))
    return events, comments


async def post_run(http: httpx.AsyncClient, url: str, body: Any) -> tuple[int, str, bytes]:
    """POST a run input; (status, content type, whole body once the response ends)."""
    content = body if isinstance(body, bytes) else orjson.dumps(body)
    async with http.stream(
        "POST",
        url,
        content=content,
        headers={"Content-Type": "application/json", "Accept": "text/event-stream"},
    ) as response:
        raw = b"".join([chunk async for chunk in response.aiter_raw()])
        return response.status_code, response.headers.get("content-type", ""), raw
