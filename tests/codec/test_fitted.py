"""JSON the gateway keeps holds its own length: orjson's bytes keep the whole buffer
orjson wrote into (4 KiB at least, 8 to 13 times a long string's length) for as
long as they live, and a record kept until its commit, or a cached text, cost that."""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable

import pytest

from gateway.codec import interrupts as records
from gateway.codec.jsonio import dumps, forwarded
from gateway.core.reading import response_schema
from gateway.core.values.jsontext import to_json

COPIES = 50
SLACK = 100  # bytes of a bytes object's own header, and the allocator's rounding


def held_each(make: Callable[[], bytes]) -> tuple[int, int]:
    """(bytes traced per value made and kept, the value's length)."""
    make()  # anything made once (a cache, an import) is not counted
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        kept = [make() for _ in range(COPIES)]
        held = (tracemalloc.get_traced_memory()[0] - before) // COPIES
    finally:
        tracemalloc.stop()
    return held, len(kept[0])


def opened(message: str) -> bytes:
    return records.Opened(
        "bot", "t1", "r1", "a", "tool_call", message, None, {"type": "boolean"}, None,
        1_000, None,
    ).to_json()  # fmt: skip


WRITERS = {
    "to_json, short": lambda: to_json({"threadId": "t1", "runId": "r1"}),
    "to_json, a long string": lambda: to_json({"content": "x" * 20_000}),
    "to_json, sorted": lambda: to_json({"b": 1, "a": "y" * 300}, sort_keys=True),
    "dumps": lambda: dumps({"warning": "z" * 500}),
    "a forward less a member": lambda: forwarded(
        b'{"threadId":"t1","extra":1,"note":"' + b"n" * 3_000 + b'"}',
        [("extra",)],
        {"threadId": "t1", "note": "n" * 3_000},
    ),
    "interrupt record": lambda: opened("approve?"),
    "interrupt record, long message": lambda: opened("m" * 4_000),
    "run record": lambda: records.RunClosed("bot", "t1", "r1", "succeeded", 5).to_json(),
}


@pytest.mark.parametrize("name", WRITERS)
def test_what_the_gateway_writes_holds_its_own_length(name):
    held, length = held_each(WRITERS[name])
    assert held <= length + SLACK, f"{name}: {held:,} bytes held for {length:,} written"


def test_a_kept_response_schema_holds_its_own_length():
    schema = {"type": "object", "properties": {"note": {"type": "string"}}}
    text, why, _ = response_schema.record(schema)
    assert why is None and text is not None
    held, length = held_each(lambda: response_schema.canonical(schema))
    assert held <= length + SLACK
