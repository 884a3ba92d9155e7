"""`agui-gateway bridge`: the bridge with its HTTP endpoints, until SIGTERM/SIGINT."""

from __future__ import annotations

import asyncio
import logging
import signal
import sys

from aiokafka.errors import KafkaError
from prometheus_client import CollectorRegistry, PlatformCollector, ProcessCollector

from gateway.bridge.metrics import BridgeMetrics
from gateway.bridge.service import Bridge
from gateway.http import HttpServer
from gateway.observe import logs
from gateway.settings import Settings

log = logging.getLogger("gateway.bridge.main")


async def serve(
    settings: Settings, stop: asyncio.Event | None = None, registry: CollectorRegistry | None = None
) -> None:
    stop = stop or asyncio.Event()
    if registry is None:
        registry = CollectorRegistry()
        ProcessCollector(registry=registry)
        PlatformCollector(registry=registry)
    bridge = Bridge(settings, BridgeMetrics(registry))
    http = HttpServer(settings.http_host, settings.bridge_http_port, registry, bridge.ready)
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    await http.start()
    try:
        await bridge.run(stop)
    finally:
        await http.stop()


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
    try:
        asyncio.run(serve(settings))
    except KeyboardInterrupt:
        pass
    except (KafkaError, OSError) as exc:
        log.error("bridge stopped: %s", exc, extra={"error": repr(exc)})
        print(
            f"agui-gateway bridge: cannot run against Kafka at {settings.bootstrap_servers} "
            f"(or bind {settings.http_host}:{settings.bridge_http_port}): {exc!r}",
            file=sys.stderr,
        )
        return 2
    return 0
