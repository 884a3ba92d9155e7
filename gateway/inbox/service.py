"""The view, its reader and its routes together: what `agui-gateway inbox` runs, and what
`agui-gateway run` adds to its HTTP port when `inbox_enabled`.

Its routes are the JSON API, the page (`/inbox`, reading this view) and the page's
sign-in (`/inbox/login`, `/inbox/logout`), all behind one authorizer
(`gateway.inbox.auth`): the inbox token, a person's JWT verified as the edge verifies
it (with the edge's token settings), or the session cookie (`gateway.inbox.session`). The page's answers go out
through a Kafka client started on the first answer: `aclose()` stops it, after the
HTTP server has stopped.

A reader that fails (Kafka gone longer than its clients retry) is logged and started
again after `RESTART_S`, on an emptied view: the topic is read from its beginning
again, so a close whose tombstone compaction removed meanwhile is not missed. The
audit trail's reader, failed, starts again from its window back; a verdict read again
is not taken twice (each thread remembers the place of the last one it took).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry
from starlette.routing import Route

from gateway.inbox.api import routes
from gateway.inbox.findings import FindingsReader
from gateway.inbox.page.app import InboxPage
from gateway.inbox.reader import InboxMetrics, InboxReader
from gateway.inbox.session import Session
from gateway.inbox.trail import TrailReader
from gateway.inbox.view import InboxView
from gateway.settings import Settings

log = logging.getLogger("gateway.inbox")

RESTART_S = 5.0


class InboxService:
    def __init__(
        self,
        settings: Settings,
        registry: CollectorRegistry,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        self.clock = clock
        self.view = InboxView(
            settings.inbox_max_open,
            clock,
            settings.inbox_max_bytes,
            settings.inbox_max_threads,
            settings.inbox_history_max_bytes,
        )
        self.metrics = InboxMetrics(registry, self.view)
        self.reader = InboxReader(settings, self.view, self.metrics, clock)
        self.session = Session(settings)
        self.page = InboxPage(
            self.view, self.session.authorize, settings, login=self.session.login_url
        )
        self.routes: list[Route] = [
            *routes(self.view, self.session.authorize),
            *self.session.routes(),
            *self.page.routes(),
        ]
        authorizer = self.session.authorizer
        if (
            not settings.inbox_open
            and settings.inbox_token is None
            and not (authorizer.verifies_people)
        ):
            log.warning(
                "inbox_token is not set: the inbox's API refuses every request (401); set "
                "it, or the edge's token settings (edge_jwt_*) for people to sign in with "
                "their JWT, or inbox_open for a trusted network"
            )
        if authorizer.verifies_people:
            if self.page.attests:
                log.info(
                    "the inbox verifies people's JWTs; their answers are attested",
                    extra={"key_id": settings.attest_key_id, "sessions": authorizer.key_source},
                )
            else:
                log.warning(
                    "the inbox verifies people's JWTs but has no signing key (attest_key_id, "
                    "attest_private_key_file): their answers reach the gateway unattested, "
                    "and their sessions end when this process does"
                )

    def ready(self) -> tuple[bool, dict[str, Any]]:
        """Ready once the view has read the whole topic once."""
        return self.reader.caught_up.is_set(), {
            "inbox": {"open": len(self.view.index), "lagSeconds": self.view.lag_seconds}
        }

    async def aclose(self) -> None:
        """Stop the page's sender (its Kafka clients), if an answer started it."""
        await self.page.aclose()

    async def run(self, stop: asyncio.Event) -> None:
        """Read into the view until `stop`; a failed reader starts again (the interrupts
        topic's on an empty view)."""
        await self.session.authorizer.start()  # a JWKS URL's keys (a failure is retried)
        try:
            await asyncio.gather(self._interrupts(stop), self._warnings(stop), self._trail(stop))
        finally:
            self.view.stop()

    async def _interrupts(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                await self.reader.run(stop)
            except Exception as exc:
                log.error(
                    "the inbox's reader failed; reading the topic again from its beginning",
                    extra={"error": repr(exc)},
                )
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), RESTART_S)
                self.view.index.forget_warnings()
                self.view.reset()
                self.reader = InboxReader(self.settings, self.view, self.metrics, self.clock)

    async def _warnings(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                await FindingsReader(self.settings, self.view, self.clock).run(stop)
            except Exception as exc:
                log.error(
                    "the inbox's warnings and rejections reader failed; starting it again",
                    extra={"error": repr(exc)},
                )
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), RESTART_S)
                self.view.index.forget_warnings()

    async def _trail(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                await TrailReader(self.settings, self.view, self.clock).run(stop)
            except Exception as exc:
                log.error(
                    "the inbox's audit trail reader failed; starting it again",
                    extra={"error": repr(exc)},
                )
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), RESTART_S)
