"""Who may answer an interrupt: the approver policy's rules, as plain values.

A rule applies to the interrupts of an agent (or of a group's agents, or of any agent:
"*") with a `reason` (or any: "*") and naming a tool call of a `tool` (or any: "*");
the most specific rule that applies wins: the agent's own over its group's over "*",
then a named tool over "*", then a named reason over "*"; the first in the settings'
order among equals. No rule for an interrupt: anyone may answer it.

An interrupt's tool name is the `toolCallName` of the run's TOOL_CALL_START whose
`toolCallId` the interrupt names (see gateway.core.events.toolcalls). An interrupt
with no tool name (no toolCallId, a call the run never announced, or one past the
run's bound) matches only rules whose `tool` is "*".

`allows` says, for one answered or abandoned interrupt, whether the identity the shell
verified (None: unattested) may do that: a verdict, never an exception.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from gateway.core.values.identity import Identity

ANY = "*"


class Allowed(Enum):
    """One answer's verdict under the policy."""

    YES = "yes"
    NOT_ALLOWED = "not_allowed"  # a verified identity the rule does not name
    UNVERIFIED = "unverified"  # no verified identity, and the rule wants one


@dataclass(frozen=True, slots=True)
class ApproverRule:
    """Who may answer (status `resolved`) or abandon (status `cancelled`) an interrupt.

    `answer_subjects`/`answer_groups`: the subjects, and the groups (or roles), that
    may answer; both empty: any identity (verified, unless `unattested`). A subject of
    "*" is any verified identity. `abandon_subjects`/`abandon_groups`: who may abandon;
    None for both: the same as may answer. `unattested`: whether an answer (or an
    abandonment) with no verified identity is accepted where the lists name nobody.
    """

    agent: str = ANY
    reason: str = ANY
    tool: str = ANY
    answer_subjects: tuple[str, ...] = ()
    answer_groups: tuple[str, ...] = ()
    abandon_subjects: tuple[str, ...] | None = None
    abandon_groups: tuple[str, ...] | None = None
    unattested: bool = False

    def applies(
        self, agent: str | None, group: str | None, reason: str, tool: str | None = None
    ) -> int | None:
        """How specifically this rule names (agent, tool, reason): higher is more
        specific; None when it does not apply. `tool` None: the interrupt has no known
        tool name, which no named `tool` matches."""
        if self.agent == ANY:
            agent_rank = 0
        elif agent is not None and self.agent == agent:
            agent_rank = 2
        elif group is not None and self.agent == group:
            agent_rank = 1
        else:
            return None
        if self.tool == ANY:
            tool_rank = 0
        elif tool is not None and self.tool == tool:
            tool_rank = 1
        else:
            return None
        if self.reason == ANY:
            return agent_rank * 4 + tool_rank * 2
        if self.reason == reason:
            return agent_rank * 4 + tool_rank * 2 + 1
        return None

    def who(self, status: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """The (subjects, groups) allowed to give an entry of `status`."""
        if status == "cancelled" and (
            self.abandon_subjects is not None or self.abandon_groups is not None
        ):
            return self.abandon_subjects or (), self.abandon_groups or ()
        return self.answer_subjects, self.answer_groups

    def allows(self, identity: Identity | None, status: str) -> Allowed:
        """Whether `identity` may give an entry of `status` to an interrupt it rules."""
        subjects, groups = self.who(status)
        if identity is None:
            if subjects or groups or not self.unattested:
                return Allowed.UNVERIFIED
            return Allowed.YES
        if not subjects and not groups:
            return Allowed.YES
        if ANY in subjects or identity.subject in subjects:
            return Allowed.YES
        if any(g in groups for g in identity.groups):
            return Allowed.YES
        return Allowed.NOT_ALLOWED


def rule_for(
    rules: tuple[ApproverRule, ...],
    agent: str | None,
    group: str | None,
    reason: str,
    tool: str | None = None,
) -> ApproverRule | None:
    """The rule that governs an interrupt of `reason` (naming a call of `tool`, None:
    no known tool) raised by `agent` (of `group`): the most specific that applies, the
    first of those in order; None: no rule."""
    best: ApproverRule | None = None
    best_rank = -1
    for rule in rules:
        rank = rule.applies(agent, group, reason, tool)
        if rank is not None and rank > best_rank:
            best, best_rank = rule, rank
    return best
