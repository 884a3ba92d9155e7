"""What the inbox remembers of threads beyond their open interrupts, bounded.

Pure: no Kafka, no clock (times are the records' own). Per thread (agent, thread):

- its last `MAX_VERDICTS` verdicts (from the audit topic), each its answer JSON;
- the runs it knows of (at most `MAX_RUNS`, the newest): a run whose close the
  interrupts topic's run record says (how, and when), a run it says finished with
  interrupts (when: its `RUN_FINISHED` time) and a run a forwarded resume started
  (when: the decision's time), each with its interrupts (at most `MAX_RUN_INTERRUPTS`)
  and how each closed (the tombstone's status and time);
- the closes of interrupts whose run it never saw opening (their open record was
  compacted away before the view read it), the last `MAX_LOOSE_CLOSES`.

Kept for at most `max_threads` threads and `max_bytes` counted bytes, whichever is
reached first; past either the thread with the oldest activity (the last record that
changed it) is forgotten and counted in `evicted`. A thread's counted bytes are its
strings (4 bytes a character when not ASCII) and verdict JSON plus a measured overhead
per thread, run, interrupt, close and verdict (tracemalloc: see the inbox guide; a test
holds the counted bytes above what tracemalloc sees).

What it cannot know it does not say: the topic keeps only each thread's latest run
record, so a view started later knows of older runs only what their interrupts and
the audit trail say; a run still running is not in either topic (a forwarded one shows
as forwarded until its close is read).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator

from gateway.inbox.verdicts import Verdict

MAX_VERDICTS = 10
MAX_RUNS = 10
MAX_RUN_INTERRUPTS = 20
MAX_LOOSE_CLOSES = 20
OPEN = "open"
# Measured with tracemalloc (tests/inbox/test_history.py holds the counted bytes above
# what it sees): a thread's entry, its key and the ordered dict's slot; a run; one of
# a run's interrupts; a close without its run; a verdict beside its JSON.
THREAD_OVERHEAD = 600
RUN_OVERHEAD = 300
INTERRUPT_OVERHEAD = 150
LOOSE_OVERHEAD = 200
VERDICT_OVERHEAD = 100

Position = tuple[str, int, int]  # an audit record's topic, partition, offset


def size(text: str | None) -> int:
    """The bytes a string is counted as."""
    if text is None:
        return 0
    return len(text) if text.isascii() else 4 * len(text)


class Run:
    """A run of the thread: when a forward started it, when it finished with
    interrupts, and its interrupts (id -> how it stands, closed at, its place among
    the run's interrupts)."""

    __slots__ = ("run", "status", "started_at_ms", "finished_at_ms", "interrupts", "omitted")

    def __init__(self, run: str) -> None:
        self.run = run
        self.status: str | None = None  # how it closed, from its run record; None: not said
        self.started_at_ms: int | None = None
        self.finished_at_ms: int | None = None
        self.interrupts: dict[str, tuple[str, int | None, int]] = {}
        self.omitted = 0  # interrupts past MAX_RUN_INTERRUPTS, not kept

    def cost(self) -> int:
        return (
            RUN_OVERHEAD
            + size(self.run)
            + sum(INTERRUPT_OVERHEAD + size(i) for i in self.interrupts)
        )


class Loose:
    """A close whose run is not known."""

    __slots__ = ("interrupt", "status", "opened_at_ms", "closed_at_ms")

    def __init__(
        self, interrupt: str, status: str, opened_at_ms: int | None, closed_at_ms: int | None
    ) -> None:
        self.interrupt = interrupt
        self.status = status
        self.opened_at_ms = opened_at_ms
        self.closed_at_ms = closed_at_ms

    def same(self, other: Loose) -> bool:
        return (self.interrupt, self.status, self.closed_at_ms) == (
            other.interrupt,
            other.status,
            other.closed_at_ms,
        )


class Thread:
    """What is remembered of one thread."""

    __slots__ = ("key", "runs", "loose", "verdicts", "audit_at", "since_ms", "cost")

    def __init__(self, key: tuple[str, str], since_ms: int | None) -> None:
        self.key = key
        self.runs: dict[str, Run] = {}  # oldest first
        # lists (at most MAX_LOOSE_CLOSES, MAX_VERDICTS): a deque's first block alone is
        # 600 bytes, more than a thread's usual history
        self.loose: list[Loose] = []
        self.verdicts: list[bytes] = []
        self.audit_at: Position | None = None  # the last audit record taken
        # None: everything since the trail's start is here; else its first record's time
        # (the store had forgotten threads before: this one's older past may be gone)
        self.since_ms = since_ms
        self.cost = 0

    def measure(self) -> int:
        return (
            THREAD_OVERHEAD
            + size(self.key[0])
            + size(self.key[1])
            + sum(run.cost() for run in self.runs.values())
            + sum(LOOSE_OVERHEAD + size(c.interrupt) for c in self.loose)
            + sum(VERDICT_OVERHEAD + len(v) for v in self.verdicts)
        )

    def run(self, run_id: str) -> Run:
        found = self.runs.get(run_id)
        if found is None:
            found = self.runs[run_id] = Run(run_id)
            while len(self.runs) > MAX_RUNS:
                del self.runs[next(iter(self.runs))]
        return found


class History:
    def __init__(self, max_threads: int, max_bytes: int = 1 << 62) -> None:
        self.max_threads = max_threads
        self.max_bytes = max_bytes
        self.bytes = 0
        self.evicted = 0  # threads forgotten to stay within the bounds
        self.forgot_at_ms: int | None = None  # the newest record time when one was
        self._newest_ms = 0
        self._threads: OrderedDict[tuple[str, str], Thread] = OrderedDict()

    def __len__(self) -> int:
        return len(self._threads)

    def get(self, agent: str, thread: str) -> Thread | None:
        """A thread's history (reading it is not activity: its place stays)."""
        return self._threads.get((agent, thread))

    def threads(self) -> Iterator[Thread]:
        """Every thread kept, least recently active first."""
        return iter(self._threads.values())

    # --- fed by the view ------------------------------------------------------------------

    def opened(
        self,
        agent: str,
        thread: str,
        run: str | None,
        interrupt: str,
        opened_at_ms: int,
        position: int = 0,
    ) -> None:
        """An interrupt opened (again): its run finished with interrupts at `opened_at_ms`;
        `position` is its place among the run's interrupts."""
        if run is None:
            return
        entry = self._touch(agent, thread, opened_at_ms)
        found = entry.run(run)
        found.finished_at_ms = opened_at_ms
        if interrupt in found.interrupts or len(found.interrupts) < MAX_RUN_INTERRUPTS:
            found.interrupts[interrupt] = (OPEN, None, position)
        else:
            found.omitted += 1
        self._settle(entry)

    def closed(
        self,
        agent: str,
        thread: str,
        interrupt: str,
        status: str,
        closed_at_ms: int | None,
        opened_at_ms: int | None,
    ) -> None:
        """An interrupt closed: the newest run holding it open says how; a close of one
        whose opening was not seen is kept without its run."""
        entry = self._touch(agent, thread, closed_at_ms or opened_at_ms or self._newest_ms)
        for run in reversed(entry.runs.values()):
            held = run.interrupts.get(interrupt)
            if held is not None and (held[0] == OPEN or held[:2] == (status, closed_at_ms)):
                run.interrupts[interrupt] = (status, closed_at_ms, held[2])
                break
        else:
            close = Loose(interrupt, status, opened_at_ms, closed_at_ms)
            if not any(close.same(other) for other in entry.loose):
                entry.loose.append(close)
                del entry.loose[:-MAX_LOOSE_CLOSES]
        self._settle(entry)

    def run_closed(
        self, agent: str, thread: str, run: str | None, status: str, closed_at_ms: int
    ) -> None:
        """The thread's run closed (`status`: succeeded, interrupted, cancelled, failed)."""
        if run is None:
            return
        entry = self._touch(agent, thread, closed_at_ms)
        found = entry.run(run)
        found.status = status
        if found.finished_at_ms is None:
            found.finished_at_ms = closed_at_ms
        self._settle(entry)

    def verdict(self, verdict: Verdict, at: Position | None = None) -> bool:
        """A decided request of the thread; False when it was taken already (`at`, the
        audit record's place, is not after the last one taken: read again)."""
        key = (verdict.agent, verdict.thread)
        entry = self._threads.get(key)
        if entry is not None and at is not None and entry.audit_at is not None:
            last = entry.audit_at
            if last[:2] == at[:2] and at[2] <= last[2]:
                return False
        entry = self._touch(verdict.agent, verdict.thread, verdict.decided_at_ms)
        entry.verdicts.append(verdict.value)
        del entry.verdicts[:-MAX_VERDICTS]
        if at is not None:
            entry.audit_at = at
        if verdict.forwarded_run is not None:
            entry.run(verdict.forwarded_run).started_at_ms = verdict.decided_at_ms
        self._settle(entry)
        return True

    # --- bounds ---------------------------------------------------------------------------

    def _touch(self, agent: str, thread: str, at_ms: int) -> Thread:
        self._newest_ms = max(self._newest_ms, at_ms)
        key = (agent, thread)
        entry = self._threads.get(key)
        if entry is None:
            since = None if self.forgot_at_ms is None else at_ms
            entry = self._threads[key] = Thread(key, since)
        else:
            self._threads.move_to_end(key)
        return entry

    def _settle(self, entry: Thread) -> None:
        """Count `entry` again, then forget the least recently active threads past the
        bounds (never `entry` itself)."""
        cost = entry.measure()
        self.bytes += cost - entry.cost
        entry.cost = cost
        while len(self._threads) > 1 and (
            len(self._threads) > self.max_threads or self.bytes > self.max_bytes
        ):
            key, oldest = next(iter(self._threads.items()))
            if oldest is entry:
                break
            del self._threads[key]
            self.bytes -= oldest.cost
            self.evicted += 1
            self.forgot_at_ms = self._newest_ms
