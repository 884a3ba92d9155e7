"""The edge's Prometheus metrics (`agui_gateway_edge_*`), on an injected registry.

No agent, thread or run id is a label: an HTTP caller chooses those.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

PREFIX = "agui_gateway_edge_"
# What a request's outcome is labelled when the gateway gave no verdict.
NO_VERDICT = "none"
VERDICTS = ("forward", "reject", "duplicate", NO_VERDICT)
STATUSES = ("200", "404", "408", "409", "413", "415", "422", "503", "504")
# Why the edge closed a connection itself (guard.py, and a body too slow in app.py).
CLOSE_REASONS = ("too_many_connections", "header_timeout", "body_timeout")
SECONDS_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)


class EdgeMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.requests = Counter(
            PREFIX + "requests_total",
            "POST /agents/{agent} answered, by the gateway's verdict (none: no verdict) "
            "and HTTP status",
            ["verdict", "status"],
            registry=registry,
        )
        self.open_streams = Gauge(
            PREFIX + "open_streams", "event streams being served now", registry=registry
        )
        self.streams_ended = Counter(
            PREFIX + "streams_ended_total",
            "event streams ended: closed (the run's own close), or the edge's RUN_ERROR "
            "code, or disconnected",
            ["end"],
            registry=registry,
        )
        self.verdict_seconds = Histogram(
            PREFIX + "verdict_seconds",
            "publishing a request to reading the gateway's verdict",
            buckets=SECONDS_BUCKETS,
            registry=registry,
        )
        self.first_event_seconds = Histogram(
            PREFIX + "first_event_seconds",
            "a forward verdict to the run's first event (RUN_STARTED)",
            buckets=SECONDS_BUCKETS,
            registry=registry,
        )
        self.open_connections = Gauge(
            PREFIX + "open_connections",
            "HTTP connections open now (requests being read, streams, idle keep-alive)",
            registry=registry,
        )
        self.connections_closed = Counter(
            PREFIX + "connections_closed_total",
            "connections the edge closed itself: too_many_connections (over "
            "edge_max_connections, answered 503), header_timeout (no whole request within "
            "edge_header_timeout_s), body_timeout (a body not read within edge_body_timeout_s)",
            ["reason"],
            registry=registry,
        )
        for reason in CLOSE_REASONS:
            self.connections_closed.labels(reason)
        self.streams = 0  # what open_streams shows, readable without the registry
        for verdict in VERDICTS:
            for status in STATUSES:
                self.requests.labels(verdict, status)
