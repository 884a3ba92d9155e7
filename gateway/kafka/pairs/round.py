"""A round as a value: what one pair consumed, decided and must write, until it commits.

The pair fills a round (output records, the offsets it consumed up to, thread
states it changed, metric updates to make once committed); the checkpoint
writes it in one transaction; then the pair folds it into what is committed,
or forgets it. A record whose handling fails half way is taken back with
`mark`/`undo`, so one bad record never leaves half its effects in a round.

Pure: no Kafka client, no clock, no metrics library (a test holds it to that).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gateway.codec import changelog
from gateway.codec.records import OutRecord
from gateway.core import RunStatus, ThreadState
from gateway.kafka.pairs import shaping

log = logging.getLogger("gateway.round")


@dataclass(frozen=True, slots=True)
class Mark:
    out: int
    deferred: int
    decided: int
    admitted: int


class Round:
    """One pair's pending work. `changes` maps a thread's key (its threadId; in a group,
    `changelog.group_key`) to its new state (None: deleted)."""

    __slots__ = (
        "agent",
        "changelog_topic",
        "partition",
        "out",
        "offsets",
        "changes",
        "_encoded",
        "deferred",
        "event_counts",
        "decided",
        "admitted",
        "open_delta",
        "thread_delta",
        "started",
    )

    def __init__(self, agent: str, changelog_topic: str, partition: int) -> None:
        self.agent = agent
        self.changelog_topic = changelog_topic
        self.partition = partition
        self.out: list[OutRecord] = []
        self.offsets: dict[str, int] = {}  # "events"/"requests" -> the next offset to read
        self.changes: dict[str, ThreadState | None] = {}
        # the changelog value of each state put, encoded inside the record's defect
        # boundary (a state that cannot be encoded fails its record, not the round)
        self._encoded: dict[str, tuple[ThreadState, bytes]] = {}
        self.deferred: list[Callable[[], None]] = []  # metric updates and logs, once committed
        self.event_counts: Counter[str] = Counter()
        self.decided: list[float] = []  # when each decided request was consumed (monotonic)
        self.admitted: list[Any] = []  # the warning limiter's changes, to undo on an abort
        self.open_delta = 0
        self.thread_delta = 0
        self.started: float | None = None  # when the round first held something to commit

    # --- what the round holds -----------------------------------------------------------

    def empty(self) -> bool:
        return not (self.offsets or self.out or self.changes)

    @property
    def decided_any(self) -> bool:
        """Requests were decided in this round: their outputs wait on its commit."""
        return bool(self.decided)

    def size(self) -> int:
        return len(self.out) + len(self.changes)

    # --- a record's defect boundary -------------------------------------------------------

    def mark(self) -> Mark:
        return Mark(len(self.out), len(self.deferred), len(self.decided), len(self.admitted))

    def undo(self, mark: Mark) -> list[Any]:
        """Forget what a record that failed half way added; the limiter entries to take back.

        State changes need no undoing: a record puts its state last, after everything
        that can fail.
        """
        del self.out[mark.out :]
        del self.deferred[mark.deferred :]
        del self.decided[mark.decided :]
        taken = self.admitted[mark.admitted :]
        del self.admitted[mark.admitted :]
        return taken

    # --- state changes ------------------------------------------------------------------

    def put(self, old: ThreadState | None, new: ThreadState, key: str | None = None) -> None:
        key = new.thread_id if key is None else key
        # First: a state that cannot be encoded raises here, before anything changed.
        self._encoded[key] = (new, changelog.encode(new))
        self.open_delta += len(new.interrupts) - (len(old.interrupts) if old else 0)
        if old is None:
            self.thread_delta += 1
        self.changes[key] = new

    def value_of(self, key: str, state: ThreadState) -> bytes | None:
        """The changelog value this round encoded for `state` under `key` (None: none)."""
        cached = self._encoded.get(key)
        return cached[1] if cached is not None and cached[0] is state else None

    def delete(self, old: ThreadState, key: str | None = None) -> None:
        key = old.thread_id if key is None else key
        self.open_delta -= len(old.interrupts)
        self.thread_delta -= 1
        self._encoded.pop(key, None)
        self.changes[key] = None

    def active_changes(self) -> dict[bytes, bool]:
        """Each changed thread's key, and whether its run is active in the new state."""
        return {
            thread_id.encode(): state is not None and state.status is RunStatus.ACTIVE
            for thread_id, state in self.changes.items()
        }

    # --- what the checkpoint writes ---------------------------------------------------------

    def records(self) -> list[OutRecord]:
        """Every record this round writes: its outputs, then its changelog records."""
        return self.out + self.changelog_records()

    def changelog_records(self) -> list[OutRecord]:
        out = []
        for thread_id, state in list(self.changes.items()):
            try:
                value = None if state is None else self._value(thread_id, state)
            except Exception:
                # `put` encoded this state already; a defect here is a backstop's matter:
                # the thread is kept in memory only, the round still commits.
                log.exception(
                    "internal error encoding a thread state; kept in memory only",
                    extra={"agent": self.agent, "threadId": thread_id},
                )
                continue
            if state is not None and value is None:
                continue  # too large even slimmed: kept in memory only
            written = self.changes[thread_id]  # the slimmed state, if it was slimmed
            out.append(
                shaping.changelog_record(
                    self.changelog_topic, self.partition, thread_id, value, written
                )
            )
        return out

    def _value(self, thread_id: str, state: ThreadState) -> bytes | None:
        cached = self._encoded.get(thread_id)
        value = cached[1] if cached is not None and cached[0] is state else changelog.encode(state)
        if len(value) <= shaping.MAX_RECORD_BYTES:
            return value
        found = shaping.slimmed(state)
        if found is None:
            log.error(
                "thread state too large for a changelog record even without its interrupts' "
                "schemas, metadata and messages; kept in memory only",
                extra={"agent": self.agent, "threadId": thread_id, "bytes": len(value)},
            )
            return None
        slim, slim_value, fields = found
        # The state in memory becomes the one written, so a restart judges as this
        # instance does.
        self.changes[thread_id] = slim
        self._encoded[thread_id] = (slim, slim_value)
        log.error(
            "thread state too large for a changelog record; written without "
            f"the interrupts' {', '.join(fields)}",
            extra={"agent": self.agent, "threadId": thread_id, "bytes": len(value)},
        )
        return slim_value
