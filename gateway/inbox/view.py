"""The inbox's view: the index behind the contract's InboxSource, fed record by record.

`apply` takes one interrupts topic record (a value: opened; a tombstone: closed),
`verdict` one audit topic record and `warning` one warning record the summary counts;
`interrupts`, `thread` and `summary` give the API's answers (JSON-ready dicts);
`changes` streams what opens and closes from now on. A record that cannot be read is
counted and skipped, never fatal. The open interrupts are the index's; the runs, how
their interrupts closed and the last verdicts of each thread are the history's
(`gateway.inbox.history`), each bounded on its own.

Live changes go to each listener through a queue of `MAX_PENDING_CHANGES`: a listener
that falls that far behind is ended (its stream closes; it may connect again), so a
slow client never holds memory without bound.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import orjson

from gateway.codec import interrupts as records
from gateway.inbox import query as queries
from gateway.inbox import verdicts as audit
from gateway.inbox.history import OPEN, History, Position
from gateway.inbox.history import Thread as Past
from gateway.inbox.index import ANSWERED, Closure, Index, percentile
from gateway.inbox.items import Item, iso, key_of

log = logging.getLogger("gateway.inbox")

MAX_PENDING_CHANGES = 10_000
COUNTED_WARNINGS = {
    "unrecognised_entry": "unrecognisedEntries",
    "uncovered_interrupt": "uncoveredInterrupts",
}
_END = None


class InboxView:
    def __init__(
        self,
        max_open: int,
        clock: Callable[[], float] = time.time,
        max_bytes: int = 1 << 62,
        max_threads: int = 200_000,
        history_bytes: int = 1 << 62,
    ) -> None:
        self.index = Index(max_open, max_bytes)
        self.history = History(max_threads, history_bytes)
        self.trail = audit.TrailStatus()  # set by the audit trail's reader
        self.clock = clock
        self.lag_seconds: float | None = None  # set by the reader; None: not known yet
        self.unreadable = 0  # records skipped: not an interrupts topic record
        self.unreadable_audit = 0  # audit records skipped: not one this view reads
        self._listeners: set[asyncio.Queue[dict[str, Any] | None]] = set()
        self._stopped = False

    def reset(self) -> None:
        """Forget every open interrupt, to read the topic again from its beginning; every
        listener's changes end (a client lists again, then listens again). The history
        stays: reading the same records again changes nothing in it."""
        for queue in list(self._listeners):
            self._end(queue)
        self.index = Index(self.index.max_open, self.index.max_bytes)
        self.lag_seconds = None

    def now_ms(self) -> int:
        return int(self.clock() * 1000)

    # --- fed by the reader ----------------------------------------------------------------

    def apply(self, key: bytes | None, value: bytes | None, headers: Mapping[str, bytes]) -> None:
        """One interrupts topic record."""
        try:
            agent, thread, interrupt = records.parse_key(key or b"")
            if interrupt is None:  # a thread's run record: how its latest run closed
                ran = None if value is None else records.RunClosed.from_json(value)
                opened = None
            else:
                opened = None if value is None else records.Opened.from_json(value)
        except ValueError as exc:
            self.unreadable += 1
            log.warning("unreadable interrupts topic record skipped", extra={"error": str(exc)})
            return
        if interrupt is None:
            if ran is not None:  # (a tombstone: the thread forgotten; its past stays)
                self.history.run_closed(agent, thread, ran.run, ran.status, ran.closed_at_ms)
            return
        if opened is not None:
            self.history.opened(
                agent, thread, opened.run, interrupt, opened.opened_at_ms, opened.position
            )
            item = Item(opened, value or b"")
            if self.index.put(item) and self._listeners:
                self._tell({"op": "open", "item": item.to_json(self.now_ms())})
            return
        found = self.index.remove(key_of(agent, thread, interrupt))
        status = headers.get(records.HEADER_CLOSED, b"").decode("ascii", "replace")
        closed_at = _int(headers.get(records.HEADER_CLOSED_AT))
        opened_at = _int(headers.get(records.HEADER_OPENED_AT))
        shown = status if status in records.CLOSE_STATUSES else "resolved"
        self.history.closed(agent, thread, interrupt, shown, closed_at, opened_at)
        if closed_at is not None:
            latency = None if opened_at is None else max(0.0, (closed_at - opened_at) / 1000)
            self.index.closed(Closure(agent, status, closed_at, latency))
        if found is not None and self._listeners:
            self._tell(
                {
                    "op": "close",
                    "key": found.key,
                    "agent": agent,
                    "thread": thread,
                    "interrupt": interrupt,
                    "status": shown,
                }
            )

    def verdict(self, value: bytes | None, at: Position | None = None) -> None:
        """One audit topic record (`at`: its topic, partition and offset, so that one
        read again is not taken twice)."""
        try:
            found = audit.read(value)
        except audit.UnreadableAudit as exc:
            self.unreadable_audit += 1
            log.warning("unreadable audit record skipped", extra={"error": str(exc)})
            return
        if found is not None:
            self.history.verdict(found, at)

    def warning(self, agent: str | None, code: str | None, at_ms: int) -> None:
        """A warning's code, or a rejection's reason, about `agent`; only those the
        summary counts are kept."""
        if agent is not None and code in COUNTED_WARNINGS:
            self.index.warned(at_ms, agent, code)

    # --- the InboxSource ------------------------------------------------------------------

    def interrupts(self, query: Mapping[str, list[str]]) -> dict[str, Any]:
        """The GET /interrupts answer; for a parameter it cannot read, an error answer
        (`error`: "bad_query", `detail` naming the parameter, no items: the API's 400)."""
        now = self.now_ms()
        try:
            parsed = queries.parse(query)
        except queries.QueryError as exc:
            return {
                "error": "bad_query",
                "detail": str(exc),
                "items": [],
                "next": None,
                "total": 0,
                "asOfMs": now,
                "lagSeconds": self.lag_seconds,
            }
        page = self.index.query(parsed, now)
        return {
            "items": [item.to_json(now) for item in page.items],
            "next": None if page.next is None else page.next.encode(),
            "total": page.total,
            "asOfMs": now,
            "lagSeconds": self.lag_seconds,
        }

    def thread(self, agent: str, thread: str) -> dict[str, Any] | None:
        """The GET /threads/{agent}/{thread} answer: its open interrupts, the runs the
        view knows of and how their interrupts closed, closes whose run it does not
        know, and its last verdicts (null, saying why, when the audit trail is not
        read); None when the view holds nothing of the thread."""
        items = self.index.thread(agent, thread)
        past = self.history.get(agent, thread)
        if not items and past is None:
            return None
        now = self.now_ms()
        shown = [item.to_json(now) for item in items]
        unknown = self.trail.unknown(agent)
        # from the trail's start, or later for a thread the history may have forgotten:
        # known from its first record since (or, not held, from the last forgetting)
        forgot = self.history.forgot_at_ms if past is None else past.since_ms
        known = [t for t in (self.trail.since_ms, forgot) if t is not None]
        since = None if unknown is not None or not known else max(known)
        return {
            "agent": agent,
            "thread": thread,
            "runs": _runs(shown, past),
            "open": shown,
            "closesWithoutRun": [
                {
                    "interrupt": c.interrupt,
                    "status": c.status,
                    "openedAtMs": c.opened_at_ms,
                    "closedAtMs": c.closed_at_ms,
                }
                for c in (past.loose if past is not None else ())
            ],
            "verdicts": None
            if unknown is not None
            else [orjson.loads(v) for v in reversed(past.verdicts if past is not None else ())],
            "verdictsKnown": unknown is None,
            "verdictsUnknownReason": unknown,
            "verdictsSinceMs": since,
            "verdictsCaughtUp": unknown is None and self.trail.caught_up,
        }

    def summary(self) -> dict[str, Any]:
        """The GET /interrupts/summary answer."""
        now = self.now_ms()
        index = self.index
        latencies: dict[str, list[float]] = {}
        for close in index.closes(now):
            if close.status in ANSWERED and close.latency_s is not None:
                latencies.setdefault(close.agent, []).append(close.latency_s)
        warned: dict[str, dict[str, int]] = {}
        for _, agent, code in index.warnings(now):
            counts = warned.setdefault(agent, {})
            counts[code] = counts.get(code, 0) + 1
        agents = sorted(set(index.agents()) | set(latencies) | set(warned))
        return {
            "agents": [
                {
                    "agent": agent,
                    "open": index.open_of(agent),
                    "byReason": index.reasons_of(agent),
                    "latency": {
                        "p50Seconds": percentile(latencies.get(agent, []), 0.50),
                        "p95Seconds": percentile(latencies.get(agent, []), 0.95),
                    },
                    **{
                        name: warned.get(agent, {}).get(code, 0)
                        for code, name in COUNTED_WARNINGS.items()
                    },
                }
                for agent in agents
            ],
            "lagSeconds": self.lag_seconds,
            "asOfMs": now,
        }

    async def changes(self) -> AsyncIterator[dict[str, Any]]:
        """What opens and closes from now on; ends when the view stops (or this listener
        fell MAX_PENDING_CHANGES behind)."""
        if self._stopped:
            return
        queue: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue(MAX_PENDING_CHANGES)
        self._listeners.add(queue)
        try:
            while (change := await queue.get()) is not _END:
                assert change is not None
                yield change
        finally:
            self._listeners.discard(queue)

    def stop(self) -> None:
        """End every listener's changes."""
        self._stopped = True
        for queue in list(self._listeners):
            self._end(queue)

    def _tell(self, change: dict[str, Any]) -> None:
        for queue in list(self._listeners):
            if queue.qsize() >= MAX_PENDING_CHANGES - 1:
                self._end(queue)  # too far behind: its stream ends
                continue
            queue.put_nowait(change)

    def _end(self, queue: asyncio.Queue[dict[str, Any] | None]) -> None:
        self._listeners.discard(queue)
        while queue.full():
            queue.get_nowait()
        queue.put_nowait(_END)


def _runs(shown: list[dict[str, Any]], past: Past | None) -> list[dict[str, Any]]:
    """The runs the view knows of, oldest first: the history's, and those of the open
    interrupts (the index's word on what is open wins)."""
    runs: dict[str, dict[str, Any]] = {}
    if past is not None:
        for kept in past.runs.values():
            runs[kept.run] = {
                "run": kept.run,
                "status": kept.status
                or ("interrupted" if kept.finished_at_ms is not None else "forwarded"),
                "startedAtMs": kept.started_at_ms,
                "closedAtMs": kept.finished_at_ms,
                "interrupts": {
                    interrupt: {"interrupt": interrupt, "status": status, "closedAtMs": at}
                    for interrupt, (status, at, _) in sorted(
                        kept.interrupts.items(), key=lambda i: i[1][2]
                    )
                },
                "interruptsOmitted": kept.omitted,
            }
    for item in shown:
        if item["run"] is None:
            continue
        run = runs.setdefault(
            item["run"],
            {
                "run": item["run"],
                "status": "interrupted",
                "startedAtMs": None,
                "closedAtMs": item["openedAtMs"],
                "interrupts": {},
                "interruptsOmitted": 0,
            },
        )
        run["status"] = "interrupted"
        run["closedAtMs"] = run["closedAtMs"] or item["openedAtMs"]
        run["interrupts"][item["interrupt"]] = {
            "interrupt": item["interrupt"],
            "status": OPEN,
            "closedAtMs": None,
        }
    ordered = sorted(
        runs.values(),
        key=lambda r: r["startedAtMs"] if r["startedAtMs"] is not None else r["closedAtMs"],
    )
    for run in ordered:
        run["interrupts"] = list(run["interrupts"].values())
    return ordered


def _int(raw: bytes | None) -> int | None:
    if raw is None:
        return None
    try:
        return int(raw)
    except ValueError:
        return None


__all__ = ["InboxView", "iso"]
