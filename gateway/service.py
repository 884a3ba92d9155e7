"""`agui-gateway run`: the gateway with its HTTP endpoints, until SIGTERM/SIGINT.

Everything it writes to stderr is a JSON log record, its fatal errors included."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import AsyncIterator, Coroutine
from typing import Any

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
    gateway = Gateway(settings, Metrics(registry, settings.metrics_agent_detail))
    http = HttpServer(settings.http_host, settings.http_port, registry, gateway.ready)
    async with serving(http, stop):
        await gateway.run(stop)


@contextlib.asynccontextmanager
async def serving(http: HttpServer, stop: asyncio.Event) -> AsyncIterator[None]:
    """SIGTERM/SIGINT set `stop`; the HTTP endpoints listen while the body runs."""
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    try:
        await http.start()
    except OSError as exc:
        raise HttpBindError(
            f"cannot listen for HTTP on {http.host}:{http.port}: {exc.strerror or exc}"
        ) from exc
    try:
        yield
    finally:
        await http.stop()


def main(settings: Settings) -> int:
    logs.configure(settings.log_level)
    return run_until_stopped("run", settings, serve(settings))


def run_until_stopped(command: str, settings: Settings, main: Coroutine[Any, Any, None]) -> int:
    """Run a long-lived command's main coroutine; its fatal errors as JSON log records.

    Exit 2: the HTTP address cannot be bound, Kafka refuses the connection's security
    or cannot be reached at start; exit 1: an unexpected failure (with its traceback).
    """
    try:
        asyncio.run(main)
    except KeyboardInterrupt:
        pass
    except HttpBindError as exc:
        log.error(f"agui-gateway {command}: {exc}", extra={"error": repr(exc.__cause__)})
        return 2
    except clients.SecurityFailure as exc:
        log.error(f"agui-gateway {command}: {exc}")
        return 2
    except (KafkaError, OSError) as exc:
        log.error(
            f"agui-gateway {command}: cannot run against Kafka at "
            f"{settings.bootstrap_servers}: {exc!r}",
            extra={"error": repr(exc)},
        )
        return 2
    except Exception:
        log.exception(f"agui-gateway {command}: failed")
        return 1
    return 0


class HttpBindError(OSError):
    """The HTTP endpoints' address cannot be bound."""
