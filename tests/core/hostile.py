"""The worst request shapes of the hostile-input campaign, as records (bytes) to judge.

Each case is a thread state (its interrupt's `responseSchema`, agent-controlled)
and a request's bytes (client-controlled) up to the 1 MB record limit.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

from gateway.core import ThreadState, apply_event
from gateway.core.jsontext import to_json

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
