"""One run-requests partition's bookkeeping: per-thread order, run markers, offsets.

Pure: no Kafka, no clock. The bridge's shell feeds it consumed requests, starts
and ends runs, and asks it what to commit. The marker state it encodes is what
the bridge writes to `agui.<agent>.bridge-runs` (one record per partition,
compacted) in the same transaction as the events and the consumed offset:

- `next`: the offset consumption resumes from (every request before it has
  fully ended, its events committed);
- `started`: requests at or after `next` whose run was started (the marker was
  committed before the agent was called) and has not ended;
- `ended`: requests at or after `next` whose run has ended.

A bridge that takes the partition over reads that record: a `started` request
is never sent to the agent again (its run is closed with `RUN_ERROR`
`bridge_restarted`), an `ended` one is skipped.

On a group's topics (many agents, one set of topics) a request names its agent
(`agui-agent`): a thread is an agent's thread id, so two agents' runs on the
same thread id do not wait for each other, and a started run keeps its agent
(the `agent` member of a `started` entry; markers without it are read as the
topic's own agent's).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

import orjson

MARKER_VERSION = 1

Thread = tuple[str | None, bytes]  # (the agent a request names, the thread id)


@dataclass(slots=True)
class RunRequest:
    """One consumed run request."""

    offset: int
    key: bytes  # the thread id, as the record's key
    value: bytes  # the RunAgentInput, as forwarded by the gateway
    correlation_id: str | None = None
    agent: str | None = None  # the agent its agui-agent header names, if any
    # who answered, as the gateway verified it: its agui-identity header, as ASCII JSON
    identity: str | None = None

    @property
    def thread(self) -> Thread:
        return (self.agent, self.key)


@dataclass(slots=True)
class StartedRun:
    offset: int
    key: bytes
    correlation_id: str | None = None
    agent: str | None = None


@dataclass(slots=True)
class MarkerState:
    next: int
    started: dict[int, StartedRun] = field(default_factory=dict)
    ended: set[int] = field(default_factory=set)


def encode_marker(partition: int, state: MarkerState) -> bytes:
    return orjson.dumps(
        {
            "v": MARKER_VERSION,
            "partition": partition,
            "next": state.next,
            "started": [
                {
                    "offset": run.offset,
                    "thread": run.key.decode("utf-8", "replace"),
                    "threadHex": run.key.hex(),
                    "correlationId": run.correlation_id,
                    **({"agent": run.agent} if run.agent is not None else {}),
                }
                for run in sorted(state.started.values(), key=lambda r: r.offset)
            ],
            "ended": sorted(state.ended),
        }
    )


def decode_marker(value: bytes) -> MarkerState:
    """A marker record; ValueError when it cannot be read (the bridge then refuses to guess)."""
    try:
        data: Any = orjson.loads(value)
        if not isinstance(data, dict) or data.get("v") != MARKER_VERSION:
            raise ValueError(
                f"unknown marker version {data.get('v') if isinstance(data, dict) else None!r}"
            )
        started = {
            int(item["offset"]): StartedRun(
                int(item["offset"]),
                bytes.fromhex(item["threadHex"]),
                item.get("correlationId"),
                item.get("agent"),
            )
            for item in data["started"]
        }
        return MarkerState(int(data["next"]), started, {int(o) for o in data["ended"]})
    except (KeyError, TypeError, orjson.JSONDecodeError) as exc:
        raise ValueError(f"unreadable bridge marker: {exc!r}") from exc


class PartitionLedger:
    """What one partition has consumed, is running, and may commit."""

    def __init__(self, restored: MarkerState) -> None:
        self.next_to_consume = restored.next
        self.started: dict[int, StartedRun] = dict(restored.started)
        self.ended: set[int] = set(restored.ended)
        self.pending: dict[int, RunRequest] = {}  # consumed, not ended
        self.threads: dict[Thread, deque[RunRequest]] = {}  # per thread, in offset order
        self._committed_next = restored.next

    # --- consuming -------------------------------------------------------------------

    def accept(self, request: RunRequest) -> bool:
        """Take a consumed request. True when it is new work; False when already ended
        (before a restart) or consumed before."""
        if request.offset < self.next_to_consume:
            return False
        self.next_to_consume = request.offset + 1
        if request.offset in self.ended:
            return False
        self.pending[request.offset] = request
        queue = self.threads.setdefault(request.thread, deque())
        queue.append(request)
        return True

    def next_of(self, thread: Thread) -> RunRequest | None:
        queue = self.threads.get(thread)
        return queue[0] if queue else None

    # --- runs ------------------------------------------------------------------------

    def start(self, request: RunRequest) -> None:
        self.started[request.offset] = StartedRun(
            request.offset, request.key, request.correlation_id, request.agent
        )

    def end(self, offset: int) -> None:
        """The run of the request at `offset` has ended (or is closed by the bridge)."""
        self.started.pop(offset, None)
        request = self.pending.pop(offset, None)
        self.ended.add(offset)
        if request is not None:
            queue = self.threads.get(request.thread)
            if queue and queue[0] is request:
                queue.popleft()
            elif queue:
                queue.remove(request)
            if queue is not None and not queue:
                del self.threads[request.thread]

    # --- committing ------------------------------------------------------------------

    def committable(self) -> int:
        """The offset to commit: the first request not yet ended, or past the last consumed."""
        if self.pending:
            return min(self.pending)
        if self.started:
            return min(self.started)
        return self.next_to_consume

    def marker(self) -> MarkerState:
        """The marker state to write now; forgets what falls behind the committed offset."""
        nxt = self.committable()
        self.ended = {o for o in self.ended if o >= nxt}
        return MarkerState(nxt, dict(self.started), set(self.ended))

    def committed(self, nxt: int) -> None:
        self._committed_next = nxt

    @property
    def committed_next(self) -> int:
        return self._committed_next

    def __len__(self) -> int:
        return len(self.pending)
