"""The interrupts topic's records: one per open interrupt, a tombstone when it closes.

The gateway writes them in the same transaction as the thread state change that opens
or closes an interrupt (`changes` derives them from a thread's old and new state), so
the compacted topic holds exactly the open interrupts the gateway holds, and any
process can build the inbox's view by reading it (`gateway.inbox`).

Open, here, is what a person can still answer: the thread's open interrupts less those
a forward already answered and the agent has not yet moved on from. Held interrupts
(a continuation run is active) are not open.

Beside them, one record per thread says how its latest run closed (`RunClosed`: run id,
status, when), written when a run closes and a tombstone when the thread is forgotten,
so that the inbox can tell a thread's runs and how each closed, not only those that
ended with interrupts. Its key is the thread's alone (`run_key`), which no interrupt's
key can be (an interrupt's always has a separator after the thread).

Key: agent, thread and interrupt id, each length-prefixed
(`<len>:<agent>:<len>:<thread>:<interrupt>`, as the changelog's group keys). Value:
JSON (`Opened.to_json`), bounded: a message over `MAX_MESSAGE_CHARS` is cut and a
`responseSchema` over `MAX_SCHEMA_BYTES` is left out (the record says what was cut), so
a hostile agent's huge interrupt never makes a record Kafka refuses. A tombstone's
headers say how (`agui-closed`: resolved, cancelled, expired, superseded), when it
closed and when it opened, so a reader computes response latency without the value.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from gateway.core.reading import expiry
from gateway.core.requests.sweep import answered_ids
from gateway.core.values.jsontext import fitted
from gateway.core.values.thread import InterruptRecord, RunStatus, ThreadState

FORMAT_VERSION = 1
MAX_MESSAGE_CHARS = 4_096
MAX_REASON_CHARS = 256
MAX_SCHEMA_BYTES = 64 * 1024
MAX_EXPIRES_CHARS = 64

HEADER_CLOSED = "agui-closed"  # how it closed: one of CLOSE_STATUSES
HEADER_CLOSED_AT = "agui-closed-at-ms"
HEADER_OPENED_AT = "agui-opened-at-ms"
CLOSE_STATUSES = ("resolved", "cancelled", "expired", "superseded")
RUN_STATUSES = ("succeeded", "interrupted", "cancelled", "failed")  # how a run closed


class InterruptKeyError(ValueError):
    """A key that does not name an agent, a thread and an interrupt."""


def key(agent: str, thread: str, interrupt: str) -> bytes:
    return f"{len(agent)}:{agent}:{len(thread)}:{thread}:{interrupt}".encode(
        "utf-8", "surrogatepass"
    )


def run_key(agent: str, thread: str) -> bytes:
    """The key of a thread's run record."""
    return f"{len(agent)}:{agent}:{len(thread)}:{thread}".encode("utf-8", "surrogatepass")


def split_key(raw: bytes) -> tuple[str, str, str]:
    """(agent, thread, interrupt) of an interrupt's key; InterruptKeyError when it is not
    one (a run record's key included)."""
    agent, thread, interrupt = parse_key(raw)
    if interrupt is None:
        raise InterruptKeyError("a run record's key, not an interrupt's")
    return agent, thread, interrupt


def parse_key(raw: bytes) -> tuple[str, str, str | None]:
    """(agent, thread, interrupt) of a key, the interrupt None for a run record's key;
    InterruptKeyError when it is neither."""
    try:
        text = raw.decode("utf-8", "surrogatepass")
    except UnicodeDecodeError as exc:
        raise InterruptKeyError("key is not UTF-8") from exc
    parts: list[str] = []
    rest = text
    for part in range(2):
        length, colon, rest = rest.partition(":")
        if not colon or not (length.isascii() and length.isdigit()) or len(length) > 6:
            raise InterruptKeyError("key has no length prefix")
        n = int(length)
        if part == 1 and len(rest) == n:  # the thread, and nothing after it
            return parts[0], rest, None
        if len(rest) <= n or rest[n] != ":":
            raise InterruptKeyError("key's length prefix does not fit")
        parts.append(rest[:n])
        rest = rest[n + 1 :]
    return parts[0], parts[1], rest


