"""A thread's state: a plain, immutable, serialisable value.

The lifecycle module produces new states from events; the judge reads them
and records forwards. `to_dict` / `from_dict` give the plain form the service
persists (the changelog codec maps it onto its Avro schema).
"""

from __future__ import annotations

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
    """One interrupt delivered by an interrupting RUN_FINISHED, every field kept."""

    id: str
    reason: str
    message: str | None = None
    tool_call_id: str | None = None
    response_schema: dict[str, Any] | None = None
    expires_at: str | None = None
    metadata: dict[str, Any] | None = None
    subagent_run_id: str | None = None
    expiry_announced: bool = False


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


@dataclass(frozen=True, slots=True)
class ThreadState:
    thread_id: str
    status: RunStatus = RunStatus.UNKNOWN
    run_id: str | None = None
    outcome: str | None = None  # success | interrupt | cancelled, for closed runs
    interrupts: tuple[InterruptRecord, ...] = ()  # open interrupts of the latest run
    closed_at_ms: int | None = None
    failed_late: bool = False  # a RUN_ERROR arrived after RUN_FINISHED
    open_subagents: tuple[str, ...] = ()
    suspended: tuple[SuspendedSubagent, ...] = ()
    forwards: tuple[ForwardRecord, ...] = field(default=())
    updated_ms: int = 0

    @property
    def is_closed(self) -> bool:
        return self.status not in (RunStatus.UNKNOWN, RunStatus.ACTIVE)

    @property
    def has_open_interrupts(self) -> bool:
        return bool(self.interrupts)


def to_dict(state: ThreadState) -> dict[str, Any]:
    """The plain (JSON- and Avro-friendly) form of a state."""
    return {
        "thread_id": state.thread_id,
        "status": str(state.status),
        "run_id": state.run_id,
        "outcome": state.outcome,
        "interrupts": [
            {
                "id": i.id,
                "reason": i.reason,
                "message": i.message,
                "tool_call_id": i.tool_call_id,
                "response_schema": i.response_schema,
                "expires_at": i.expires_at,
                "metadata": i.metadata,
                "subagent_run_id": i.subagent_run_id,
                "expiry_announced": i.expiry_announced,
            }
            for i in state.interrupts
        ],
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
    }


def from_dict(data: dict[str, Any]) -> ThreadState:
    """Inverse of `to_dict`."""
    return ThreadState(
        thread_id=data["thread_id"],
        status=RunStatus(data["status"]),
        run_id=data.get("run_id"),
        outcome=data.get("outcome"),
        interrupts=tuple(
            InterruptRecord(
                id=i["id"],
                reason=i["reason"],
                message=i.get("message"),
                tool_call_id=i.get("tool_call_id"),
                response_schema=i.get("response_schema"),
                expires_at=i.get("expires_at"),
                metadata=i.get("metadata"),
                subagent_run_id=i.get("subagent_run_id"),
                expiry_announced=bool(i.get("expiry_announced", False)),
            )
            for i in data.get("interrupts") or ()
        ),
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
    )
