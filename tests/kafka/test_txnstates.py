"""Asking how transactional ids' last transactions ended, when the coordinator is not
ready to say: a stand-in client answering as a broker does right after a restart.

The answers of a real broker: tests/kafka/test_hanging.py.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from aiokafka.errors import CoordinatorLoadInProgressError

from gateway.kafka.wire import txnstates
from gateway.kafka.wire.txnstates import DescribeTransactionsRequest, FindCoordinatorsRequest

LOADING = CoordinatorLoadInProgressError.errno
NOT_FOUND = 105  # TRANSACTIONAL_ID_NOT_FOUND (aiokafka names no error for it)


class Restarting:
    """A coordinator that answers `loading` for its first `loading` rounds, then states."""

    def __init__(self, loading: int, states: dict[str, str]) -> None:
        self.loading = loading
        self.states = states
        self.asked: list[list[str]] = []

    def get_random_node(self) -> int:
        return 1

    async def send(self, node: int, request: Any) -> Any:
        if isinstance(request, FindCoordinatorsRequest):
            self.asked.append(list(request._keys))
            code = LOADING if self.loading > 0 else 0
            self.loading -= 1
            return SimpleNamespace(
                coordinators=[(k, 1, "h", 9092, code, None, {}) for k in request._keys]
            )
        assert isinstance(request, DescribeTransactionsRequest)
        return SimpleNamespace(
            transaction_states=[
                (0, k, self.states[k], 0, 0, 0, 0, [], {})
                if k in self.states
                else (NOT_FOUND, k, "", 0, 0, -1, -1, [], {})
                for k in request._ids
            ]
        )


async def test_a_coordinator_still_loading_is_asked_again_until_it_answers() -> None:
    client = Restarting(loading=2, states={"a": "CompleteCommit", "b": "CompleteAbort"})
    found = await txnstates.last_states(client, ["a", "b", "never"], timeout_s=5)  # type: ignore[arg-type]
    assert found == {"a": "CompleteCommit", "b": "CompleteAbort"}  # "never": not found, once
    assert client.asked == [["a", "b", "never"]] * 3


async def test_what_is_not_answered_in_time_is_left_out() -> None:
    client = Restarting(loading=1000, states={"a": "CompleteCommit"})
    assert await txnstates.last_states(client, ["a"], timeout_s=0.3) == {}  # type: ignore[arg-type]
    assert 2 <= len(client.asked) <= 4  # asked again every 100 ms, then given up
