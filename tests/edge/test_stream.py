"""SSE framing of a run and the edge's own RUN_ERROR (no Kafka: records built by hand)."""

from __future__ import annotations

import orjson
from prometheus_client import CollectorRegistry

from gateway.client.runs import RunTap
from gateway.edge.metrics import EdgeMetrics
from gateway.edge.stream import frame, run_frames
from tests.edge.support import sse_events


class _Record:
    def __init__(self, event: dict) -> None:
        self.key = b"t1"
        self.value = orjson.dumps(event)
        self.headers: tuple[tuple[str, bytes], ...] = ()


async def test_frames_are_data_lines_separated_by_a_blank_line() -> None:
    assert frame(b'{"type":"RUN_STARTED"}') == b'data: {"type":"RUN_STARTED"}\n\n'


async def test_a_run_streams_to_its_close_and_a_silent_run_gets_the_edges_run_error() -> None:
    registry = CollectorRegistry()
    metrics = EdgeMetrics(registry)
    tap = RunTap(consumer=None, topic="x", buffer=10)  # type: ignore[arg-type]

    watch = tap.watch("t1", "r1")
    tap._route(_Record({"type": "RUN_STARTED", "threadId": "t1", "runId": "r1"}))
    tap._route(_Record({"type": "RUN_FINISHED", "threadId": "t1", "runId": "r1"}))
    chunks = [f async for f in run_frames(tap, watch, 1, 1, metrics)]
    events, _ = sse_events(b"".join(chunks))
    assert [e["type"] for e in events] == ["RUN_STARTED", "RUN_FINISHED"]
    assert len(chunks) == 1  # arrived together: written together

    silent = tap.watch("t1", "r2")
    raw = b"".join([f async for f in run_frames(tap, silent, 0.05, 1, metrics)])
    events, _ = sse_events(raw)
    assert [(e["type"], e["code"]) for e in events] == [("RUN_ERROR", "run_not_started")]

    assert registry.get_sample_value("agui_gateway_edge_open_streams") == 0
    ended = "agui_gateway_edge_streams_ended_total"
    assert registry.get_sample_value(ended, {"end": "closed"}) == 1
    assert registry.get_sample_value(ended, {"end": "run_not_started"}) == 1
    assert registry.get_sample_value("agui_gateway_edge_first_event_seconds_count") == 1
