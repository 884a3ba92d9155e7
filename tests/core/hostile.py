"""The worst record shapes of the hostile-input campaign, as records (bytes) to judge.

Each request case is a thread state (its interrupt's `responseSchema`,
agent-controlled) and a request's bytes (client-controlled); each event case is
an event's bytes for a thread with an active run. All are up to the 1 MB record
limit, and are judged as the service judges them (`judge_request`, `apply`):
decoded from bytes, judged by the core, and a forward's bytes built.

    python -m tests.core.hostile

prints each case's CPU time on this machine (best of five) next to the
reference work the budget test measures it against (tests/core/test_bounds.py),
with the garbage collector set as the service sets it (`as_the_service`).
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import orjson

from gateway.codec.records import Undecodable, decode_json, forward_bytes, stream_type
from gateway.commands import collector
from gateway.core import Decision, EventOutcome, ThreadState, apply_event, judge
from gateway.core.reading import response_schema
from gateway.core.values.jsontext import to_json

THREAD = "t-hostile"


def interrupted_with(schema: object) -> ThreadState:
    state = apply_event(None, THREAD, {"type": "RUN_STARTED", "threadId": THREAD, "runId": "r1"}, 1)
    finished = {
        "type": "RUN_FINISHED",
        "threadId": THREAD,
        "runId": "r1",
        "outcome": {
            "type": "interrupt",
            "interrupts": [{"id": "a", "reason": "approval", "responseSchema": schema}],
        },
    }
    new = apply_event(state.state, THREAD, finished, 2).state
    assert new is not None
    return new


def request(payload: object = None, **extra: Any) -> bytes:
    entry: dict[str, Any] = {"interruptId": "a", "status": "resolved"}
    if payload is not None:
        entry["payload"] = payload
    body = {"threadId": THREAD, "runId": "r2", "messages": [], "resume": [entry], **extra}
    return to_json(body)


def chain(keyword: str, depth: int) -> dict[str, Any]:
    defs: dict[str, Any] = {
        f"a{i}": {keyword: [{"$ref": f"#/$defs/a{i + 1}"}, {"$ref": f"#/$defs/a{i + 1}"}]}
        for i in range(depth)
    }
    defs[f"a{depth}"] = {"type": "object"}
    return {"$defs": defs, "$ref": "#/$defs/a0"}


def nested(depth: int, leaf: Any) -> Any:
    value = leaf
    for _ in range(depth):
        value = [value]
    return value


APPROVAL = {
    "type": "object",
    "properties": {"approved": {"type": "boolean"}},
    "required": ["approved"],
}


def _big_schema(size: int) -> dict[str, Any]:
    props = {f"p{i:06d}": {"type": "string", "maxLength": i} for i in range(size // 40)}
    return {"type": "object", "properties": props}


def _messages() -> bytes:
    robots = [{"id": f"r{i}", "role": "robot", "content": "x"} for i in range(6000)]
    users = [{"id": f"u{i}", "role": "user", "content": "x", "extra": i} for i in range(6000)]
    return request({"approved": True}, messages=robots + users)


def _deep_tag() -> bytes:
    body = orjson.loads(request({"approved": True}))
    body["messages"] = [{"id": "m", "role": "user", "content": "x"}]
    text = orjson.dumps(body)
    return text.replace(b'"role":"user"', b'"role":' + b"[" * 995 + b'"user"' + b"]" * 995)


# name -> (the schema of interrupt `a`, a builder of the request bytes)
CASES: dict[str, tuple[object, Callable[[], bytes]]] = {
    "anyOf $ref chain depth 16": (chain("anyOf", 16), lambda: request(5)),
    "anyOf $ref chain depth 12, 500 KB payload": (
        chain("anyOf", 12),
        lambda: request("x" * 500_000),
    ),
    "allOf $ref chain depth 18, valid payload": (chain("allOf", 18), lambda: request({})),
    "pattern ^(a+)+$": ({"pattern": "^(a+)+$"}, lambda: request("a" * 26 + "!")),
    "pattern ^(a+)+$, 900 KB": ({"pattern": "^(a+)+$"}, lambda: request("a" * 900_000 + "!")),
    "uniqueItems, 5,000 ints + true": (
        {"uniqueItems": True},
        lambda: request([*range(5000), True]),
    ),
    "uniqueItems, 40,000 arrays": (
        {"uniqueItems": True},
        lambda: request([[i] for i in range(40_000)]),
    ),
    "items string vs 150,000 ints": (
        {"items": {"type": "string"}},
        lambda: request(list(range(150_000))),
    ),
    "items string vs 40,000 ints": (
        {"items": {"type": "string"}},
        lambda: request(list(range(40_000))),
    ),
    "949 KB schema": (_big_schema(949_000), lambda: request({"p000001": "x"})),
    "60 KB schema, 4,000 values": (
        {"type": "object", "properties": {f"p{i}": {"type": "integer"} for i in range(1300)}},
        lambda: request({f"p{i}": i for i in range(1300)}),
    ),
    "payload nested 995 deep (the record: 1,000)": (APPROVAL, lambda: request(nested(995, 1))),
    "uniqueItems payload nested 900 deep": (
        {**APPROVAL, "uniqueItems": True},
        lambda: request(nested(900, 1)),
    ),
    "6,000 unknown roles + 6,000 extra members": (APPROVAL, _messages),
    "role nested 995 deep": (APPROVAL, _deep_tag),
}


# --- more request shapes: the 1 MB limit filled with what costs most per byte -------------


def _history(messages: list[dict[str, Any]]) -> Callable[[], bytes]:
    return lambda: request({"approved": True}, messages=messages)


def _filled(item: Callable[[int], Any], size: int = 990_000) -> list[Any]:
    """As many items as fit `size` bytes of JSON."""
    one = len(to_json(item(0))) + 1
    return [item(i) for i in range(size // one)]


REQUEST_MORE: dict[str, tuple[object, Callable[[], bytes]]] = {
    "1 MB of minimal messages": (
        APPROVAL,
        lambda: request(
            {"approved": True},
            messages=_filled(lambda i: {"id": str(i), "role": "user", "content": "x"}, 960_000),
        ),
    ),
    "1 MB of content parts": (
        APPROVAL,
        lambda: request(
            {"approved": True},
            messages=[
                {
                    "id": "m",
                    "role": "user",
                    "content": _filled(lambda i: {"type": "text", "text": ""}, 960_000),
                }
            ],
        ),
    ),
    "1 MB of tool calls": (
        APPROVAL,
        lambda: request(
            {"approved": True},
            messages=_filled(
                lambda i: {
                    "id": str(i),
                    "role": "assistant",
                    "toolCalls": [
                        {"id": "c", "type": "function", "function": {"name": "f", "arguments": ""}}
                    ],
                },
                960_000,
            ),
        ),
    ),
    "1 MB of resume entries": (
        APPROVAL,
        lambda: to_json(
            {
                "threadId": THREAD,
                "runId": "r2",
                "messages": [],
                "resume": [
                    {"interruptId": "a", "status": "resolved", "payload": {"approved": True}},
                    *_filled(lambda i: {"interruptId": str(i), "status": "cancelled"}, 960_000),
                ],
            }
        ),
    ),
    "1 MB of context and tools": (
        APPROVAL,
        lambda: request(
            {"approved": True},
            context=_filled(lambda i: {"description": "", "value": ""}, 480_000),
            tools=_filled(lambda i: {"name": "", "description": "", "parameters": {}}, 480_000),
        ),
    ),
    "1 MB of messages with an extra member": (
        APPROVAL,
        lambda: request(
            {"approved": True},
            messages=_filled(
                lambda i: {"id": str(i), "role": "user", "content": "x", "z": 1}, 960_000
            ),
        ),
    ),
    "1 MB of extra members at the top": (
        APPROVAL,
        lambda: request({"approved": True}, **{f"x{i}": 0 for i in range(95_000)}),
    ),
    "1 MB of number tokens, a member stripped": (
        APPROVAL,
        lambda: request(
            {"approved": True},
            forwardedProps=_filled(lambda i: 1e9, 960_000),
            notAField=1,
        ).replace(b"1000000000.0", b"1E9"),
    ),
    "1 MB of integers beyond 64 bits": (
        APPROVAL,
        lambda: request({"approved": True}, forwardedProps=_filled(lambda i: 10**30, 960_000)),
    ),
    "1 MB of messages, big integer in the state": (
        APPROVAL,
        lambda: request(
            {"approved": True},
            state={"n": 10**30},
            messages=_filled(lambda i: {"id": str(i), "role": "user", "content": "x"}, 960_000),
        ),
    ),
}

# --- malformed floods: numbers where strings belong, each error counted past the 50 listed


def _number(i: int) -> int:
    return 1_000_000 + i  # seven digits each: `_filled` sizes the list by the first item


def _wrong(item: Callable[[int], Any]) -> Callable[[], bytes]:
    return lambda: request({"approved": True}, messages=_filled(item, 960_000))


REQUEST_MALFORMED: dict[str, tuple[object, Callable[[], bytes]]] = {
    "1 MB of messages whose ids are numbers": (
        APPROVAL,
        _wrong(lambda i: {"id": _number(i), "role": "user", "content": "x"}),
    ),
    "1 MB of messages, every field a number": (
        APPROVAL,
        _wrong(lambda i: {"id": _number(i), "role": "user", "content": 1, "name": 1}),
    ),
    "1 MB of tool messages, every field a number": (
        APPROVAL,
        _wrong(lambda i: {"id": _number(i), "role": "tool", "toolCallId": 1, "content": 1}),
    ),
    "1 MB of tool calls, every field a number": (
        APPROVAL,
        _wrong(
            lambda i: {
                "id": "m",
                "role": "assistant",
                "toolCalls": [
                    {"id": _number(i), "type": "function", "function": {"name": 1, "arguments": 1}}
                ],
            }
        ),
    ),
    "1 MB of resume entries whose ids are numbers": (
        APPROVAL,
        lambda: to_json(
            {
                "threadId": THREAD,
                "runId": "r2",
                "messages": [],
                "resume": _filled(
                    lambda i: {"interruptId": _number(i), "status": "cancelled"}, 960_000
                ),
            }
        ),
    ),
    "1 MB of context and tools, numbers": (
        APPROVAL,
        lambda: request(
            {"approved": True},
            context=_filled(lambda i: {"description": 1, "value": 1}, 480_000),
            tools=_filled(lambda i: {"name": 1, "description": 1, "parameters": {}}, 480_000),
        ),
    ),
    "1 MB of image parts whose source type is s3": (
        APPROVAL,
        lambda: request(
            {"approved": True},
            messages=[
                {
                    "id": "m",
                    "role": "user",
                    "content": _filled(
                        lambda i: {"type": "image", "source": {"type": "s3", "value": "v"}},
                        960_000,
                    ),
                }
            ],
        ),
    ),
    "1 MB of unknown roles, one malformed message last": (
        APPROVAL,
        lambda: request(
            {"approved": True},
            messages=[
                *_filled(lambda i: {"id": "r", "role": "robot", "content": "x"}, 950_000),
                {"id": 1, "role": "user", "content": "x"},
            ],
        ),
    ),
}
REQUESTS: dict[str, tuple[object, Callable[[], bytes]]] = {
    **CASES,
    **REQUEST_MORE,
    **REQUEST_MALFORMED,
}


def judge_request(data: bytes, state: ThreadState | None) -> Decision | None:
    """A request record judged as the service judges it: decoded, judged, its forward's
    bytes built (or rejected `input_too_large`). None: not JSON the gateway reads.

    The schema cache starts empty, as after a restart: the kept schema is compiled
    again, the worst a request meets."""
    response_schema._by_text.clear()
    try:
        raw = decode_json(data)
    except Undecodable:
        return None
    decision, _ = judge(state, raw, 10, thread_id=THREAD)
    return forward_bytes(decision, data)[0]


# --- event shapes: agent-controlled, for a thread whose run r1 is active ------------------


def active() -> ThreadState:
    started = {"type": "RUN_STARTED", "threadId": THREAD, "runId": "r1"}
    state = apply_event(None, THREAD, started, 1).state
    assert state is not None
    return state


def _finished(interrupts: list[dict[str, Any]], **extra: Any) -> bytes:
    outcome = {"type": "interrupt", "interrupts": interrupts}
    body = {"type": "RUN_FINISHED", "threadId": THREAD, "runId": "r1", "outcome": outcome}
    return to_json({**body, **extra})


def _schema_of(keys: int, n: int) -> dict[str, Any]:
    props = {f"p{n}_{k}": {"type": "string", "maxLength": k} for k in range(keys)}
    return {"type": "object", "properties": props}


EVENTS: dict[str, Callable[[], bytes]] = {
    "32 interrupts with an 18 KB schema each": lambda: _finished(
        [{"id": f"i{n}", "reason": "r", "responseSchema": _schema_of(450, n)} for n in range(32)]
    ),
    "32 interrupts with a 60 KB schema each (over the content bound)": lambda: _finished(
        [{"id": f"i{n}", "reason": "r", "responseSchema": _schema_of(1400, n)} for n in range(15)]
    ),
    "one 949 KB schema": lambda: _finished(
        [{"id": "a", "reason": "r", "responseSchema": _big_schema(949_000)}]
    ),
    "32 interrupts with 30 KB of metadata each": lambda: _finished(
        [{"id": f"i{n}", "reason": "r", "metadata": {"k": ["x" * 10] * 2_600}} for n in range(32)]
    ),
    "RUN_FINISHED with 1 MB of extra members": lambda: _finished(
        [{"id": "a", "reason": "r"}], **{f"x{i}": 0 for i in range(95_000)}
    ),
    "an interrupt with 1 MB of extra members": lambda: _finished(
        [{"id": "a", "reason": "r", **{f"x{i}": 0 for i in range(95_000)}}]
    ),
    "SUBAGENT_FINISHED suspending 1 MB of interrupt ids": lambda: to_json(
        {
            "type": "SUBAGENT_FINISHED",
            "subagentRunId": "s",
            "outcome": {"type": "suspended", "interruptIds": _filled(str, 500_000)},
        }
    ),
    "RUN_STARTED nested, its runId nested 997 deep": lambda: (
        b'{"type":"RUN_STARTED","threadId":"'
        + THREAD.encode()
        + b'","runId":'
        + b"[" * 997
        + b'"x"'
        + b"]" * 997
        + b"}"
    ),
    "RUN_FINISHED, its outcome type nested 997 deep": lambda: (
        b'{"type":"RUN_FINISHED","threadId":"' + THREAD.encode() + b'","runId":"r1",'
        b'"outcome":{"type":' + b"[" * 997 + b'"x"' + b"]" * 997 + b"}}"
    ),
    "a 1 MB text delta": lambda: to_json(
        {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m", "delta": "x" * 990_000}
    ),
    "a 1 MB custom event of number tokens": lambda: (
        b'{"type":"CUSTOM","name":"n","value":[' + b",".join([b"1E9"] * 240_000) + b"]}"
    ),
    "a 1 MB custom event, second type member": lambda: (
        b'{"type":"CUSTOM","name":"n","value":{"type":[' + b",".join([b"1"] * 490_000) + b"]}}"
    ),
}


def apply(data: bytes, state: ThreadState) -> EventOutcome | None:
    """An event record applied as the service applies it: a streaming delta of an active
    run counted unparsed, anything else decoded and applied. None: not read.

    The schema cache starts empty: every schema the event carries is judged anew."""
    response_schema._by_text.clear()
    if state.status == "active" and stream_type(data) is not None:
        return None
    try:
        event = decode_json(data)
    except Undecodable:
        return None
    return apply_event(state, THREAD, event, 5)


# --- the reference work a record's budget is measured against ----------------------------


def reference_record() -> bytes:
    """1 MB of small JSON objects: orjson reading it is the budget's unit of work."""
    return to_json(_filled(lambda i: {"id": str(i), "role": "user", "content": "x"}, 1_000_000))


