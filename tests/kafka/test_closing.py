"""A client's close is bounded (closing.py): aborted past GRACE_S, given up past ABORT_WAIT_S.

The real case (a TLS close on uvloop waiting out its 30 s) is in
tests/integration/test_secure_kafka.py; these stand-ins hold the two ends nothing real
here produces on demand: a close that only an abort ends, and one that nothing ends.
"""

from __future__ import annotations

import asyncio
import logging
from types import SimpleNamespace
from typing import Any

import pytest

from gateway.kafka.wire import closing


class _Client:
    """aiokafka's client as `closing` sees it: one connection, and a close that waits
    for it to report itself lost (`lost`), which its transport's abort may do."""

    def __init__(self, abort_ends_it: bool) -> None:
        self.lost: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.aborted = 0

        def abort() -> None:
            self.aborted += 1
            if abort_ends_it:
                self.lost.set_result(None)

        transport = SimpleNamespace(abort=abort)
        self._conns = {1: SimpleNamespace(_protocol=SimpleNamespace(_transport=transport))}

    async def close(self) -> None:
        await self.lost


@pytest.fixture
def fast(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(closing, "GRACE_S", 0.05)
    monkeypatch.setattr(closing, "ABORT_WAIT_S", 0.1)


async def test_a_close_still_waiting_past_the_grace_has_its_connections_aborted(fast) -> None:
    client: Any = _Client(abort_ends_it=True)
    closing.bound(client)
    closing.bound(client)  # once is enough: bounding again changes nothing
    await asyncio.wait_for(client.close(), timeout=5)
    assert client.aborted == 1 and client.lost.done()


async def test_a_close_answered_at_once_is_not_aborted(fast) -> None:
    client: Any = _Client(abort_ends_it=True)
    client.lost.set_result(None)
    closing.bound(client)
    await client.close()
    assert client.aborted == 0


async def test_a_close_that_even_an_abort_does_not_end_is_given_up_with_a_warning(
    fast, caplog: pytest.LogCaptureFixture
) -> None:
    client: Any = _Client(abort_ends_it=False)
    closing.bound(client)
    with caplog.at_level(logging.WARNING, logger="gateway.kafka.clients"):
        await asyncio.wait_for(client.close(), timeout=5)
    assert client.aborted == 1
    assert "did not close even when aborted" in caplog.text


async def test_a_cancelled_close_is_cancelled(fast) -> None:
    client: Any = _Client(abort_ends_it=False)
    closing.bound(client)
    task = asyncio.create_task(client.close())
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
