"""What a decision or a warning writes into a round.

The outputs (forward, rejection, reply, warning records, shaped by
`gateway.kafka.pairs.shaping`) and the metric updates to make once the round
commits. Records name the agent a record was for (on a group's topics, the
`agui-agent` header's; None when not usable); metrics are labelled with the
topics' owner (the agent, or the group), so their series stay bounded. The warning limiter's admissions are noted in the round, so an
aborted round gives them back.
"""

from __future__ import annotations

import functools
import logging
from typing import Any

from gateway.codec.records import (
    HEADER_AGENT,
    HEADER_REPLY_TO,
    NOT_DECODED,
    InRecord,
    OutRecord,
    dumps,
)
from gateway.core import Decision, Reason, Rule, ThreadState, Verdict, Warn
from gateway.core.values.findings import Finding
from gateway.kafka.pairs import audit, shaping
from gateway.kafka.pairs.round import Round
from gateway.kafka.wire.attestation import HEADER_IDENTITY, forwarded_json
from gateway.kafka.wire.topics import LEGAL_TOPIC, AgentTopics
from gateway.observe.metrics import Metrics, reason_label

log = logging.getLogger("gateway.pair")

# Rejection reasons that also count in a counter of their own.
_REASON_COUNTERS: dict[str, str] = {
    Reason.UNCOVERED_INTERRUPT: "uncovered_interrupts",
    Reason.EXPIRED_INTERRUPT: "expired_answers",
    Reason.UNRECOGNISED_ENTRY: "unrecognised_entries",
}