@contextmanager
def as_the_service() -> Iterator[None]:
    """The garbage collector set as the service sets it (`gateway.commands.collector`):
    what exists so far frozen, the service's thresholds; restored afterwards."""
    before = gc.get_threshold()
    collector.configure()
    try:
        yield
    finally:
        gc.set_threshold(*before)
        gc.unfreeze()


def cpu(work: Callable[[], object], runs: int = 5) -> float:
    """The least CPU time (s) of `runs` runs of `work`: one preempted run does not count."""
    best = float("inf")
    for _ in range(runs):
        start = time.process_time()
        work()
        best = min(best, time.process_time() - start)
    return best


def units(work: Callable[[], object], reference: bytes, runs: int = 5) -> tuple[float, float]:
    """(CPU time of `work` in units of orjson reading `reference`, one unit in seconds).

    The two are measured in turn, `runs` times each, and the least of each kept, so
    that both see the same machine (a load that comes and goes slows both).
    """
    best_work = best_unit = float("inf")
    for _ in range(runs):
        start = time.process_time()
        orjson.loads(reference)
        middle = time.process_time()
        work()
        end = time.process_time()
        best_unit = min(best_unit, middle - start)
        best_work = min(best_work, end - middle)
    return best_work / best_unit, best_unit


def main() -> None:
    with as_the_service():
        table()


def table() -> None:
    reference = reference_record()
    print("CPU per record, best of five, and in units of the reference work (orjson reading")
    print("1 MB of small objects, measured in turn with each record); the garbage collector")
    print(f"set as the service sets it: thresholds {collector.THRESHOLDS}, start-up frozen")
    print(f"{'ms':>7} {'units':>6} {'unit ms':>7} {'bytes':>9}  record")
    for name, (schema, build) in REQUESTS.items():
        data, state = build(), interrupted_with(schema)
        ratio, unit = units(lambda: judge_request(data, state), reference)  # noqa: B023
        line = f"{ratio * unit * 1000:7.1f} {ratio:6.2f} {unit * 1000:7.1f} {len(data):9,}"
        print(f"{line}  request: {name}")
    for name, make in EVENTS.items():
        data, state = make(), active()
        ratio, unit = units(lambda: apply(data, state), reference)  # noqa: B023
        line = f"{ratio * unit * 1000:7.1f} {ratio:6.2f} {unit * 1000:7.1f} {len(data):9,}"
        print(f"{line}  event: {name}")


if __name__ == "__main__":
    main()
