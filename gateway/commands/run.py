"""`agui-gateway run`: the gateway with its HTTP endpoints, until SIGTERM/SIGINT.

Everything it writes to stderr is a JSON log record, its fatal errors included.
"""

from __future__ import annotations

import asyncio
import importlib

from gateway.commands import collector
from gateway.commands.lifecycle import process_registry, run_until_stopped, serving
from gateway.http import HttpServer
from gateway.kafka.runner import Gateway
from gateway.kafka.wire import clients
from gateway.observe import logs
from gateway.observe.metrics import Metrics
from gateway.settings import Settings


async def serve(settings: Settings, stop: asyncio.Event | None = None) -> None:
    stop = stop or asyncio.Event()
    registry = process_registry()
    await clients.preflight(settings)  # a refused password or certificate: exit 2, no retries
    gateway = Gateway(settings, Metrics(registry, settings.metrics_agent_detail))
    inbox = None
    if settings.inbox_enabled:
        # imported only when on (off by default): its JWT verification, HTTP client and
        # page are a quarter of the modules the command would load
        from gateway.inbox.service import InboxService

        inbox = InboxService(settings, registry)
    http = HttpServer(
        settings.http_host,
        settings.http_port,
        registry,
        gateway.ready,
        inbox.routes if inbox is not None else (),
    )
    if inbox is None:
        async with serving(http, stop, settings.shutdown_timeout_s):
            await gateway.run(stop)
        return
    try:
        async with serving(http, stop, settings.shutdown_timeout_s):
            # the inbox's reader beside the gateway: it never stops the gateway (a failed
            # reader starts again on its own); it stops with it
            reading = asyncio.create_task(inbox.run(stop), name="inbox")
            try:
                await gateway.run(stop)
            finally:
                stop.set()
                await asyncio.gather(reading, return_exceptions=True)
    finally:
        await inbox.aclose()  # the page's sender, once no request can use it


def main(settings: Settings) -> int:
    logs.configure(settings.log_level)
    if settings.inbox_enabled:  # imported before the collector freezes what start-up built
        importlib.import_module("gateway.inbox.service")
    collector.configure()
    return run_until_stopped("run", settings, serve(settings))
