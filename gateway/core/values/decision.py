"""Decisions: what the judge returns for one run request, as plain values."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gateway.core.values.approvers import ApproverRule
from gateway.core.values.codes import Verdict
from gateway.core.values.findings import Finding
from gateway.core.values.identity import Identity


@dataclass(frozen=True, slots=True)
class Policy:
    """How strictly the judge reads a request.

    strict: unrecognised resume entries and unknown threads reject the
    request instead of producing a warning. approvers: who may answer which
    interrupts (`approvers.py`); none: anyone, as before there was a policy.
    """

    strict: bool = False
    approvers: tuple[ApproverRule, ...] = ()


@dataclass(frozen=True, slots=True)
class Caller:
    """Who sent a request, and to whom, as the shell saw it: what the approver policy
    judges with.

    identity: verified (None: unattested). unverified: why identity headers the request
    carried were not trusted (None: it carried none, or they were verified). agent and
    group: the agent the request is for and the group whose topics carry it (None: an
    agent of its own topics), to pick the policy's rule.
    """

    identity: Identity | None = None
    unverified: str | None = None
    agent: str | None = None
    group: str | None = None


@dataclass(frozen=True, slots=True)
class Answer:
    """An open interrupt that a forwarded request answered or abandoned."""

    interrupt_id: str
    reason: str
    status: str  # resolved | cancelled
    raised_at_ms: int | None  # when the interrupting run closed
    subagent_run_id: str | None = None
    tool_name: str | None = None  # the tool call's name, when the run announced it


@dataclass(frozen=True, slots=True)
class Decision:
    verdict: Verdict
    reasons: tuple[Finding, ...] = ()
    warnings: tuple[Finding, ...] = ()
    input: dict[str, Any] | None = None  # on forward: the input exactly as it will be sent
    thread_id: str | None = None
    run_id: str | None = None
    answers: tuple[Answer, ...] = ()
    # on forward: where members were removed from the input, in the input as received
    removed: tuple[tuple[str | int, ...], ...] = ()
    # who sent the request, as verified by the shell (None: unattested)
    identity: Identity | None = None

    def to_json(self) -> dict[str, Any]:
        """The `agui-gateway check` / reply form of the decision."""
        out: dict[str, Any] = {
            "verdict": str(self.verdict),
            "reasons": [r.to_json() for r in self.reasons],
            "warnings": [w.to_json() for w in self.warnings],
        }
        if self.verdict is Verdict.FORWARD:
            out["input"] = self.input
        return out
