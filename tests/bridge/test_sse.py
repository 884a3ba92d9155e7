"""The bounded SSE reader against the framings agents send."""

from __future__ import annotations

import pytest

from gateway.bridge.sse import EventTooLarge, SseReader

WIRE = (
    b'data: {"type":"RUN_STARTED","threadId":"t","runId":"r"}\n\n'
    b'data: {"type":"RUN_FINISHED","threadId":"t","runId":"r"}\n\n'
)


def feed_all(reader: SseReader, chunks: list[bytes]) -> list[bytes]:
    out: list[bytes] = []
    for chunk in chunks:
        out.extend(reader.feed(chunk))
    return out


def test_lf_framing_gives_each_data_as_sent() -> None:
    events = SseReader(1000).feed(WIRE)
    assert events == [
        b'{"type":"RUN_STARTED","threadId":"t","runId":"r"}',
        b'{"type":"RUN_FINISHED","threadId":"t","runId":"r"}',
    ]


@pytest.mark.parametrize("size", [1, 2, 3, 7, 64])
def test_chunk_boundaries_anywhere(size: int) -> None:
    chunks = [WIRE[i : i + size] for i in range(0, len(WIRE), size)]
    assert feed_all(SseReader(1000), chunks) == SseReader(1000).feed(WIRE)


@pytest.mark.parametrize("newline", [b"\r\n", b"\r"])
def test_crlf_and_cr_line_ends(newline: bytes) -> None:
    wire = WIRE.replace(b"\n", newline)
    one_byte = [wire[i : i + 1] for i in range(len(wire))]
    assert feed_all(SseReader(1000), one_byte) == SseReader(1000).feed(WIRE)


def test_comments_fields_and_multiline_data() -> None:
    wire = b': keep-alive\nevent: x\nid: 7\nretry: 10\ndata: {"a":\ndata:1}\n\n\n'
    assert SseReader(1000).feed(wire) == [b'{"a":\n1}']


def test_an_event_without_data_is_not_dispatched() -> None:
    assert SseReader(1000).feed(b"event: ping\n\n") == []


def test_oversize_event_across_lines_is_refused() -> None:
    reader = SseReader(10)
    with pytest.raises(EventTooLarge):
        reader.feed(b"data: 123456\ndata: 7890\n")


def test_oversize_line_is_refused_before_its_end_arrives() -> None:
    reader = SseReader(100)
    with pytest.raises(EventTooLarge):
        for _ in range(10):
            reader.feed(b"data: " + b"x" * 50)


def test_partial_event_is_reported() -> None:
    reader = SseReader(1000)
    reader.feed(b'data: {"type":"RUN_STARTED"}\n')
    assert reader.partial
    reader.feed(b"\n")
    assert not reader.partial
