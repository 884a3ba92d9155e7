"""`agui-gateway run`: the gateway with its HTTP endpoints, until SIGTERM/SIGINT.

Everything it writes to stderr is a JSON log record, its fatal errors included."""

from __future__ import annotations

import asyncio
import logging
import signal

from aiokafka.errors import KafkaError
from prometheus_client import CollectorRegistry, PlatformCollector, ProcessCollector

from gateway.http import HttpServer
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
    gateway = Gateway(settings, Metrics(registry))
    http = HttpServer(settings.http_host, settings.http_port, registry, gateway.ready)
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    try:
        await http.start()
    except OSError as exc:
        raise HttpBindError(
            f"cannot listen for HTTP on {settings.http_host}:{settings.http_port}: "
            f"{exc.strerror or exc}"
        ) from exc
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
    except HttpBindError as exc:
        log.error(f"agui-gateway run: {exc}", extra={"error": repr(exc.__cause__)})
        return 2
    except (KafkaError, OSError) as exc:
        log.error(
            f"agui-gateway run: cannot run against Kafka at {settings.bootstrap_servers}: {exc!r}",
            extra={"error": repr(exc)},
        )
        return 2
    except Exception:
        log.exception("agui-gateway run: the gateway failed")
        return 1
    return 0


class HttpBindError(OSError):
    """The HTTP endpoints' address cannot be bound."""
