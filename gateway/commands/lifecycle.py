"""The lifecycle of the long-lived commands (`run`, `bridge`): HTTP endpoints while
the work runs, signals, fatal errors as JSON log records, a bounded stop.

A stop is bounded: `shutdown_timeout_s` after the signal, whatever has not
finished (a commit waiting for a broker that is gone, a close that hangs) is
cancelled and the process exits `EXIT_SHUTDOWN_TIMEOUT`; should the cancelled
work still hang, it exits anyway `SHUTDOWN_GRACE_S` later. Nothing is lost:
a transaction that did not commit is aborted by Kafka and its records are
read again by the partition's next owner."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
import threading
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any, TypeVar

from aiokafka.errors import KafkaError
from prometheus_client import CollectorRegistry, PlatformCollector, ProcessCollector

from gateway.http import HttpServer
from gateway.kafka.wire import clients
from gateway.settings import Settings

log = logging.getLogger("gateway.service")  # the name operators filter on, kept

T = TypeVar("T")

EXIT_SHUTDOWN_TIMEOUT = 3
SHUTDOWN_GRACE_S = 3.0  # after the bound: for the cancelled work to unwind, then exit anyway


def process_registry(registry: CollectorRegistry | None = None) -> CollectorRegistry:
    """The registry a command's /metrics serves: the one given (tests pass their own), or a
    new one holding the process's and the platform's collectors."""
    if registry is None:
        registry = CollectorRegistry()
        ProcessCollector(registry=registry)
        PlatformCollector(registry=registry)
    return registry


@contextlib.asynccontextmanager
async def serving(
    http: HttpServer, stop: asyncio.Event, shutdown_timeout_s: float | None = None
) -> AsyncIterator[None]:
    """SIGTERM/SIGINT set `stop`; the HTTP endpoints listen while the body runs.

    With `shutdown_timeout_s`, the signal also starts the stop's bound (`ShutdownBound`).
    """
    loop = asyncio.get_running_loop()
    bound = None
    if shutdown_timeout_s is not None:
        bound = ShutdownBound(shutdown_timeout_s, asyncio.current_task())
        _bounds.append(bound)

    def on_signal() -> None:
        stop.set()
        if bound is not None:
            bound.arm()

    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, on_signal)
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


def run_until_stopped(command: str, settings: Settings, main: Coroutine[Any, Any, None]) -> int:
    """Run a long-lived command's main coroutine; its fatal errors as JSON log records.

    Exit 2: the HTTP address cannot be bound, Kafka refuses the connection's security
    or cannot be reached at start; exit 1: an unexpected failure (with its traceback);
    exit 3 (`EXIT_SHUTDOWN_TIMEOUT`): the stop did not finish within its bound, whatever
    the cancelled work raised then.
    """
    try:
        code = _run(command, settings, main)
        return EXIT_SHUTDOWN_TIMEOUT if any(b.expired for b in _bounds) else code
    finally:
        while _bounds:
            _bounds.pop().disarm()


def run_loop(settings: Settings, main: Coroutine[Any, Any, T]) -> T:
    """Run `main` to its end on the event loop the settings name (`event_loop`)."""
    with asyncio.Runner(loop_factory=_loop_factory(settings.event_loop)) as runner:
        return runner.run(main)


def _loop_factory(name: str) -> Callable[[], asyncio.AbstractEventLoop] | None:
    if name != "uvloop":
        return None
    try:
        import uvloop
    except ImportError as exc:
        log.warning(f"event_loop uvloop cannot be imported ({exc}); Python's own loop instead")
        return None
    return uvloop.new_event_loop


def _run(command: str, settings: Settings, main: Coroutine[Any, Any, None]) -> int:
    try:
        run_loop(settings, main)
    except KeyboardInterrupt:
        pass
    except (Exception, asyncio.CancelledError) as exc:
        if any(b.expired for b in _bounds):
            return EXIT_SHUTDOWN_TIMEOUT  # what the cancelled work raised: the line is logged
        return _fatal(command, settings, exc)
    return 0


def _fatal(command: str, settings: Settings, exc: BaseException) -> int:
    """Log why the command ended; its exit status."""
    if isinstance(exc, HttpBindError):
        log.error(f"agui-gateway {command}: {exc}", extra={"error": repr(exc.__cause__)})
        return 2
    if isinstance(exc, clients.SecurityFailure):
        log.error(f"agui-gateway {command}: {exc}")
        return 2
    if isinstance(exc, (KafkaError, OSError)):
        log.error(
            f"agui-gateway {command}: cannot run against Kafka at "
            f"{settings.bootstrap_servers}: {exc!r}",
            extra={"error": repr(exc)},
        )
        return 2
    log.error(f"agui-gateway {command}: failed", exc_info=exc)
    return 1


class HttpBindError(OSError):
    """The HTTP endpoints' address cannot be bound."""


