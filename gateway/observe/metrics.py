"""The gateway's Prometheus metrics, registered on an injected registry.

Only the shell updates them. No thread or run id ever becomes a label;
free-form values (interrupt reasons, event types) fold into bounded labels.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info

from gateway import __version__
from gateway.core.classify import KNOWN_TYPES
from gateway.observe.gauges import GaugeCollector

PREFIX = "agui_gateway_"
# Interrupt reasons kept as their own label value; any other folds into "other".
KNOWN_REASONS = frozenset(
    {
        "tool_call",
        "input_required",
        "approval_required",
        "confirmation",
        "credential",
        "choice",
        "clarification",
        "human_review",
    }
)
OTHER = "other"
# 50 ms to 7 days: services answer in well under a second, people in minutes to days.
RESPONSE_BUCKETS = (
    0.05,
    0.1,
    0.25,
    0.5,
    1,
    2.5,
    5,
    15,
    30,
    60,
    120,
    300,
    600,
    1800,
    3600,
    7200,
    21600,
    43200,
    86400,
    172800,
    345600,
    604800,
)
# How a run closes (`runs_closed_total`'s outcome label).
RUN_OUTCOMES = ("success", "interrupt", "cancelled", "failed")
DECISION_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)


def reason_label(reason: str) -> str:
    return reason if reason in KNOWN_REASONS else OTHER


def outcome_label(outcome: str | None) -> str:
    if outcome is None:
        return "success"
    return outcome if outcome in RUN_OUTCOMES else OTHER


def event_type_label(event_type: object) -> str:
    return event_type if isinstance(event_type, str) and event_type in KNOWN_TYPES else "unknown"


class Metrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry

        def counter(name: str, doc: str, labels: tuple[str, ...] = ()) -> Counter:
            return Counter(PREFIX + name, doc, labels, registry=registry)

        def gauge(name: str, doc: str, labels: tuple[str, ...] = ()) -> Gauge:
            return Gauge(PREFIX + name, doc, labels, registry=registry)

        self.requests = counter(
            "requests", "Run requests decided, by verdict.", ("agent", "verdict")
        )
        self.rejections = counter(
            "rejections", "Rejection reasons (one per reason).", ("agent", "reason")
        )
        self.warnings = counter("warnings", "Warnings raised, by code.", ("agent", "code"))
        self.warnings_suppressed = counter(
            "warnings_suppressed",
            "Identical warnings not re-published (rate limit).",
            ("agent", "code"),
        )
        self.unrecognised_entries = counter(
            "unrecognised_entries", "Resume entries naming no open interrupt.", ("agent",)
        )
        self.uncovered_interrupts = counter(
            "uncovered_interrupts", "Open interrupts a request left uncovered.", ("agent",)
        )
        self.expired_answers = counter(
            "expired_answers", "Resume entries resolving an expired interrupt.", ("agent",)
        )
        self.interrupts_raised = counter(
            "interrupts_raised", "Interrupts delivered by interrupting runs.", ("agent", "reason")
        )
        self.interrupts_expired = counter(
            "interrupts_expired", "Open interrupts that passed expiresAt unanswered.", ("agent",)
        )
        self.interrupt_response = Histogram(
            PREFIX + "interrupt_response_seconds",
            "From the interrupting RUN_FINISHED to the forwarded request answering it "
            "(record timestamps).",
            ("agent", "reason", "status"),
            buckets=RESPONSE_BUCKETS,
            registry=registry,
        )
        self.runs_closed = counter("runs_closed", "Runs closed, by outcome.", ("agent", "outcome"))
        self.events = counter("events", "Events consumed, by type.", ("agent", "type"))
        self.protocol_violations = counter(
            "protocol_violations",
            "Lifecycle rule violations seen on event streams.",
            ("agent", "rule"),
        )
        self.decision_seconds = Histogram(
            PREFIX + "decision_seconds",
            "From consuming a request to committing its outcome.",
            buckets=DECISION_BUCKETS,
            registry=registry,
        )
        self.state_restore_seconds = Histogram(
            PREFIX + "state_restore_seconds",
            "Time to restore one partition's state from its changelog.",
            buckets=(0.01, 0.05, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120),
            registry=registry,
        )
        self.transactions = counter("transactions", "Transactions, by result.", ("result",))
        self.merge_wait_expired = counter(
            "merge_wait_expired",
            "Requests judged after waiting merge_max_wait_ms for a lagging events side.",
            ("agent",),
        )
        self.reply_topic_refreshes = counter(
            "reply_topic_refreshes",
            "Metadata refreshes because a request named a reply topic not seen yet.",
        )
        self.kafka_retries = counter(
            "kafka_retries",
            "Expected retriable Kafka errors retried by the client (e.g. KIP-890's "
            "NOT_ENOUGH_REPLICAS on a transaction's first write), by error.",
            ("error",),
        )
        # gauges read at scrape time from a snapshot the runner publishes
        self.gauges = GaugeCollector(registry)
        self.build_info = Info(PREFIX + "build", "Gateway version.", registry=registry)
        self.build_info.info({"version": __version__})

    def prime_transactions(self) -> None:
        """Create the transaction series at zero, so rate() sees their first increment."""
        for result in ("committed", "aborted", "fenced"):
            self.transactions.labels(result)
        self.kafka_retries.labels("NOT_ENOUGH_REPLICAS")

    def prime_agent(self, agent: str) -> None:
        """Create an agent's bounded series at zero when it is first served."""
        from gateway.core.codes import Reason, Rule, Verdict, Warn

        for reason_value in (*sorted(KNOWN_REASONS), OTHER):
            self.interrupts_raised.labels(agent, reason_value)
        for outcome in RUN_OUTCOMES:
            self.runs_closed.labels(agent, outcome)
        for event_type in (*sorted(KNOWN_TYPES), "unknown"):
            self.events.labels(agent, event_type)
        for rule in Rule:
            self.protocol_violations.labels(agent, str(rule))
        for verdict in Verdict:
            self.requests.labels(agent, str(verdict))
        for reason in Reason:
            self.rejections.labels(agent, str(reason))
        for code in Warn:
            self.warnings.labels(agent, str(code))
        for counter in (
            self.unrecognised_entries,
            self.uncovered_interrupts,
            self.expired_answers,
            self.interrupts_expired,
            self.merge_wait_expired,
        ):
            counter.labels(agent)
