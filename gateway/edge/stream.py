"""A forwarded run as a server-sent event stream, framed as `@ag-ui/client` parses it.

Each event is one `data: <json>` line and a blank line (LF only: CRLF framing
breaks the client). Events that arrived together (a run's events committed in
one transaction come in one fetch) are written as one chunk: one write, and one
read for the client, instead of one per event. The stream always ends with the
run's `RUN_FINISHED` or `RUN_ERROR`; when the run does not start or close in
time, or its reader fails, the edge ends it with a `RUN_ERROR` of its own whose
`code` says why (`run_not_started`, `run_timeout`, `run_buffer_overflow`,
`events_reader_stopped`).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

from gateway.client.runs import RunStreamError, RunTap, RunWatch
from gateway.codec import jsonio
from gateway.edge.metrics import EdgeMetrics


def frame(event_json: bytes) -> bytes:
    return b"data: " + event_json + b"\n\n"


def edge_run_error(error: RunStreamError) -> bytes:
    return frame(jsonio.dumps({"type": "RUN_ERROR", "message": str(error), "code": error.code}))


async def run_frames(
    tap: RunTap,
    watch: RunWatch,
    start_timeout: float,
    run_timeout: float,
    metrics: EdgeMetrics,
) -> AsyncIterator[bytes]:
    """The run's events as SSE frames; counts the stream open while it is served."""
    metrics.open_streams.inc()
    metrics.streams += 1
    forwarded_at = time.monotonic()
    end = "disconnected"  # unless the stream gets to its end
    try:
        first = True
        try:
            # what arrived together goes out in one write (one chunk: `RunTap.batches`)
            async for batch in tap.batches(watch, start_timeout, run_timeout):
                if first:
                    metrics.first_event_seconds.observe(time.monotonic() - forwarded_at)
                    first = False
                if batch[-1].closes:
                    end = "closed"
                yield b"".join([frame(event.json) for event in batch])
        except RunStreamError as error:
            end = error.code
            yield edge_run_error(error)
    finally:
        tap.unwatch(watch)
        metrics.open_streams.dec()
        metrics.streams -= 1
        metrics.streams_ended.labels(end).inc()
