"""What a decision or a warning writes into a round.

The outputs (forward, rejection, reply, warning records, shaped by
`gateway.kafka.shaping`) and the metric updates to make once the round
commits. The warning limiter's admissions are noted in the round, so an
aborted round gives them back.
"""

from __future__ import annotations

import functools
import logging
from typing import Any

from gateway.codec.records import HEADER_REPLY_TO, InRecord, OutRecord, dumps
from gateway.core import Decision, Reason, Rule, Verdict, Warn
from gateway.core.findings import Finding
from gateway.kafka import shaping
from gateway.kafka.round import Round
from gateway.kafka.topics import LEGAL_TOPIC, AgentTopics
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
    ) -> None:
        self.topics = topics
        self.agent = topics.agent
        self.ctx = context
        self.metrics: Metrics = context.metrics

    def internal_error(
        self, r: Round, record: InRecord, thread_id: str | None, now_ms: int, exc: Exception
    ) -> None:
        """The rejection of a request the gateway failed on (a defect)."""
        body = shaping.internal_error_body(record, self.agent, thread_id, now_ms, exc)
        key, headers = shaping.output_key(record, thread_id), shaping.correlation_headers(record)
        r.out.append(OutRecord(self.ctx.rejections_topic, key, body, headers))
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
    ) -> None:
        """A decision's outputs. `raw` is the request's JSON (NOT_DECODED if unread)."""
        m, agent, out = self.metrics, self.agent, r.out
        r.deferred.append(m.requests.labels(agent, str(decision.verdict)).inc)
        headers = shaping.correlation_headers(record)
        key = shaping.output_key(record, thread_id)
        for warning in decision.warnings:
            self.warn(r, warning, record, thread_id, decision.run_id)
        reply_to = record.header(HEADER_REPLY_TO)
        # the reply (a rejection's record), built only when something writes it
        reply: dict[str, Any] | None = None
        if decision.verdict is Verdict.REJECT or reply_to:
            reply = shaping.reply_body(record, agent, decision, thread_id, now_ms, raw)
        body: bytes | None = None  # the reply's JSON, once written
        if decision.verdict is Verdict.FORWARD:
            assert forward is not None
            out.append(OutRecord(self.topics.run_requests, key, forward, headers))
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
            out.append(OutRecord(self.ctx.rejections_topic, key, body, headers))
            for reason in decision.reasons:
                r.deferred.append(m.rejections.labels(agent, reason.code).inc)
                counter = _REASON_COUNTERS.get(reason.code)
                if counter is not None:
                    r.deferred.append(getattr(m, counter).labels(agent).inc)
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
        )

    def violation(
        self,
        r: Round,
        record: Any,
        thread_id: str | None,
        run_id: str | None,
        rule: Rule,
        detail: str,
    ) -> None:
        self.warn(
            r,
            Finding(str(Warn.PROTOCOL_VIOLATION), detail, rule=str(rule)),
            record,
            thread_id,
            run_id,
        )

    def warn(
        self,
        r: Round,
        warning: Finding,
        record: Any,
        thread_id: str | None,
        run_id: str | None,
        now_ms: int | None = None,
    ) -> None:
        m, agent = self.metrics, self.agent
        at = now_ms if now_ms is not None else (record.timestamp if record else 0)
        r.deferred.append(m.warnings.labels(agent, warning.code).inc)
        if warning.code == Warn.PROTOCOL_VIOLATION and warning.rule:
            r.deferred.append(m.protocol_violations.labels(agent, warning.rule).inc)
        elif warning.code == Warn.UNRECOGNISED_ENTRY:
            r.deferred.append(m.unrecognised_entries.labels(agent).inc)
        admitted, suppressed = self.ctx.limiter.admit(
            (agent, thread_id or "", warning.code, warning.rule or ""), at, r.admitted
        )
        if not admitted:
            r.deferred.append(m.warnings_suppressed.labels(agent, warning.code).inc)
            return
        body = shaping.warning_body(warning, agent, record, thread_id, run_id, at, suppressed)
        key = thread_id.encode() if thread_id is not None else None
        r.out.append(OutRecord(self.ctx.warnings_topic, key, dumps(body)))
        r.deferred.append(functools.partial(log.info, "warning", extra={"warning": body}))
