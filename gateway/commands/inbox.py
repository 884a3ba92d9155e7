"""`agui-gateway inbox`: the inbox's JSON API and page on their own, until SIGTERM/SIGINT.

It reads the interrupts topic into its view (`gateway.inbox`) and serves the API and
the page (`/inbox`, with its sign-in) on `inbox_port`, with /healthz, /readyz (ready once the topic was read to its end) and
/metrics beside it. Any number may run: each reads the whole topic.
"""

from __future__ import annotations

import asyncio

from prometheus_client import CollectorRegistry

from gateway.commands.lifecycle import process_registry, run_until_stopped, serving
from gateway.http import HttpServer
from gateway.inbox.service import InboxService
from gateway.kafka.wire import clients
from gateway.observe import logs
from gateway.settings import Settings


async def serve(
    settings: Settings, stop: asyncio.Event | None = None, registry: CollectorRegistry | None = None
) -> None:
    stop = stop or asyncio.Event()
    registry = process_registry(registry)
    await clients.preflight(settings)  # a refused password or certificate: exit 2, no retries
    service = InboxService(settings, registry)
    http = HttpServer(
        settings.http_host, settings.inbox_port, registry, service.ready, service.routes
    )
    try:
        async with serving(http, stop, settings.shutdown_timeout_s):
            await service.run(stop)
    finally:
        await service.aclose()  # the page's sender, once no request can use it


def main(settings: Settings) -> int:
    logs.configure(settings.log_level)
    return run_until_stopped("inbox", settings, serve(settings))
