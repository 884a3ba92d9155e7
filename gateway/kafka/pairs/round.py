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
from gateway.codec import interrupts as inbox_records
from gateway.codec.records import OutRecord
from gateway.core import RunStatus, ThreadState
from gateway.kafka.pairs import shaping

log = logging.getLogger("gateway.round")


@dataclass(frozen=True, slots=True)
class InboxTarget:
    """Where a pair's rounds write the interrupts topic, and how its keys split into
    (agent, threadId); `group` is the pair's group (None on an agent's own topics);
    `runs`: whether each thread's run record is written too."""

    topic: str
    split: Callable[[str], tuple[str, str]]
    group: str | None = None
    runs: bool = True


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
        "inbox",
        "base",
        "answers",
        "at_ms",
        "_state_bytes",
        "_out_bytes",
        "_out_counted",
    )

    def __init__(
        self,
        agent: str,
        changelog_topic: str,
        partition: int,
        inbox: InboxTarget | None = None,
    ) -> None:
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
        # The interrupts topic (None: not written): each changed thread's state before
        # this round, the resume statuses forwards answered with, and the latest time.
        self.inbox = inbox
        self.base: dict[str, ThreadState | None] = {}
        self.answers: dict[str, dict[str, str]] = {}
        self.at_ms = 0
        self._state_bytes = 0  # the changelog values of the states put
        self._out_bytes = 0  # the keys and values of out[:_out_counted]
        self._out_counted = 0

    # --- what the round holds -----------------------------------------------------------

    def empty(self) -> bool:
        return not (self.offsets or self.out or self.changes)

    @property
    def decided_any(self) -> bool:
        """Requests were decided in this round: their outputs wait on its commit."""
        return bool(self.decided)

    def size(self) -> int:
        return len(self.out) + len(self.changes)

    def held_bytes(self) -> int:
        """What the round's records hold: its outputs' keys and values and its states'
        changelog values (the interrupts topic records it derives at its commit are of
        the same order, one per open or closed interrupt). Outputs are counted as they
        are first asked about, so each is counted once."""
        out, counted, total = self.out, self._out_counted, self._out_bytes
        for i in range(counted, len(out)):
            record = out[i]
            total += len(record.key or b"") + len(record.value or b"")
        self._out_bytes, self._out_counted = total, len(out)
        return total + self._state_bytes

    # --- a record's defect boundary -------------------------------------------------------

    def mark(self) -> Mark:
        return Mark(len(self.out), len(self.deferred), len(self.decided), len(self.admitted))

    def undo(self, mark: Mark) -> list[Any]:
        """Forget what a record that failed half way added; the limiter entries to take back.

        State changes need no undoing: a record puts its state last, after everything
        that can fail.
        """
        if mark.out < self._out_counted:  # outputs counted are taken back: count anew
            self._out_counted = self._out_bytes = 0
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
        value = changelog.encode(new)
        replaced = self._encoded.get(key)
        self._encoded[key] = (new, value)
        self._state_bytes += len(value) - (len(replaced[1]) if replaced is not None else 0)
        if key not in self.base:
            self.base[key] = old
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
        if key not in self.base:
            self.base[key] = old
        self.open_delta -= len(old.interrupts)
        self.thread_delta -= 1
        replaced = self._encoded.pop(key, None)
        if replaced is not None:
            self._state_bytes -= len(replaced[1])
        self.changes[key] = None

    def active_changes(self) -> dict[bytes, bool]:
        """Each changed thread's key, and whether its run is active in the new state."""
        return {
            thread_id.encode(): state is not None and state.status is RunStatus.ACTIVE
            for thread_id, state in self.changes.items()
        }

    # --- what the checkpoint writes ---------------------------------------------------------

    def answered(self, key: str, request: Any) -> None:
        """A forwarded request answered interrupts of the thread under `key`: remember
        each resume entry's status (resolved or cancelled) for the interrupts topic."""
        resume = request.get("resume") if isinstance(request, dict) else None
        if not isinstance(resume, list):
            return
        statuses = self.answers.setdefault(key, {})
        for entry in resume:
            if isinstance(entry, dict) and isinstance(entry.get("interruptId"), str):
                statuses[entry["interruptId"]] = str(entry.get("status"))

    def records(self) -> list[OutRecord]:
        """Every record this round writes: its outputs, then its changelog records, then
        its interrupts topic records."""
        changelog_out = self.changelog_records()  # may slim states: read them after
        return self.out + changelog_out + self.inbox_records()

    def inbox_records(self) -> list[OutRecord]:
        """The interrupts opened and closed by this round's state changes, and the runs
        they closed (none when the interrupts topic is off)."""
        inbox = self.inbox
        if inbox is None:
            return []
        out = []
        for thread_key, new in self.changes.items():
            old = self.base.get(thread_key)
            if old is None and new is None:
                continue
            agent, thread = inbox.split(thread_key)
            try:
                found = inbox_records.changes(
                    agent,
                    thread,
                    old,
                    new,
                    self.at_ms,
                    self.answers.get(thread_key),
                    inbox.group,
                )
                ran = (
                    inbox_records.run_record(agent, thread, old, new, self.at_ms, inbox.group)
                    if inbox.runs
                    else None
                )
            except Exception:
                log.exception(
                    "internal error deriving a thread's interrupts topic records; skipped",
                    extra={"agent": self.agent, "threadId": thread},
                )
                continue
            for change in found:
                record_key = inbox_records.key(change.agent, change.thread, change.interrupt)
                if isinstance(change, inbox_records.Closed):
                    out.append(OutRecord(inbox.topic, record_key, None, change.headers()))
                else:
                    out.append(OutRecord(inbox.topic, record_key, change.to_json()))
            if ran is not None:
                out.append(OutRecord(inbox.topic, *ran))
        return out

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
