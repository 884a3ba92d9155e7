"""A getmany cancelled in its wait leaves aiokafka's fetch waiter behind: its later
error (a refusal of the group) is read, not logged by asyncio as never retrieved."""

from __future__ import annotations

import asyncio
import gc
from types import SimpleNamespace
from typing import Any

from aiokafka.errors import GroupAuthorizationFailedError

from gateway.kafka.runner import _read_abandoned_waiters


async def unretrieved(read: bool) -> list[dict[str, Any]]:
    loop = asyncio.get_running_loop()
    logged: list[dict[str, Any]] = []
    previous = loop.get_exception_handler()
    loop.set_exception_handler(lambda _, context: logged.append(context))
    try:
        waiter = loop.create_future()
        consumer: Any = SimpleNamespace(_fetcher=SimpleNamespace(_fetch_waiters={waiter}))
        if read:
            _read_abandoned_waiters(consumer)
        waiter.set_exception(GroupAuthorizationFailedError("the-group"))
        await asyncio.sleep(0)  # the done callbacks run
        del waiter, consumer
        gc.collect()
    finally:
        loop.set_exception_handler(previous)
    return logged


async def test_an_abandoned_waiter_s_error_is_read() -> None:
    assert await unretrieved(read=True) == []


async def test_unread_it_would_be_logged() -> None:
    [context] = await unretrieved(read=False)
    assert "never retrieved" in context["message"]


def test_a_consumer_without_waiters_is_left_alone() -> None:
    _read_abandoned_waiters(SimpleNamespace())  # type: ignore[arg-type]
