"""The gateway's Prometheus metrics, registered on an injected registry.

Only the shell updates them. No thread or run id ever becomes a label;
free-form values (interrupt reasons, event types) fold into bounded labels.

The label policy lives here (the counters) and in gauges.py (the gauges of
pair state). The shell counts everything per agent:
`metrics.requests.labels(agent, verdict).inc()`. What reaches /metrics depends
on `AgentDetail` (the `metrics_agent_detail` setting):

- `dashboard` (the default, sized for fleets: under 200 KB at a thousand
  agents): what an agent *is* stays per agent, what *happened* is counted over
  all agents. The gauges of pair state (threads, open interrupts, lag) keep
  `agent`, one series an agent each (gauges.py); every counter and histogram
  counts its detail (verdict, event type, rejection reason, warning code, rule,
  interrupt reason, run outcome, expiries, merge waits) over all agents, the
  interrupt response histogram by reason only (`DASHBOARD_LABELS`). An agent's
  verdicts cost two to three series; its state only the gateway knows, while
  every rejection is a record naming its agent on the rejections topic.
- `full`: every family keeps `agent` next to its detail (small deployments).

The families keep their names under both, so queries written as
`sum by (reason) (...)` or `sum by (agent) (...)` work under both (the latter
answers one series without `agent` under `dashboard`). The rejections and
warnings topics name the agent of every record whatever the policy.

Series exist from zero only where a `rate()` or `increase()` needs them: the
detail families over all agents once (their values are bounded), and under
`full` an agent's detail series once it is served.

Collectors registered on the registry are called from the HTTP server's worker
thread while /metrics renders (gateway/http.py), never on the event loop: they
must read immutable snapshots (or values the loop replaces whole), never walk
structures the loop mutates.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Generic, TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info

from gateway import __version__
from gateway.core.events.classify import KNOWN_TYPES
from gateway.observe.detail import AgentDetail
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


# The `result` label of the identities counter.
IDENTITY_RESULTS = ("verified", "unverified", "unattested")


# --- the label policy -------------------------------------------------------------------
# Families the shell updates per agent, by attribute, with their labels as the shell
# passes them (`agent` first). Under `full` every one of them is exported.
PER_AGENT_CALLS: dict[str, tuple[str, ...]] = {
    "requests": ("agent", "verdict"),
    "rejections": ("agent", "reason"),
    "warnings": ("agent", "code"),
    "warnings_suppressed": ("agent", "code"),
    "unrecognised_entries": ("agent",),
    "uncovered_interrupts": ("agent",),
    "expired_answers": ("agent",),
    "interrupts_raised": ("agent", "reason"),
    "interrupts_expired": ("agent",),
    "interrupt_response": ("agent", "reason", "status"),
    "runs_closed": ("agent", "outcome"),
    "events": ("agent", "type"),
    "protocol_violations": ("agent", "rule"),
    "merge_wait_expired": ("agent",),
    "identities": ("agent", "result"),
}
# Under `dashboard`, the labels a family keeps where they are not all its detail: the
# interrupt response histogram keeps the reason (a machine's answer or a person's) but
# not the status (it costs 25 series for each reason and status). Every other family
# keeps its detail labels without `agent`: the verdicts too, since at a thousand agents
# their two to three series an agent would take the room of the gauges of pair state.
DASHBOARD_LABELS: dict[str, tuple[str, ...]] = {
    "interrupt_response": ("reason",),
}


def exported_labels(attribute: str, detail: AgentDetail) -> tuple[str, ...]:
    """The labels the family `attribute` carries under `detail`."""
    calls = PER_AGENT_CALLS[attribute]
    if detail is AgentDetail.FULL:
        return calls
    return DASHBOARD_LABELS.get(attribute, calls[1:])


M = TypeVar("M", Counter, Histogram)


class AgentFamily(Generic[M]):
    """A metric the shell calls with `agent` first; the policy decides which labels stay.

    `labels(agent, *detail)` answers the child to update, as the client's own
    `labels()` does: the series of the labels kept (all of them, or the detail over
    all agents, or fewer).
    """

    def __init__(self, metric: M, labelnames: tuple[str, ...], kept: tuple[str, ...]) -> None:
        self.metric: M = metric
        self.labelnames = labelnames
        self.kept = kept
        self._positions = tuple(labelnames.index(name) for name in kept)
        # the child for each label values asked for: a decision asks for several, and
        # the client's own `labels()` validates and locks on every call (no series is
        # ever removed from these families, so a child stays the one exported)
        self._children: dict[tuple[str, ...], M] = {}

    def labels(self, *values: str) -> M:
        child = self._children.get(values)
        if child is not None:
            return child
        if len(values) != len(self.labelnames):
            raise ValueError(f"labels {self.labelnames} expected, got {values!r}")
        if not self._positions:
            child = self.metric
        else:
            child = self.metric.labels(*(values[i] for i in self._positions))
        self._children[values] = child
        return child


class Metrics:
    """Every metric of the gateway, on `registry`, under the label policy `detail`.

    `detail` defaults to `full`, so that a `Metrics(registry)` built for one pair or
    for the demo's console shows everything per agent; `agui-gateway run` passes the
    `metrics_agent_detail` setting (default `dashboard`).
    """

    def __init__(
        self, registry: CollectorRegistry, detail: AgentDetail | str = AgentDetail.FULL
    ) -> None:
        self.registry = registry
        self.detail = AgentDetail(detail)

        def counter(name: str, doc: str, labels: tuple[str, ...] = ()) -> Counter:
            return Counter(PREFIX + name, doc, labels, registry=registry)

        def gauge(name: str, doc: str, labels: tuple[str, ...] = ()) -> Gauge:
            return Gauge(PREFIX + name, doc, labels, registry=registry)

        def agent_counter(attribute: str, doc: str) -> AgentFamily[Counter]:
            kept = exported_labels(attribute, self.detail)
            return AgentFamily(counter(attribute, doc, kept), PER_AGENT_CALLS[attribute], kept)

        self.requests = agent_counter("requests", "Run requests decided, by verdict.")
        self.rejections = agent_counter("rejections", "Rejection reasons (one per reason).")
        self.identities = agent_counter(
            "identities",
            "Requests judged, by who sent them: verified (a trusted key's signature), "
            "unverified (identity headers not believed: forged, tampered or an unknown "
            "key), unattested (none).",
        )
        self.warnings = agent_counter("warnings", "Warnings raised, by code.")
        self.warnings_suppressed = agent_counter(
            "warnings_suppressed", "Identical warnings not re-published (rate limit)."
        )
        self.unrecognised_entries = agent_counter(
            "unrecognised_entries", "Resume entries naming no open interrupt."
        )
        self.uncovered_interrupts = agent_counter(
            "uncovered_interrupts", "Open interrupts a request left uncovered."
        )
        self.expired_answers = agent_counter(
            "expired_answers", "Resume entries resolving an expired interrupt."
        )
        self.interrupts_raised = agent_counter(
            "interrupts_raised", "Interrupts delivered by interrupting runs."
        )
        self.interrupts_expired = agent_counter(
            "interrupts_expired", "Open interrupts that passed expiresAt unanswered."
        )
        response_labels = exported_labels("interrupt_response", self.detail)
        self.interrupt_response = AgentFamily(
            Histogram(
                PREFIX + "interrupt_response_seconds",
                "From the interrupting RUN_FINISHED to the forwarded request answering it "
                "(record timestamps).",
                response_labels,
                buckets=RESPONSE_BUCKETS,
                registry=registry,
            ),
            PER_AGENT_CALLS["interrupt_response"],
            response_labels,
        )
        self.runs_closed = agent_counter("runs_closed", "Runs closed, by outcome.")
        self.events = agent_counter("events", "Events consumed, by type.")
        self.protocol_violations = agent_counter(
            "protocol_violations", "Lifecycle rule violations seen on event streams."
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
        self.state_restore_records = counter(
            "state_restore_records",
            "Changelog records read by restores, by where each restore started: beginning "
            "(the whole changelog) or standby (a warm standby's replica, only its tail).",
            ("start",),
        )
        for start in ("beginning", "standby"):
            self.state_restore_records.labels(start)
        self.transactions = counter("transactions", "Transactions, by result.", ("result",))
        self.fetch_held_back = counter(
            "fetch_held_back",
            "Times a pair stopped fetching until its commit under way ended: the rounds "
            "not yet committed held pending_max_bytes or more.",
        )
        self.merge_wait_expired = agent_counter(
            "merge_wait_expired",
            "Requests rejected as events_lagging after waiting merge_max_wait_ms for a lagging "
            "events side.",
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
        self.gauges = GaugeCollector(registry, self.detail)
        self.build_info = Info(PREFIX + "build", "Gateway version.", registry=registry)
        self.build_info.info({"version": __version__})
        if self.detail is AgentDetail.DASHBOARD:
            self._prime_detail(None)

    def agent_families(self) -> dict[str, AgentFamily[Counter] | AgentFamily[Histogram]]:
        """The families the shell updates per agent, by attribute."""
        return {attribute: getattr(self, attribute) for attribute in PER_AGENT_CALLS}

    def prime_transactions(self) -> None:
        """Create the transaction series at zero, so rate() sees their first increment."""
        for result in ("committed", "aborted", "fenced"):
            self.transactions.labels(result)
        self.kafka_retries.labels("NOT_ENOUGH_REPLICAS")

    def prime_agent(self, agent: str) -> None:
        """Create an agent's bounded series at zero when it is first served.

        Under `full` every detail series of the agent; under `dashboard` nothing: the
        detail series over all agents exist from the start.
        """
        if self.detail is AgentDetail.FULL:
            self._prime_detail(agent)

    def _prime_detail(self, agent: str | None) -> None:
        """The bounded detail series at zero: one agent's (`full`) or over all agents."""
        from gateway.core.values.codes import Reason, Rule, Verdict, Warn

        def prime(family: AgentFamily[Counter], values: Iterable[str]) -> None:
            for value in values:
                if agent is not None:
                    family.metric.labels(agent, value)
                elif "agent" not in family.kept:
                    family.metric.labels(value)

        prime(self.interrupts_raised, (*sorted(KNOWN_REASONS), OTHER))
        prime(self.runs_closed, RUN_OUTCOMES)
        prime(self.events, (*sorted(KNOWN_TYPES), "unknown"))
        prime(self.protocol_violations, (str(rule) for rule in Rule))
        prime(self.requests, (str(verdict) for verdict in Verdict))
        prime(self.rejections, (str(reason) for reason in Reason))
        prime(self.identities, IDENTITY_RESULTS)
        prime(self.warnings, (str(code) for code in Warn))
        if agent is not None:
            for family in (
                self.unrecognised_entries,
                self.uncovered_interrupts,
                self.expired_answers,
                self.interrupts_expired,
                self.merge_wait_expired,
            ):
                family.metric.labels(agent)
