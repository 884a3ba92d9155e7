"""Structured (JSON Lines) logs on stderr, and nothing else on stderr.

`configure` routes every way Python writes to stderr through the JSON handler:
log records, warnings (`logging.captureWarnings`), exceptions nobody can raise
(`sys.unraisablehook`, e.g. a library's `__del__`), uncaught exceptions in the
main thread and in threads. aiokafka's records pass through `KafkaLogFilter`,
which collapses connection-error storms and downgrades expected retries.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from types import TracebackType
from typing import Any

import orjson

_STANDARD = set(vars(logging.makeLogRecord({}))) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                out[key] = value
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return orjson.dumps(out, default=str).decode()


# What aiokafka logs, again and again, while a broker cannot be reached.
_CONNECTION_PREFIXES = (
    "Unable connect to",
    "Unable to update metadata",
    "Unable to request metadata",
    "Cannot send",
    "Could not send",
    "Failed fetch messages",
    "Heartbeat send request failed",
    "Got error produce response: KafkaConnectionError",
)
_CONNECTION_ERRORS = ("KafkaConnectionError", "NodeNotReadyError")


class KafkaLogFilter(logging.Filter):
    """aiokafka's log records, made readable for an operator.

    - Connection errors: the first is logged ("kafka connection lost"), repeats are
      counted, a summary is logged every `summary_s` while they go on, and one line
      when none came for `quiet_s` ("kafka connection back"). `tick()` (called by the
      gateway's loop) notices the quiet when no record arrives at all.
    - `NOT_ENOUGH_REPLICAS` produce retries (expected with KIP-890 brokers): DEBUG,
      and counted through `on_retry`.
    - `CoordinatorNotAvailable` while looking up the group coordinator (expected at
      start): INFO.
    - While the connection is lost, every other warning or error (the gateway's own
      per-pair retries, aiokafka's coordinator lines) is a repeat of a few messages,
      possibly once per pair: each message (its template, per logger) is logged
      `repeats` times per `summary_s`, the rest counted, and the summary line names
      what was suppressed (`suppressed_messages`). Lines stay bounded whatever the
      number of pairs; nothing changes while the connection is up.
    """

    def __init__(
        self,
        summary_s: float = 30.0,
        quiet_s: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
        repeats: int = 3,
    ) -> None:
        super().__init__()
        self.summary_s = summary_s
        self.quiet_s = quiet_s
        self.repeats = repeats
        self.clock = clock
        self.on_retry: Callable[[str], None] | None = None
        self.emit: Callable[[logging.LogRecord], object] | None = None  # for tick()'s lines
        self.lost_since: float | None = None
        self._last_error = 0.0
        self._last_summary = 0.0
        self._suppressed = 0  # since the last line
        self._total = 0  # since lost
        self._repeated: dict[tuple[str, str], int] = {}  # lines per message this window
        self._window = 0.0
        self._repeats_suppressed: dict[str, int] = {}  # message: lines left out since lost

    def filter(self, record: logging.LogRecord) -> bool:
        if not record.name.startswith("aiokafka"):
            return self._repeat(record)
        message = record.getMessage()
        if "NotEnoughReplicas" in message or "NOT_ENOUGH_REPLICAS" in message:
            if self.on_retry is not None:
                self.on_retry("NOT_ENOUGH_REPLICAS")
            return _relevel(record, logging.DEBUG)
        if "CoordinatorNotAvailable" in message and "Coordinator" in message.split(":", 1)[0]:
            return _relevel(record, logging.INFO)
        if record.levelno >= logging.WARNING and (
            message.startswith(_CONNECTION_PREFIXES)
            or any(name in message for name in _CONNECTION_ERRORS)
        ):
            return self._connection_error(record, message)
        return self._repeat(record)

    def _repeat(self, record: logging.LogRecord) -> bool:
        """While the connection is lost: a warning or error, unless its message repeats."""
        if self.lost_since is None or record.levelno < logging.WARNING:
            return True
        now = self.clock()
        if now - self._window >= self.summary_s:
            self._repeated.clear()  # a new window
            self._window = now
        template = str(record.msg)
        key = (record.name, template)
        seen = self._repeated.get(key, 0)
        self._repeated[key] = seen + 1
        if seen < self.repeats:
            return True
        if template in self._repeats_suppressed or len(self._repeats_suppressed) < 20:
            self._repeats_suppressed[template] = self._repeats_suppressed.get(template, 0) + 1
        return False

    def _connection_error(self, record: logging.LogRecord, message: str) -> bool:
        now = self.clock()
        self._last_error = now
        self._total += 1
        if self.lost_since is None:
            self.lost_since = self._last_summary = now
            self._suppressed = 0
            record.msg, record.args = "kafka connection lost: %s", (message,)
            record.levelno, record.levelname = logging.ERROR, "ERROR"
            return True
        if now - self._last_summary >= self.summary_s:
            _summary(record, "kafka connection still lost", now - self.lost_since)
            record.suppressed = self._suppressed
            record.last_error = message
            if self._repeats_suppressed:
                record.suppressed_messages = self._repeats_suppressed
                self._repeats_suppressed = {}
            self._last_summary = now
            self._suppressed = 0
            return True
        self._suppressed += 1
        return False

    def tick(self) -> None:
        """Log "kafka connection back" once no connection error came for `quiet_s`."""
        if self.lost_since is None or self.clock() - self._last_error < self.quiet_s:
            return
        record = logging.getLogger("gateway.kafka").makeRecord(
            "gateway.kafka",
            logging.INFO,
            __file__,
            0,
            "kafka connection back: no connection error for %.0f s",
            (self.quiet_s,),
            None,
        )
        record.lost_s = round(self._last_error - self.lost_since, 3)
        record.errors = self._total
        if self._repeats_suppressed:
            record.suppressed_messages = self._repeats_suppressed
        self._repeats_suppressed = {}
        self._repeated.clear()
        self.lost_since = None
        self._total = self._suppressed = 0
        if self.emit is not None and logging.getLogger().isEnabledFor(logging.INFO):
            self.emit(record)


def _relevel(record: logging.LogRecord, level: int) -> bool:
    record.levelno, record.levelname = level, logging.getLevelName(level)
    return logging.getLogger().isEnabledFor(level)


def _summary(record: logging.LogRecord, text: str, lost_s: float) -> None:
    record.msg, record.args = f"{text} for %.0f s", (lost_s,)
    record.levelno, record.levelname = logging.ERROR, "ERROR"


KAFKA_LOGS = KafkaLogFilter()


def _unraisable(unraisable: Any) -> None:
    """An exception nobody can catch (e.g. in a library's `__del__`): a JSON record."""
    exc = unraisable.exc_value
    logging.getLogger("gateway.unraisable").warning(
        f"{unraisable.err_msg or 'Exception ignored'}: {unraisable.object!r:.200}",
        exc_info=(unraisable.exc_type, exc, unraisable.exc_traceback) if exc else None,
    )


def _uncaught(exc_type: type[BaseException], exc: BaseException, tb: TracebackType | None) -> None:
    logging.getLogger("gateway").critical("uncaught exception", exc_info=(exc_type, exc, tb))


def _uncaught_in_thread(args: threading.ExceptHookArgs) -> None:
    if args.exc_type is SystemExit or args.exc_value is None:
        return
    logging.getLogger("gateway").error(
        f"uncaught exception in thread {args.thread.name if args.thread else '?'}",
        exc_info=(args.exc_type, args.exc_value, args.exc_traceback),
    )


def configure(level: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    handler.addFilter(KAFKA_LOGS)
    KAFKA_LOGS.emit = handler.handle
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    logging.getLogger("aiokafka").setLevel(max(logging.getLevelName(level), logging.WARNING))
    logging.captureWarnings(True)
    sys.unraisablehook = _unraisable
    sys.excepthook = _uncaught
    threading.excepthook = _uncaught_in_thread