@dataclass(frozen=True, slots=True)
class Opened:
    """An interrupt that is open (again), as its record carries it."""

    agent: str
    thread: str
    run: str | None
    interrupt: str
    reason: str | None
    message: str | None
    tool_call_id: str | None
    response_schema: Any  # parsed JSON, or None
    subagent_run_id: str | None
    opened_at_ms: int
    expires_at_ms: int | None
    group: str | None = None
    cut: tuple[str, ...] = ()  # what was cut or left out to bound the record
    position: int = 0  # its place among its run's interrupts (the run's order)
    # the tool call's name, when the run announced it (the approver policy's `tool`)
    tool_name: str | None = None

    def to_json(self) -> bytes:
        body: dict[str, Any] = {
            "v": FORMAT_VERSION,
            "agent": self.agent,
            "thread": self.thread,
            "run": self.run,
            "interrupt": self.interrupt,
            "reason": self.reason,
            "message": self.message,
            "toolCallId": self.tool_call_id,
            "responseSchema": self.response_schema,
            "subagentRunId": self.subagent_run_id,
            "openedAtMs": self.opened_at_ms,
            "expiresAtMs": self.expires_at_ms,
            "group": self.group,
            "position": self.position,
        }
        if self.tool_name is not None:  # a member an older reader ignores
            body["toolName"] = self.tool_name
        if self.cut:
            body["cut"] = list(self.cut)
        return fitted(orjson.dumps(body))

    @staticmethod
    def from_json(value: bytes) -> Opened:
        """Read a value; ValueError (orjson's, or a missing member) when it is not one."""
        body = _versioned(value, "an interrupt record")
        try:
            return Opened(
                agent=_text(body["agent"]),
                thread=_text(body["thread"]),
                run=_maybe_text(body.get("run")),
                interrupt=_text(body["interrupt"]),
                reason=_maybe_text(body.get("reason")),
                message=_maybe_text(body.get("message")),
                tool_call_id=_maybe_text(body.get("toolCallId")),
                response_schema=body.get("responseSchema"),
                subagent_run_id=_maybe_text(body.get("subagentRunId")),
                opened_at_ms=int(body["openedAtMs"]),
                expires_at_ms=None if body.get("expiresAtMs") is None else int(body["expiresAtMs"]),
                group=_maybe_text(body.get("group")),
                cut=tuple(str(c) for c in body.get("cut") or ()),
                position=int(body.get("position") or 0),
                tool_name=_maybe_text(body.get("toolName")),
            )
        except (KeyError, TypeError) as exc:
            raise ValueError(f"interrupt record lacks a member: {exc}") from exc


def _versioned(value: bytes, what: str) -> dict[str, Any]:
    """A record's JSON object of this format's version; ValueError (orjson's, or saying
    it is not `what` of a known version) otherwise."""
    body = orjson.loads(value)
    if not isinstance(body, dict) or body.get("v") != FORMAT_VERSION:
        raise ValueError(f"not {what} of a known version")
    return body


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError("a member that must be text is not")
    return value


def _maybe_text(value: Any) -> str | None:
    return None if value is None else _text(value)


@dataclass(frozen=True, slots=True)
class Closed:
    """An interrupt that left the open ones: how, when, and when it had opened."""

    agent: str
    thread: str
    interrupt: str
    status: str  # one of CLOSE_STATUSES
    closed_at_ms: int
    opened_at_ms: int | None

    def headers(self) -> list[tuple[str, bytes]]:
        headers = [
            (HEADER_CLOSED, self.status.encode()),
            (HEADER_CLOSED_AT, str(self.closed_at_ms).encode()),
        ]
        if self.opened_at_ms is not None:
            headers.append((HEADER_OPENED_AT, str(self.opened_at_ms).encode()))
        return headers


def open_interrupts(state: ThreadState | None) -> dict[str, InterruptRecord]:
    """A thread's interrupts a person can still answer, by id."""
    if state is None or not state.interrupts:
        return {}
    answered = answered_ids(state)
    return {i.id: i for i in state.interrupts if i.id not in answered}


@dataclass(frozen=True, slots=True)
class RunClosed:
    """How a thread's latest run closed, as its run record carries it."""

    agent: str
    thread: str
    run: str | None
    status: str  # one of RUN_STATUSES
    closed_at_ms: int
    group: str | None = None

    def to_json(self) -> bytes:
        return fitted(
            orjson.dumps(
                {
                    "v": FORMAT_VERSION,
                    "kind": "run",
                    "agent": self.agent,
                    "thread": self.thread,
                    "run": self.run,
                    "status": self.status,
                    "closedAtMs": self.closed_at_ms,
                    "group": self.group,
                }
            )
        )

    @staticmethod
    def from_json(value: bytes) -> RunClosed:
        """Read a value; ValueError when it is not a run record."""
        body = _versioned(value, "a run record")
        if body.get("kind") != "run" or body.get("status") not in RUN_STATUSES:
            raise ValueError("not a run record, or a run status this reader does not know")
        try:
            return RunClosed(
                agent=_text(body["agent"]),
                thread=_text(body["thread"]),
                run=_maybe_text(body.get("run")),
                status=body["status"],
                closed_at_ms=int(body["closedAtMs"]),
                group=_maybe_text(body.get("group")),
            )
        except (KeyError, TypeError) as exc:
            raise ValueError(f"run record lacks a member: {exc}") from exc


