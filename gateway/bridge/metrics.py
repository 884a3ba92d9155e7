"""The bridge's Prometheus metrics (`agui_gateway_bridge_*`), on an injected registry.

The `agent` label is the owner of the topics a run came from: the agent, or for an
agent of a group the group (as the gateway's own metrics), so the series grow with
groups, not agents. Which agent ran is in the log line of each run.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

PREFIX = "agui_gateway_bridge_"
RESULTS = (
    "success",
    "interrupt",
    "cancelled",
    "run_error",
    "agent_http_error",
    "agent_unreachable",
    "agent_timeout",
    "agent_stream_ended",
    "agent_stream_invalid",
    "agent_event_too_large",
    "bridge_restarted",
)
RUN_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800)


class BridgeMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.runs = Counter(
            PREFIX + "runs_total",
            "Runs ended, by agent and result (the run's outcome, run_error when the agent "
            "failed it, or the code of the RUN_ERROR the bridge wrote)",
            ["agent", "result"],
            registry=registry,
        )
        self.run_seconds = Histogram(
            PREFIX + "run_seconds",
            "From calling the agent to the run's last event committed",
            ["agent"],
            buckets=RUN_BUCKETS,
            registry=registry,
        )
        self.in_flight = Gauge(
            PREFIX + "runs_in_flight", "Runs calling their agent now", ["agent"], registry=registry
        )
        self.http_errors = Counter(
            PREFIX + "agent_http_errors_total",
            "Agent answers with a status other than 2xx, by status",
            ["agent", "status"],
            registry=registry,
        )
        self.events = Counter(
            PREFIX + "events_total",
            "Events written to the events topic: relayed from the agent, or written by the "
            "bridge (its RUN_ERRORs)",
            ["agent", "source"],
            registry=registry,
        )
        self.requests_pending = Gauge(
            PREFIX + "requests_pending",
            "Run requests consumed whose run has not ended",
            ["agent"],
            registry=registry,
        )
        self.refused = Counter(
            PREFIX + "requests_refused_total",
            "Run requests no agent was called for, closed at once with the bridge's RUN_ERROR, "
            "by the agent or group whose topic carried them and the code: agent_missing (a "
            "group's request naming no agent), agent_name_illegal (naming no legal agent "
            "name), agent_not_allowed (an agent not of the group, or another agent on an "
            "agent's own topic), agent_not_served (an agent of the group that this "
            "bridge does not serve)",
            ["owner", "code"],
            registry=registry,
        )
        self.transactions = Counter(
            PREFIX + "transactions_total",
            "Transactions of events, run markers and offsets, by result",
            ["result"],
            registry=registry,
        )
        for result in ("committed", "failed"):
            self.transactions.labels(result)

    def owner(self, owner: str, refusals: tuple[str, ...]) -> None:
        """Create a served topic owner's refusal series from zero."""
        for code in refusals:
            self.refused.labels(owner, code)

    def agent(self, agent: str) -> None:
        """Create an agent's bounded series from zero, so rate() sees first increments."""
        for result in RESULTS:
            self.runs.labels(agent, result)
        for source in ("agent", "bridge"):
            self.events.labels(agent, source)
        self.in_flight.labels(agent)
        self.requests_pending.labels(agent)
