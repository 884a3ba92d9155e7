"""What each simulated answer to an interrupting run looks like.

A client that saw a run close with interrupts picks one scenario and sends
its requests in order: mostly a good resume, sometimes a defective one first
(then the corrected one, as a real client would after reading the
rejection), sometimes the good one followed by a re-send or a second,
different answer. Each request carries the verdict and reasons the gateway
should give it, so the clients can count any surprise. Pure given its random
source and clock.
"""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from gateway.demo.events import parse_iso

EXPIRY_MARGIN_S = 1.5  # a good client abandons input it could not give this close to expiry
LATE_BY_S = 0.4  # a late client answers this long after expiresAt

FORWARD, REJECT, DUPLICATE = "forward", "reject", "duplicate"


@dataclass(frozen=True, slots=True)
class Send:
    """One request a client sends, and what the gateway should say to it."""

    body: bytes
    expect: str  # forward | reject | duplicate
    reasons: frozenset[str] = frozenset()
    not_before: float | None = None  # epoch seconds: wait until then (a late answer)
    answers: bool = False  # the forwarded request that answers the interrupts


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    sends: list[Send] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Interrupted:
    """An interrupting run as a client saw it close."""

    thread_id: str
    run_id: str
    interrupts: list[dict[str, Any]]


def _expires(interrupt: dict[str, Any]) -> float | None:
    value = interrupt.get("expiresAt")
    if not isinstance(value, str):
        return None
    try:
        return parse_iso(value).timestamp()
    except ValueError:
        return None


def _payload(interrupt: dict[str, Any], rng: random.Random) -> Any:
    reason = interrupt.get("reason")
    if reason == "tool_call":
        return {"approved": rng.random() < 0.8}
    if reason == "approval_required":
        return {"decision": rng.choice(("approve", "reject")), "note": "checked by the demo"}
    if reason == "input_required":
        return {"account": f"acct-{rng.randint(1, 99)}"}
    return {"continue": True}


def _bad_payload(interrupt: dict[str, Any]) -> Any:
    schema = interrupt.get("responseSchema") or {}
    if "approved" in schema.get("properties", {}):
        return {"approved": "yes, please"}
    return {"decision": "maybe"}


def _entries(run: Interrupted, rng: random.Random, now: float) -> list[dict[str, Any]]:
    """A covering resume list: most interrupts answered, some abandoned."""
    out = []
    for interrupt in run.interrupts:
        expires = _expires(interrupt)
        near_expiry = expires is not None and now >= expires - EXPIRY_MARGIN_S
        entry: dict[str, Any] = {"interruptId": interrupt["id"]}
        if near_expiry or rng.random() < 0.12:
            entry["status"] = "cancelled"
        else:
            entry["status"] = "resolved"
            entry["payload"] = _payload(interrupt, rng)
        if rng.random() < 0.3:
            entry["metadata"] = {"answeredBy": "demo-client"}
        out.append(entry)
    return out


def request(run: Interrupted, entries: list[dict[str, Any]] | None, **extra: Any) -> bytes:
    body: dict[str, Any] = {
        "threadId": run.thread_id,
        "runId": f"run-{uuid.uuid4().hex[:10]}",
        "messages": [{"id": f"msg-{uuid.uuid4().hex[:8]}", "role": "user", "content": "go on"}],
        "state": {},
        "forwardedProps": {"client": "agui-gateway demo"},
    }
    if entries is not None:
        body["resume"] = entries
    body.update(extra)
    return orjson.dumps(body)


def _good(run: Interrupted, rng: random.Random, now: float) -> Send:
    return Send(request(run, _entries(run, rng, now)), FORWARD, answers=True)


def _reject(body: bytes, *reasons: str, not_before: float | None = None) -> Send:
    return Send(body, REJECT, frozenset(reasons), not_before)


# --- scenarios: each returns its sends, or None when the run does not allow it --------------

Builder = Callable[[Interrupted, random.Random, float, bool], list[Send] | None]


def good(run: Interrupted, rng: random.Random, now: float, strict: bool) -> list[Send]:
    return [_good(run, rng, now)]


def abandon(run: Interrupted, rng: random.Random, now: float, strict: bool) -> list[Send]:
    entries = [{"interruptId": i["id"], "status": "cancelled"} for i in run.interrupts]
    return [Send(request(run, entries), FORWARD, answers=True)]