_CLOSED_RUN = {
    RunStatus.SUCCEEDED: "succeeded",
    RunStatus.INTERRUPTED: "interrupted",
    RunStatus.CANCELLED: "cancelled",
    RunStatus.FAILED: "failed",
}


def run_record(
    agent: str,
    thread: str,
    old: ThreadState | None,
    new: ThreadState | None,
    at_ms: int,
    group: str | None = None,
) -> tuple[bytes, bytes | None] | None:
    """The thread's run record (key, value) for a change from `old` to `new`: how its
    latest run closed, when the run or how it stands changed to closed (a late
    RUN_ERROR makes a finished run failed); a tombstone when the thread is forgotten;
    None otherwise."""
    if new is None:
        return None if old is None else (run_key(agent, thread), None)
    status = _CLOSED_RUN.get(new.status)
    if status is None:
        return None
    if old is not None and (old.run_id, old.status) == (new.run_id, new.status):
        return None
    closed = RunClosed(
        agent,
        thread,
        new.run_id,
        status,
        new.closed_at_ms if new.closed_at_ms is not None else at_ms,
        group,
    )
    return run_key(agent, thread), closed.to_json()


def changes(
    agent: str,
    thread: str,
    old: ThreadState | None,
    new: ThreadState | None,
    at_ms: int,
    answers: Mapping[str, str] | None = None,
    group: str | None = None,
) -> list[Opened | Closed]:
    """What the inbox must learn of a thread going from `old` to `new`.

    `answers` maps an interrupt id to the status of the resume entry that answered it in
    this change (resolved or cancelled), when a forward did; `at_ms` is when it happened.
    An interrupt id raised again by a later run closes (superseded) and opens again.
    """
    before = open_interrupts(old)
    after = open_interrupts(new)
    if not before and not after:
        return []
    old_run = old.interrupts_run_id if old is not None else None
    new_run = new.interrupts_run_id if new is not None else None
    out: list[Opened | Closed] = []
    for interrupt_id in before:
        if interrupt_id in after and old_run == new_run:
            continue
        opened_at = old.interrupts_closed_at_ms if old is not None else None
        out.append(
            Closed(
                agent,
                thread,
                interrupt_id,
                _close_status(interrupt_id, old, new, answers or {}),
                at_ms,
                opened_at,
            )
        )
    assert new is not None or not after
    for interrupt_id, record in after.items():
        if interrupt_id in before and old_run == new_run:
            continue
        assert new is not None
        position = next(n for n, i in enumerate(new.interrupts) if i.id == interrupt_id)
        out.append(opened(agent, thread, new, record, group, position))
    return out


def _close_status(
    interrupt_id: str, old: ThreadState | None, new: ThreadState | None, answers: Mapping[str, str]
) -> str:
    if interrupt_id in answers:
        return "cancelled" if answers[interrupt_id] == "cancelled" else "resolved"
    if new is None:
        return "expired"  # retention forgot the thread with it still open
    run = old.interrupts_run_id if old is not None else None
    for forward in new.forwards:
        if forward.answered_run_id == run and interrupt_id in forward.interrupt_ids:
            return "resolved"
    return "superseded"


def opened(
    agent: str,
    thread: str,
    state: ThreadState,
    record: InterruptRecord,
    group: str | None = None,
    position: int = 0,
) -> Opened:
    """An open interrupt's record, bounded (`cut` names what was cut or left out)."""
    cut: list[str] = []
    message = record.message
    if message is not None and len(message) > MAX_MESSAGE_CHARS:
        message = message[:MAX_MESSAGE_CHARS]
        cut.append("message")
    reason = record.reason
    if reason is not None and len(reason) > MAX_REASON_CHARS:
        reason = reason[:MAX_REASON_CHARS]
        cut.append("reason")
    schema: Any = None
    if record.response_schema is not None:
        if len(record.response_schema) > MAX_SCHEMA_BYTES:
            cut.append("responseSchema")
        else:
            schema = orjson.loads(record.response_schema)
    expires_at_ms = None
    if record.expires_at is not None and len(record.expires_at) <= MAX_EXPIRES_CHARS:
        expires_at_ms = expiry.expires_at_ms(record.expires_at)
    return Opened(
        agent=agent,
        thread=thread,
        run=state.interrupts_run_id,
        interrupt=record.id,
        reason=reason,
        message=message,
        tool_call_id=record.tool_call_id,
        response_schema=schema,
        subagent_run_id=record.subagent_run_id,
        opened_at_ms=state.interrupts_closed_at_ms or state.closed_at_ms or state.updated_ms,
        expires_at_ms=expires_at_ms,
        group=group,
        cut=tuple(cut),
        position=position,
        tool_name=record.tool_name,
    )
