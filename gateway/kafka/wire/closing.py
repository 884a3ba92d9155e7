"""A client's connections closed without waiting out TLS's closing handshake.

aiokafka ends every client's stop (`AIOKafkaClient.close`) by closing each
connection and waiting until each reports itself lost. Over TLS a close first
sends close_notify and waits for the broker's, for up to the event loop's SSL
shutdown timeout (30 s). A broker holding a fetch of that connection answers only
once the fetch ends (`fetch_max_wait_ms`, 500 ms): a consumer's stop took 0.5 s
on either loop. On uvloop the wait ran its whole 30 s in about one stop in four:
every partition the bridge opened waited 30 s for its marker reader to stop, a
restore as long for its changelog reader, and a service's own stop overran
`shutdown_timeout_s`.

Nothing is left to say on a connection being closed (aiokafka has already failed
its pending requests), so each client the gateway builds (`clients`) closes its
connections this way: aiokafka's own close, for `GRACE_S`; then each connection
still open is aborted, and the close waits at most `ABORT_WAIT_S` more. A close
still unfinished then is given up (its connections close with the process), with
a warning.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from aiokafka.client import AIOKafkaClient

log = logging.getLogger("gateway.kafka.clients")

GRACE_S = 0.2  # a broker answers close_notify in a round trip, unless a fetch holds it
ABORT_WAIT_S = 1.0  # an aborted transport reports itself lost on the next loop turn


def bound(client: AIOKafkaClient | None) -> None:
    """Make `client.close()` end within GRACE_S + ABORT_WAIT_S (idempotent; no client, or
    one with no `close` of its own, as another aiokafka's might be, is left as it is)."""
    own: Callable[[], Awaitable[None]] | None = getattr(client, "close", None)
    if client is None or own is None or getattr(own, "bounded", False):
        return

    async def close() -> None:
        await _bounded_close(client, own)

    close.bounded = True  # type: ignore[attr-defined]
    client.close = close  # type: ignore[method-assign]


async def _bounded_close(client: AIOKafkaClient, own: Callable[[], Awaitable[None]]) -> None:
    closing = asyncio.ensure_future(own())
    try:
        done, _ = await asyncio.wait({closing}, timeout=GRACE_S)
        if not done:
            log.debug("a connection's TLS close waits for the broker; aborting the client's")
            abort(client)
            done, _ = await asyncio.wait({closing}, timeout=ABORT_WAIT_S)
        if not done:
            log.warning(
                "a Kafka client's connections did not close even when aborted; left to "
                "close with the process",
                extra={"after_s": GRACE_S + ABORT_WAIT_S},
            )
            closing.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await closing
            return
        closing.result()
    except asyncio.CancelledError:
        closing.cancel()
        raise


def abort(client: AIOKafkaClient) -> None:
    """Abort the transport of each of the client's connections: each is closed at once,
    without waiting for the other side."""
    for conn in list(client._conns.values()):  # reach: aiokafka's own
        transport: Any = getattr(getattr(conn, "_protocol", None), "_transport", None)
        if transport is not None:
            transport.abort()