class ShutdownBound:
    """The bound on a stop: armed by the signal, it cancels the work still running at
    `timeout_s` (one log line) and ends the process `SHUTDOWN_GRACE_S` later if the
    cancelled work hangs too.

    A transaction that did not commit is aborted by Kafka (when the partition's next
    owner initialises its producer, or after `transaction_timeout_ms`): its records
    are read again from the last commit, so nothing is lost by leaving.
    """

    def __init__(self, timeout_s: float, task: asyncio.Task[Any] | None) -> None:
        self.timeout_s = timeout_s
        self.expired = False
        self._task = task  # what the expiry cancels: the command's main task
        self._timer: asyncio.TimerHandle | None = None
        self._backstop: threading.Timer | None = None

    def arm(self) -> None:
        """Start counting (once): called from the signal handler, on the loop."""
        if self._timer is not None or self.expired:
            return
        self._timer = asyncio.get_running_loop().call_later(self.timeout_s, self._expire)

    def _expire(self) -> None:
        self.expired = True
        log.error(
            f"shutdown did not finish within shutdown_timeout_s ({self.timeout_s:g} s); "
            f"exiting {EXIT_SHUTDOWN_TIMEOUT} without committing: Kafka aborts what did not "
            "commit and the next owner reads it again",
            extra={"waiting": waiting_on(asyncio.all_tasks())},
        )
        self._backstop = threading.Timer(SHUTDOWN_GRACE_S, _exit_now)
        self._backstop.daemon = True
        self._backstop.start()
        if self._task is not None:
            self._task.cancel()

    def disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        if self._backstop is not None:
            self._backstop.cancel()


_bounds: list[ShutdownBound] = []

WAITING_TASKS = 20  # tasks named in the line of a stop past its bound, at most
WAITING_DEPTH = 12  # awaits followed into each, at most


def waiting_on(tasks: set[asyncio.Task[Any]]) -> list[str]:
    """Where each unfinished task waits: its name and the chain of coroutines it awaits
    through (`Runner.run > Assignment.stop > ...`, innermost last, with its line).
    Names and code places only: nothing of the data the tasks hold."""
    found = []
    unfinished = sorted((t for t in tasks if not t.done()), key=lambda t: t.get_name())
    for task in unfinished[:WAITING_TASKS]:
        chain: list[str] = []
        where = ""
        awaited: Any = task.get_coro()
        while awaited is not None and len(chain) < WAITING_DEPTH:
            frame = getattr(awaited, "cr_frame", None) or getattr(awaited, "gi_frame", None)
            if frame is None:
                break
            chain.append(frame.f_code.co_qualname)
            where = f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno}"
            awaited = getattr(awaited, "cr_await", None) or getattr(awaited, "gi_yieldfrom", None)
        found.append(f"{task.get_name()}: {' > '.join(chain)} ({where})")
    return found


def _exit_now() -> None:
    """The cancelled work hangs too: leave now (the line saying why is already logged)."""
    for handler in logging.getLogger().handlers:
        with contextlib.suppress(Exception):
            handler.flush()
    with contextlib.suppress(Exception):
        sys.stderr.flush()
    os._exit(EXIT_SHUTDOWN_TIMEOUT)