def uncovered(run: Interrupted, rng: random.Random, now: float, strict: bool) -> list[Send]:
    entries = _entries(run, rng, now)
    del entries[rng.randrange(len(entries))]
    body = request(run, entries if entries or rng.random() < 0.5 else None)
    return [_reject(body, "uncovered_interrupt"), _good(run, rng, now)]


def unrecognised(run: Interrupted, rng: random.Random, now: float, strict: bool) -> list[Send]:
    entries = _entries(run, rng, now)
    entries.insert(rng.randint(0, len(entries)), {"interruptId": "ghost", "status": "resolved"})
    body = request(run, entries)
    if strict:
        return [_reject(body, "unrecognised_entry"), _good(run, rng, now)]
    return [Send(body, FORWARD, answers=True)]  # stripped with a warning


def duplicate_entry(run: Interrupted, rng: random.Random, now: float, strict: bool) -> list[Send]:
    entries = _entries(run, rng, now)
    entries.append(dict(rng.choice(entries)))
    return [_reject(request(run, entries), "duplicate_entry"), _good(run, rng, now)]


def schema_break(run: Interrupted, rng: random.Random, now: float, strict: bool):
    schemas = [n for n, i in enumerate(run.interrupts) if i.get("responseSchema")]
    if not schemas:
        return None
    entries = _entries(run, rng, now)
    index = rng.choice(schemas)
    entries[index] = {
        "interruptId": run.interrupts[index]["id"],
        "status": "resolved",
        "payload": _bad_payload(run.interrupts[index]),
    }
    return [_reject(request(run, entries), "payload_schema_mismatch"), _good(run, rng, now)]


def late(run: Interrupted, rng: random.Random, now: float, strict: bool):
    timed = [(n, e) for n, i in enumerate(run.interrupts) if (e := _expires(i)) is not None]
    if not timed:
        return None
    at = max(e for _, e in timed) + LATE_BY_S
    entries = _entries(run, rng, at)
    for n, _ in timed:
        entries[n] = {
            "interruptId": run.interrupts[n]["id"],
            "status": "resolved",
            "payload": _payload(run.interrupts[n], rng),
        }
    return [
        _reject(request(run, entries), "expired_interrupt", not_before=at),
        _good(run, rng, at),  # abandons what expired
    ]


def resend(run: Interrupted, rng: random.Random, now: float, strict: bool) -> list[Send]:
    first = _good(run, rng, now)
    return [first, Send(first.body, DUPLICATE)]


def second_answer(run: Interrupted, rng: random.Random, now: float, strict: bool) -> list[Send]:
    entries = [{"interruptId": i["id"], "status": "cancelled"} for i in run.interrupts]
    return [_good(run, rng, now), _reject(request(run, entries), "already_resumed")]


def malformed_json(run: Interrupted, rng: random.Random, now: float, strict: bool) -> list[Send]:
    body = request(run, _entries(run, rng, now))[: -rng.randint(2, 12)]  # truncated
    return [_reject(body, "malformed_input"), _good(run, rng, now)]


def wrong_types(run: Interrupted, rng: random.Random, now: float, strict: bool) -> list[Send]:
    entries = _entries(run, rng, now)
    if rng.random() < 0.5:
        body = request(run, entries, runId=rng.randint(1, 10**6))
    else:
        entries[0] = {**entries[0], "status": "maybe later"}
        body = request(run, entries)
    return [_reject(body, "malformed_input"), _good(run, rng, now)]


SCENARIOS: dict[str, tuple[float, Builder]] = {
    "good": (0.38, good),
    "abandon": (0.06, abandon),
    "uncovered": (0.08, uncovered),
    "unrecognised": (0.05, unrecognised),
    "duplicate_entry": (0.05, duplicate_entry),
    "schema_break": (0.08, schema_break),
    "late": (0.06, late),
    "resend": (0.07, resend),
    "second_answer": (0.07, second_answer),
    "malformed_json": (0.05, malformed_json),
    "wrong_types": (0.05, wrong_types),
}


def choose(
    run: Interrupted, rng: random.Random, strict: bool = False, now: float | None = None
) -> Scenario:
    """Pick a scenario the run allows, weighted, and build its sends."""
    now = time.time() if now is None else now
    names = list(SCENARIOS)
    weights = [SCENARIOS[n][0] for n in names]
    for _ in range(8):
        name = rng.choices(names, weights)[0]
        sends = SCENARIOS[name][1](run, rng, now, strict)
        if sends is not None:
            return Scenario(name, sends)
    return Scenario("good", good(run, rng, now, strict))
