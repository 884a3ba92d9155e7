"""`agui-gateway run`: the gateway with its HTTP endpoints, until SIGTERM/SIGINT."""

from __future__ import annotations

import asyncio
import logging
import signal
import sys

from aiokafka.errors import KafkaError
from prometheus_client import CollectorRegistry, PlatformCollector, ProcessCollector

from gateway.http import HttpServer
from gateway.kafka import clients
from gateway.kafka.runner import Gateway
from gateway.observe import logs
from gateway.observe.metrics import Metrics
from gateway.settings import Settings

log = logging.getLogger("gateway.service")


async def serve(settings: Settings, stop: asyncio.Event | None = None) -> None:
    stop = stop or asyncio.Event()
    registry = CollectorRegistry()
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    await clients.preflight(settings)  # a refused password or certificate: exit 2, no retries
    gateway = Gateway(settings, Metrics(registry))
    http = HttpServer(settings.http_host, settings.http_port, registry, gateway.ready)
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    await http.start()
    try:
        await gateway.run(stop)
    finally:
        await http.stop()


def main(settings: Settings) -> int:
    logs.configure(settings.log_level)
    try:
        asyncio.run(serve(settings))
    except KeyboardInterrupt:
        pass
    except clients.SecurityFailure as exc:
        print(f"agui-gateway run: {exc}", file=sys.stderr)
        return 2
    except (KafkaError, OSError) as exc:
        log.error("gateway stopped: %s", exc, extra={"error": repr(exc)})
        print(
            f"agui-gateway run: cannot run against Kafka at {settings.bootstrap_servers} "
            f"(or bind {settings.http_host}:{settings.http_port}): {exc!r}",
            file=sys.stderr,
        )
        return 2
    return 0
