"""Look-ups asked for together, made as one request.

`Batched(look_up).get(key)` waits for `look_up(keys)`, called once for every key
asked for before the pending batch starts (the callers of one `gather`, for
instance): an assignment's pairs and agents cost one request to Kafka, not one
each. A failed look-up fails every caller of its batch; a later call makes a
new batch.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class Batched(Generic[K, V]):
    def __init__(self, look_up: Callable[[list[K]], Awaitable[dict[K, V]]]) -> None:
        self._look_up = look_up
        self._keys: dict[K, None] = {}
        self._batch: asyncio.Future[dict[K, V]] | None = None

    async def get(self, key: K) -> V:
        loop = asyncio.get_running_loop()
        if self._batch is None:
            self._batch = loop.create_future()
            self._keys = {}
            loop.call_soon(self._start)
        self._keys[key] = None
        found = await asyncio.shield(self._batch)
        return found[key]

    def _start(self) -> None:
        batch, keys, self._batch = self._batch, list(self._keys), None
        assert batch is not None
        task = asyncio.ensure_future(self._look_up(keys))
        task.add_done_callback(lambda done: _settle(batch, done))


def _settle(batch: asyncio.Future[dict[K, V]], done: asyncio.Future[dict[K, V]]) -> None:
    if batch.cancelled():
        return
    if done.cancelled():
        batch.cancel()
        return
    error = done.exception()
    if error is not None:
        batch.set_exception(error)
    else:
        batch.set_result(done.result())
    batch.exception()  # retrieved: a batch whose callers were all cancelled logs nothing
