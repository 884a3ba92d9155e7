"""A thread's state: a plain, immutable, serialisable value.

The lifecycle module produces new states from events; the judge reads them
and records forwards. `to_dict` / `from_dict` give the plain form (the changelog
codec reads its Avro versions 1-3 through `from_dict`; version 4 is its own).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class RunStatus(StrEnum):
    """How the thread's latest run stands."""

    UNKNOWN = "unknown"  # no run seen on this thread yet
    ACTIVE = "active"
    SUCCEEDED = "succeeded"
    INTERRUPTED = "interrupted"
    CANCELLED = "cancelled"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class InterruptRecord:
    """One interrupt delivered by an interrupting RUN_FINISHED.

    Its `responseSchema` is judged once, when the interrupt is recorded
    (`response_schema.record`): a usable schema is kept as its canonical JSON bytes
    (sorted keys, compact; one object shared by every interrupt with the same schema
    while the schema cache knows it), an unusable one only as the reason why
    (`response_schema_unusable`), never as a tree of objects.
    """

    id: str
    reason: str
    message: str | None = None
    tool_call_id: str | None = None
    response_schema: bytes | None = None
    expires_at: str | None = None
    metadata: dict[str, Any] | None = None
    subagent_run_id: str | None = None
    expiry_announced: bool = False
    response_schema_unusable: str | None = None
    # the name of the tool call `tool_call_id` names, when the run announced it with
    # TOOL_CALL_START (and the run's map still held it): the approver policy's `tool`
    tool_name: str | None = None


@dataclass(frozen=True, slots=True)
class SuspendedSubagent:
    """A subagent invocation that finished with the suspended outcome."""

    subagent_run_id: str
    interrupt_ids: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ForwardRecord:
    """A request the gateway forwarded on this thread.

    `fingerprint` identifies its runId and resume entries; `answered_run_id`
    is the interrupted run it answered (None when it answered nothing);
    `settled` turns true once the agent moved the thread on (RUN_STARTED or
    RUN_ERROR), after which it no longer blocks other answers.
    """

    run_id: str
    fingerprint: str
    answered_run_id: str | None = None
    interrupt_ids: tuple[str, ...] = ()
    settled: bool = False


FORWARDS_KEPT = 8  # forwards remembered per thread, for duplicate detection

# --- what one thread may accumulate -------------------------------------------------------
# Chosen so that the largest state these bounds admit, with a record key (thread id) of
# up to 8 KiB, encodes to a changelog value under the 1,000,000-byte record limit
# (tests/codec/test_changelog.py builds that state and encodes it). A stream that
# exceeds a bound gets a `protocol_violation` warning naming it (see lifecycle).
MAX_ID_BYTES = 256  # run, interrupt, subagent-invocation and tool-call ids (UTF-8)
MAX_INTERRUPTS_PER_RUN = 32
# reason + message + expiresAt + responseSchema + metadata (as JSON) of one run's interrupts
MAX_INTERRUPT_CONTENT_BYTES = 600_000
MAX_OPEN_SUBAGENTS = 32  # invocations open at once within a run
MAX_SUSPENDED = 16  # suspended invocations remembered per thread
MAX_IDS_PER_SUSPENSION = 32  # interrupt ids remembered per suspended invocation
# The active run's tool calls remembered (toolCallId -> toolCallName), the most recent;
# an older one's name is forgotten, and an interrupt naming it has no tool name.
MAX_TOOL_CALLS_PER_RUN = 64
MAX_TOOL_NAME_BYTES = 256  # a longer toolCallName is not remembered (UTF-8)
_DIGEST_PREFIX_CHARS = 32


def utf8_len(text: str) -> int:
    """Bytes of `text` in UTF-8 (a lone surrogate counts, never raises)."""
    return len(text.encode("utf-8", "surrogatepass"))


def bounded_id(text: str) -> str:
    """`text` when it fits MAX_ID_BYTES, else a fixed-size stand-in that keeps identity.

    The stand-in is its first characters and a BLAKE2b digest of the whole id, so
    two long ids are equal exactly when their stand-ins are (up to a 128-bit
    collision). Used for ids the gateway only compares with each other (run and
    subagent-invocation ids), never with a client's resume entries.
    """
    if len(text) * 4 <= MAX_ID_BYTES or utf8_len(text) <= MAX_ID_BYTES:
        return text
    digest = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()
    return f"{text[:_DIGEST_PREFIX_CHARS]}...#{digest}"


@dataclass(frozen=True, slots=True)
class ThreadState:
    thread_id: str
    status: RunStatus = RunStatus.UNKNOWN
    run_id: str | None = None
    outcome: str | None = None  # success | interrupt | cancelled, for closed runs
    # The open interrupts: those of the run being continued. While a continuation
    # is active they move to `held_interrupts` (not judged, not announced);
    # RUN_FINISHED replaces them, a failure before closing opens them again.
    interrupts: tuple[InterruptRecord, ...] = ()
    closed_at_ms: int | None = None
    failed_late: bool = False  # a RUN_ERROR arrived after RUN_FINISHED
    open_subagents: tuple[str, ...] = ()
    suspended: tuple[SuspendedSubagent, ...] = ()
    forwards: tuple[ForwardRecord, ...] = field(default=())
    updated_ms: int = 0
    interrupts_run_id: str | None = None  # the run that raised the open or held interrupts
    interrupts_closed_at_ms: int | None = None  # when that run closed
    held_interrupts: tuple[InterruptRecord, ...] = ()  # continued by the active run
    # The active run's tool calls as (toolCallId, toolCallName), oldest first, at most
    # MAX_TOOL_CALLS_PER_RUN; empty once the run closes (its interrupts keep the names).
    tool_calls: tuple[tuple[str, str], ...] = ()

    @property
    def is_closed(self) -> bool:
        return self.status not in (RunStatus.UNKNOWN, RunStatus.ACTIVE)

    @property
    def has_open_interrupts(self) -> bool:
        return bool(self.interrupts)


