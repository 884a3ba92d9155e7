"""An `InboxSource` held in memory: the inbox contract implemented for the page's tests.

Open interrupts are kept by key; `open` and `close` change them and tell every
subscriber of `changes()`, as the view does when its topic moves. `interrupts` answers
the contract's query (agent, reason, olderThan, expiringBefore, q, limit, cursor),
oldest first.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Mapping
from datetime import UTC, datetime
from typing import Any

_END = object()


def iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def item(
    agent: str,
    thread: str,
    interrupt: str,
    *,
    run: str = "r-1",
    reason: str | None = None,
    message: str | None = None,
    schema: Any = None,
    opened_ms: int | None = None,
    expires_ms: int | None = None,
    tool_call: str | None = None,
    subagent: dict[str, str] | None = None,
) -> dict[str, Any]:
    """An Interrupt item as the contract shapes it."""
    opened = opened_ms if opened_ms is not None else int(time.time() * 1000)
    return {
        "key": f"{agent}\x1f{thread}\x1f{interrupt}",
        "agent": agent,
        "thread": thread,
        "run": run,
        "interrupt": interrupt,
        "reason": reason,
        "message": message,
        "toolCallId": tool_call,
        "responseSchema": schema,
        "subagent": subagent,
        "openedAtMs": opened,
        "openedAt": iso(opened),
        "expiresAtMs": expires_ms,
        "expiresAt": iso(expires_ms) if expires_ms is not None else None,
        "ageSeconds": 0.0,
    }


def _when(text: str) -> int | None:
    if text.isdigit():
        return int(text)
    try:
        return int(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)
    except ValueError:
        return None


class MemorySource:
    def __init__(self, lag: float | None = 0.2) -> None:
        self.items: dict[str, dict[str, Any]] = {}
        self.lag = lag
        self.queries: list[Mapping[str, list[str]]] = []
        self.closed: list[tuple[str, str]] = []  # (key, status)
        self.subscribers: list[asyncio.Queue[Any]] = []
        # what the view would have measured, per agent (the tests set them)
        self.latency: dict[str, tuple[float | None, float | None]] = {}
        self.unrecognised: dict[str, int] = {}
        self.uncovered: dict[str, int] = {}
        # the thread answer's last verdicts (newest first) by (agent, thread), or why
        # they are not known
        self.verdicts: dict[tuple[str, str], list[dict[str, Any]]] = {}
        self.verdicts_unknown: str | None = None

    # --- changing it --------------------------------------------------------------------

    def open(self, entry: dict[str, Any]) -> None:
        self.items[entry["key"]] = entry
        self._tell({"op": "open", "item": entry})

    def close(self, key: str, status: str = "resolved") -> None:
        entry = self.items.pop(key)
        self.closed.append((key, status))
        self._tell(
            {
                "op": "close",
                "key": key,
                "agent": entry["agent"],
                "thread": entry["thread"],
                "interrupt": entry["interrupt"],
                "status": status,
            }
        )

    def stop(self) -> None:
        for queue in self.subscribers:
            queue.put_nowait(_END)

    def _tell(self, change: dict[str, Any]) -> None:
        for queue in self.subscribers:
            queue.put_nowait(change)

    # --- the contract ---------------------------------------------------------------------

    def _aged(self, entry: dict[str, Any], now_ms: int) -> dict[str, Any]:
        return {**entry, "ageSeconds": (now_ms - entry["openedAtMs"]) / 1000}

    def interrupts(self, query: Mapping[str, list[str]]) -> dict[str, Any]:
        self.queries.append(query)
        now = int(time.time() * 1000)
        found = sorted(self.items.values(), key=lambda e: (e["openedAtMs"], e["key"]))
        agents = query.get("agent")
        if agents:
            found = [e for e in found if e["agent"] in agents]
        for reason in query.get("reason", []):
            found = [e for e in found if e["reason"] == reason]
        for older in query.get("olderThan", []):
            found = [e for e in found if now - e["openedAtMs"] >= float(older) * 1000]
        for before in query.get("expiringBefore", []):
            limit = _when(before)
            if limit is None:
                return {"error": "bad_request", "detail": "expiringBefore"}
            found = [e for e in found if e["expiresAtMs"] is not None and e["expiresAtMs"] < limit]
        for text in query.get("q", []):
            needle = text.lower()
            found = [
                e
                for e in found
                if any(
                    needle in str(e.get(k) or "").lower()
                    for k in ("agent", "thread", "interrupt", "reason", "message")
                )
            ]
        start = int(query.get("cursor", ["0"])[0])
        limit = int(query.get("limit", ["50"])[0])
        page = found[start : start + limit]
        more = start + limit < len(found)
        return {
            "items": [self._aged(e, now) for e in page],
            "next": str(start + limit) if more else None,
            "total": len(found),
            "asOfMs": now,
            "lagSeconds": self.lag,
        }

    def thread(self, agent: str, thread: str) -> dict[str, Any] | None:
        now = int(time.time() * 1000)
        mine = [e for e in self.items.values() if e["agent"] == agent and e["thread"] == thread]
        if not mine and not any(k.split("\x1f")[:2] == [agent, thread] for k, _ in self.closed):
            return None
        mine.sort(key=lambda e: e["openedAtMs"])  # then as the run listed them
        runs = sorted({e["run"] for e in mine})
        known = self.verdicts_unknown is None
        return {
            "agent": agent,
            "thread": thread,
            "runs": [
                {
                    "run": r,
                    "status": "interrupted",
                    "startedAtMs": None,
                    "closedAtMs": min(e["openedAtMs"] for e in mine if e["run"] == r),
                    "interrupts": [
                        {"interrupt": e["interrupt"], "status": "open", "closedAtMs": None}
                        for e in mine
                        if e["run"] == r
                    ],
                    "interruptsOmitted": 0,
                }
                for r in runs
            ],
            "open": [self._aged(e, now) for e in mine],
            "closesWithoutRun": [],
            "verdicts": self.verdicts.get((agent, thread), []) if known else None,
            "verdictsKnown": known,
            "verdictsUnknownReason": self.verdicts_unknown,
            "verdictsSinceMs": None,
            "verdictsCaughtUp": known,
        }

    def summary(self) -> dict[str, Any]:
        agents: dict[str, dict[str, Any]] = {}
        for e in self.items.values():
            entry = agents.setdefault(
                e["agent"],
                {
                    "agent": e["agent"],
                    "open": 0,
                    "byReason": {},
                    "latency": dict(
                        zip(
                            ("p50Seconds", "p95Seconds"),
                            self.latency.get(e["agent"], (None, None)),
                            strict=True,
                        )
                    ),
                    "unrecognisedEntries": self.unrecognised.get(e["agent"], 0),
                    "uncoveredInterrupts": self.uncovered.get(e["agent"], 0),
                },
            )
            entry["open"] += 1
            reason = e["reason"] or ""
            entry["byReason"][reason] = entry["byReason"].get(reason, 0) + 1
        return {
            "agents": sorted(agents.values(), key=lambda a: a["agent"]),
            "lagSeconds": self.lag,
            "asOfMs": int(time.time() * 1000),
        }

    async def changes(self) -> AsyncIterator[dict[str, Any]]:
        queue: asyncio.Queue[Any] = asyncio.Queue()
        self.subscribers.append(queue)
        try:
            while True:
                change = await queue.get()
                if change is _END:
                    return
                yield change
        finally:
            self.subscribers.remove(queue)
