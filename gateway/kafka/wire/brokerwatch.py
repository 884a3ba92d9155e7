"""Whether the Kafka broker answers: the readiness of a service whose broker may be gone.

A client that loses its broker retries quietly forever: the consumer's fetches
return nothing, a transaction's commit waits, and the service looks busy but
idle. `BrokerWatch` asks a broker one cheap question every `interval_s` (a
metadata request naming no topic, through `clients.probe`) and calls the broker
unreachable once no answer came for `unreachable_after_s`. `/readyz` reports it
(`broker: "unreachable: no answer since ..."`), so readiness turns false within
`unreachable_after_s` plus one probe interval, and true again at the first answer.

One line is logged when the broker is found unreachable and one when it answers
again; the probes' own failures are not logged (aiokafka's records of them are
collapsed by `gateway.observe.logs`).

`back` is called at the first answer after the broker was lost: a probe refused
(a connection error, not a slow answer), or no answer for `unreachable_after_s`.
A broker that died and restarted is lost that way for at least one probe; the
runner then heals what such a restart may leave hanging (see `hanging`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

log = logging.getLogger("gateway.kafka.broker")

Probe = Callable[[], Awaitable[object]]


class BrokerWatch:
    """Probes the broker in the background; `state()` says whether it answers, and why not."""

    def __init__(
        self,
        probe: Probe,
        unreachable_after_s: float,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        back: Callable[[], None] = lambda: None,
    ) -> None:
        self.probe = probe
        self.back = back
        self.unreachable_after_s = unreachable_after_s
        # often enough that a healthy broker's last answer is never near the limit
        self.interval_s = max(0.1, min(2.0, unreachable_after_s / 5))
        # a probe that hangs counts as no answer; the next one starts after it
        self.timeout_s = max(self.interval_s, unreachable_after_s / 2)
        self.clock = clock
        self.wall_clock = wall_clock
        self._last_answer = clock()
        self._last_answer_wall = wall_clock()
        self._last_error: str | None = None
        self._reported = False  # "unreachable" logged, "reachable again" not yet
        self._lost = False  # refused or silent since the last answer: `back` is due
        self._task: asyncio.Task[None] | None = None

    # --- the answer ------------------------------------------------------------------------

    @property
    def reachable(self) -> bool:
        return self.clock() - self._last_answer < self.unreachable_after_s

    def state(self) -> tuple[bool, str]:
        """(reachable, a line for /readyz): "reachable", or since when it did not answer."""
        if self.reachable:
            return True, "reachable"
        since = datetime.fromtimestamp(self._last_answer_wall, UTC).isoformat(
            timespec="milliseconds"
        )
        silent = self.clock() - self._last_answer
        line = f"unreachable: no answer since {since} ({silent:.0f} s)"
        if self._last_error:
            line += f", last error: {self._last_error}"
        return False, line

    # --- probing ----------------------------------------------------------------------------

    async def check(self) -> bool:
        """Probe once (bounded by `timeout_s`); note the answer, or log the loss once."""
        try:
            async with asyncio.timeout(self.timeout_s):
                await self.probe()
        except asyncio.CancelledError:
            raise
        except TimeoutError:
            self._last_error = f"no answer within {self.timeout_s:g} s"
        except Exception as exc:
            self._last_error = _short(exc)
            self._lost = True
        else:
            self._answered()
            return True
        if not self.reachable and not self._reported:
            self._reported = self._lost = True
            log.error(
                "kafka broker unreachable: no answer for %.0f s; not ready until it answers",
                self.clock() - self._last_answer,
                extra={"last_error": self._last_error},
            )
        return False

    def _answered(self) -> None:
        if self._reported:
            self._reported = False
            log.info(
                "kafka broker reachable again after %.0f s",
                self.clock() - self._last_answer,
            )
        self._last_answer = self.clock()
        self._last_answer_wall = self.wall_clock()
        self._last_error = None
        if self._lost:
            self._lost = False
            try:
                self.back()
            except Exception:  # the watch goes on: readiness must not depend on it
                log.exception("reacting to the broker's return failed")

    async def _run(self) -> None:
        while True:
            await self.check()
            await asyncio.sleep(self.interval_s)

    def start(self) -> None:
        """Probe in the background from now on; the broker counts as answering now."""
        if self._task is None:
            self._last_answer = self.clock()
            self._last_answer_wall = self.wall_clock()
            self._task = asyncio.create_task(self._run(), name="broker-watch")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.wait([task], timeout=1.0)  # a cancel of the caller still propagates


def _short(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}"[:200] if text else type(exc).__name__