def to_dict(state: ThreadState) -> dict[str, Any]:
    """The plain (JSON- and Avro-friendly) form of a state (a kept `responseSchema` is
    its canonical JSON as text)."""
    return {
        "thread_id": state.thread_id,
        "status": str(state.status),
        "run_id": state.run_id,
        "outcome": state.outcome,
        "interrupts": [_interrupt_dict(i) for i in state.interrupts],
        "closed_at_ms": state.closed_at_ms,
        "failed_late": state.failed_late,
        "open_subagents": list(state.open_subagents),
        "suspended": [
            {"subagent_run_id": s.subagent_run_id, "interrupt_ids": list(s.interrupt_ids)}
            for s in state.suspended
        ],
        "forwards": [
            {
                "run_id": f.run_id,
                "fingerprint": f.fingerprint,
                "answered_run_id": f.answered_run_id,
                "interrupt_ids": list(f.interrupt_ids),
                "settled": f.settled,
            }
            for f in state.forwards
        ],
        "updated_ms": state.updated_ms,
        "interrupts_run_id": state.interrupts_run_id,
        "interrupts_closed_at_ms": state.interrupts_closed_at_ms,
        "held_interrupts": [_interrupt_dict(i) for i in state.held_interrupts],
        "tool_calls": [list(call) for call in state.tool_calls],
    }


def _interrupt_dict(i: InterruptRecord) -> dict[str, Any]:
    return {
        "id": i.id,
        "reason": i.reason,
        "message": i.message,
        "tool_call_id": i.tool_call_id,
        "response_schema": None if i.response_schema is None else i.response_schema.decode(),
        "expires_at": i.expires_at,
        "metadata": i.metadata,
        "subagent_run_id": i.subagent_run_id,
        "expiry_announced": i.expiry_announced,
        "response_schema_unusable": i.response_schema_unusable,
        "tool_name": i.tool_name,
    }


def _interrupt_record(i: dict[str, Any]) -> InterruptRecord:
    return InterruptRecord(
        id=i["id"],
        reason=i["reason"],
        message=i.get("message"),
        tool_call_id=i.get("tool_call_id"),
        response_schema=_kept_schema(i.get("response_schema")),
        expires_at=i.get("expires_at"),
        metadata=i.get("metadata"),
        subagent_run_id=i.get("subagent_run_id"),
        expiry_announced=bool(i.get("expiry_announced", False)),
        response_schema_unusable=i.get("response_schema_unusable"),
        tool_name=i.get("tool_name"),
    )


def _kept_schema(value: str | bytes | None) -> bytes | None:
    return value.encode() if isinstance(value, str) else value


def from_dict(data: dict[str, Any]) -> ThreadState:
    """Inverse of `to_dict`.

    A state written before `interrupts_run_id` existed (changelog v1) had its
    interrupts from its latest run only: they are that run's, closed then.
    """
    interrupts_run_id = data.get("interrupts_run_id")
    interrupts_closed_at_ms = data.get("interrupts_closed_at_ms")
    if data.get("interrupts") and interrupts_run_id is None and interrupts_closed_at_ms is None:
        interrupts_run_id = data.get("run_id")
        interrupts_closed_at_ms = data.get("closed_at_ms")
    return ThreadState(
        thread_id=data["thread_id"],
        status=RunStatus(data["status"]),
        run_id=data.get("run_id"),
        outcome=data.get("outcome"),
        interrupts=tuple(_interrupt_record(i) for i in data.get("interrupts") or ()),
        closed_at_ms=data.get("closed_at_ms"),
        failed_late=bool(data.get("failed_late", False)),
        open_subagents=tuple(data.get("open_subagents") or ()),
        suspended=tuple(
            SuspendedSubagent(s["subagent_run_id"], tuple(s.get("interrupt_ids") or ()))
            for s in data.get("suspended") or ()
        ),
        forwards=tuple(
            ForwardRecord(
                run_id=f["run_id"],
                fingerprint=f["fingerprint"],
                answered_run_id=f.get("answered_run_id"),
                interrupt_ids=tuple(f.get("interrupt_ids") or ()),
                settled=bool(f.get("settled", False)),
            )
            for f in data.get("forwards") or ()
        ),
        updated_ms=int(data.get("updated_ms") or 0),
        interrupts_run_id=interrupts_run_id,
        interrupts_closed_at_ms=interrupts_closed_at_ms,
        held_interrupts=tuple(_interrupt_record(i) for i in data.get("held_interrupts") or ()),
        tool_calls=tuple((c[0], c[1]) for c in data.get("tool_calls") or ()),
    )