class Effects:
    def __init__(
        self,
        topics: AgentTopics,
        context: Any,  # the pair's PairContext
        group: str | None = None,
    ) -> None:
        self.topics = topics
        self.agent = topics.agent  # the owner: metrics' label
        self.group = group  # the group whose topics these are; None: an agent's own
        self.ctx = context
        self.metrics: Metrics = context.metrics

    def _headers(self, record: Any, agent: str | None) -> list[tuple[str, bytes]]:
        """An output's headers: the correlation id as received; on a group's outputs the
        agent they are for."""
        headers = shaping.correlation_headers(record) if record is not None else []
        if self.group is not None and agent is not None:
            headers.append((HEADER_AGENT, agent.encode()))
        return headers

    def internal_error(
        self,
        r: Round,
        record: InRecord,
        thread_id: str | None,
        now_ms: int,
        exc: Exception,
        agent: str | None = None,
        wall_ms: int | None = None,
    ) -> None:
        """The rejection of a request the gateway failed on (a defect)."""
        named = agent if self.group is not None else self.agent
        body = shaping.internal_error_body(record, named, thread_id, now_ms, exc, self.group)
        key, headers = shaping.output_key(record, thread_id), self._headers(record, named)
        r.out.append(OutRecord(self.topics.rejections, key, body, headers))
        if self.topics.audit is not None:
            failed = Decision(
                Verdict.REJECT,
                reasons=(
                    Finding(
                        str(Reason.INTERNAL_ERROR),
                        f"the gateway failed to judge this request ({type(exc).__name__})",
                    ),
                ),
                thread_id=thread_id,
            )
            self._audit(r, record, failed, named, thread_id, now_ms, wall_ms, headers)
        reply_to = record.header(HEADER_REPLY_TO)
        if reply_to and LEGAL_TOPIC.match(reply_to) and self.ctx.topic_exists(reply_to):
            r.out.append(OutRecord(reply_to, key, body, headers))
        r.decided.append(record.received)
        m = self.metrics
        r.deferred.append(m.requests.labels(self.agent, str(Verdict.REJECT)).inc)
        r.deferred.append(m.rejections.labels(self.agent, str(Reason.INTERNAL_ERROR)).inc)

    def decision(
        self,
        r: Round,
        record: InRecord,
        decision: Decision,
        thread_id: str | None,
        now_ms: int,
        forward: bytes | None,
        raw: Any,
        named: str | None = None,
        state: ThreadState | None = None,
        wall_ms: int | None = None,
    ) -> None:
        """A decision's outputs. `raw` is the request's JSON (NOT_DECODED if unread);
        `named` the agent the request is for (on a group's topics; None: not usable);
        `state` the thread's state it was judged against; `wall_ms` the gateway's clock
        (the audit record's decision time; `now_ms` when not given)."""
        m, agent, out = self.metrics, self.agent, r.out
        if self.group is None:
            named = agent
        r.deferred.append(m.requests.labels(agent, str(decision.verdict)).inc)
        headers = self._headers(record, named)
        key = shaping.output_key(record, thread_id)
        for warning in decision.warnings:
            self.warn(r, warning, record, thread_id, decision.run_id, named)
        reply_to = record.header(HEADER_REPLY_TO)
        # the reply (a rejection's record), built only when something writes it
        reply: dict[str, Any] | None = None
        if decision.verdict is Verdict.REJECT or reply_to:
            reply = shaping.reply_body(record, named, decision, thread_id, now_ms, raw, self.group)
        body: bytes | None = None  # the reply's JSON, once written
        if decision.verdict is Verdict.FORWARD:
            assert forward is not None
            forward_headers = headers
            if decision.identity is not None:  # who answered, for the agent to log
                forward_headers = [*headers, (HEADER_IDENTITY, forwarded_json(decision.identity))]
            out.append(OutRecord(self.topics.run_requests, key, forward, forward_headers))
            for answer in decision.answers:
                if answer.raised_at_ms is not None:
                    seconds = max(0.0, (record.timestamp - answer.raised_at_ms) / 1000)
                    hist = m.interrupt_response.labels(
                        agent, reason_label(answer.reason), answer.status
                    )
                    r.deferred.append(functools.partial(hist.observe, seconds))
        elif decision.verdict is Verdict.REJECT:
            assert reply is not None
            body = shaping.fitted(reply, record.value)
            out.append(OutRecord(self.topics.rejections, key, body, headers))
            for reason in decision.reasons:
                r.deferred.append(m.rejections.labels(agent, reason.code).inc)
                counter = _REASON_COUNTERS.get(reason.code)
                if counter is not None:
                    r.deferred.append(getattr(m, counter).labels(agent).inc)
        if self.topics.audit is not None:
            self._audit(r, record, decision, named, thread_id, now_ms, wall_ms, headers, raw, state)
        if not reply_to:
            return
        if LEGAL_TOPIC.match(reply_to) and self.ctx.topic_exists(reply_to):
            assert reply is not None
            out.append(
                OutRecord(reply_to, key, body or shaping.fitted(reply, record.value), headers)
            )
            return
        self.warn(
            r,
            Finding(
                str(Warn.REPLY_TOPIC_UNKNOWN),
                f"reply topic {shaping.short(reply_to)!r} does not exist, is not a legal "
                "topic name, or is one of the gateway's own topics; no reply sent",
            ),
            record,
            thread_id,
            decision.run_id,
            named,
        )

    def _audit(
        self,
        r: Round,
        record: InRecord,
        decision: Decision,
        named: str | None,
        thread_id: str | None,
        now_ms: int,
        wall_ms: int | None,
        headers: list[tuple[str, bytes]],
        raw: Any = NOT_DECODED,
        state: ThreadState | None = None,
    ) -> None:
        """The decision's audit record, in the decision's round: committed with its
        forward or rejection, or (the round aborted) not at all."""
        assert self.topics.audit is not None
        body = audit.body(
            record,
            decision,
            named,
            self.group,
            thread_id,
            now_ms,
            now_ms if wall_ms is None else wall_ms,
            raw,
            state,
        )
        key = audit.key(named, self.agent, thread_id)
        r.out.append(OutRecord(self.topics.audit, key, audit.encode(body), list(headers)))

    def violation(
        self,
        r: Round,
        record: Any,
        thread_id: str | None,
        run_id: str | None,
        rule: Rule,
        detail: str,
        named: str | None = None,
    ) -> None:
        self.warn(
            r,
            Finding(str(Warn.PROTOCOL_VIOLATION), detail, rule=str(rule)),
            record,
            thread_id,
            run_id,
            named,
        )

    def warn(
        self,
        r: Round,
        warning: Finding,
        record: Any,
        thread_id: str | None,
        run_id: str | None,
        named: str | None = None,
        now_ms: int | None = None,
    ) -> None:
        """A warning; `named` is the agent it is about (on a group's topics; None: not
        usable, or on an agent's own topics that agent)."""
        m, agent = self.metrics, self.agent
        if self.group is None:
            named = agent
        at = now_ms if now_ms is not None else (record.timestamp if record else 0)
        r.deferred.append(m.warnings.labels(agent, warning.code).inc)
        if warning.code == Warn.PROTOCOL_VIOLATION and warning.rule:
            r.deferred.append(m.protocol_violations.labels(agent, warning.rule).inc)
        elif warning.code == Warn.UNRECOGNISED_ENTRY:
            r.deferred.append(m.unrecognised_entries.labels(agent).inc)
        # per (owner, agent, thread, ...): in a group two agents' threads of one id are
        # limited apart
        admitted, suppressed = self.ctx.limiter.admit(
            (agent, named or "", thread_id or "", warning.code, warning.rule or ""),
            at,
            r.admitted,
        )
        if not admitted:
            r.deferred.append(m.warnings_suppressed.labels(agent, warning.code).inc)
            return
        body = shaping.warning_body(
            warning, named, record, thread_id, run_id, at, suppressed, self.group
        )
        key = thread_id.encode() if thread_id is not None else None
        headers = [(HEADER_AGENT, named.encode())] if self.group and named else []
        r.out.append(OutRecord(self.topics.warnings, key, dumps(body), headers))
        r.deferred.append(functools.partial(log.info, "warning", extra={"warning": body}))
