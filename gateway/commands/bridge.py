"""`agui-gateway bridge`: the bridge with its HTTP endpoints, until SIGTERM/SIGINT."""

from __future__ import annotations

import asyncio
import logging
import sys

from prometheus_client import CollectorRegistry

from gateway.bridge.metrics import BridgeMetrics
from gateway.bridge.service import Bridge
from gateway.commands.lifecycle import process_registry, run_until_stopped, serving
from gateway.http import HttpServer
from gateway.kafka.wire import clients
from gateway.observe import logs
from gateway.settings import Settings

log = logging.getLogger("gateway.bridge.main")  # the name operators filter on, kept


async def serve(
    settings: Settings, stop: asyncio.Event | None = None, registry: CollectorRegistry | None = None
) -> None:
    stop = stop or asyncio.Event()
    registry = process_registry(registry)
    await clients.preflight(settings)  # a refused password or certificate: exit 2, no retries
    bridge = Bridge(settings, BridgeMetrics(registry))
    http = HttpServer(settings.http_host, settings.bridge_http_port, registry, bridge.ready)
    async with serving(http, stop, settings.shutdown_timeout_s):
        await bridge.run(stop)


def main(settings: Settings) -> int:
    if not settings.bridge_agents and not (
        settings.bridge_agent_pattern and settings.bridge_default
    ):
        print(
            "agui-gateway bridge: no agent to serve: set AGUI_GATEWAY_BRIDGE_AGENTS "
            "(or AGUI_GATEWAY_BRIDGE_AGENT_PATTERN with AGUI_GATEWAY_BRIDGE_DEFAULT)",
            file=sys.stderr,
        )
        return 2
    logs.configure(settings.log_level)
    logging.getLogger("httpx").setLevel(
        logging.WARNING
    )  # one line per agent call: the bridge logs runs
    log.info("bridge starting", extra={"settings": settings.masked()})
    return run_until_stopped("bridge", settings, serve(settings))
