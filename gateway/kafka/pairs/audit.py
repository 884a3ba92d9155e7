"""The audit record of one decided request, as a pure function (schemas/audit.schema.json).

Who answered (the identity the shell verified, or none: unattested), which
interrupts the request answered or abandoned, the verdict and its reasons, where
the request came from and when it was decided. A resume payload is never carried:
only the SHA-256 of its canonical JSON (RFC 8785), so that an auditor holding a
payload can prove it was the one approved, and the trail holds no personal data a
payload may carry. Every list and string is bounded, so a record stays far below
the producer's limit whatever the request held.

Pure (no Kafka, clock or logging): the pair's effects put the record into the
decision's round, so it commits in the decision's own transaction, or not at all.
"""

from __future__ import annotations

import hashlib
from typing import Any

import rfc8785

from gateway.codec import canonical
from gateway.codec.records import (
    HEADER_CORRELATION_ID,
    MAX_RECORD_BYTES,
    NOT_DECODED,
    InRecord,
    correlation,
    dumps,
)
from gateway.core import Decision, ThreadState, Verdict
from gateway.core.values.identity import Identity
from gateway.kafka.pairs import shaping

AUDIT_VERSION = 1
# What one record carries at most: the first entries of each list (the rest counted in
# `<name>Omitted`), each string cut to a bound (an id or a subject to MAX_ID_CHARS, a
# finding's detail to MAX_DETAIL_CHARS, a status or code to MAX_WORD_CHARS).
MAX_INTERRUPTS = 50
MAX_REASONS = 50
MAX_GROUPS = 50
MAX_ID_CHARS = 1_000
MAX_DETAIL_CHARS = 300
MAX_WORD_CHARS = 100
UNATTESTED = "unattested"
VERIFIED = "verified"


def clip(text: str, limit: int) -> str:
    """`text` cut to `limit` characters, saying how long it was."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text):,} characters)"


def _text(value: Any, limit: int) -> str | None:
    return clip(value, limit) if isinstance(value, str) else None


def key(agent: str | None, owner: str, thread_id: str | None) -> bytes:
    """`<agent>/<threadId>`: one thread's records on one partition, in order, found by
    agent and thread (an agent's name never holds `/`: it is part of topic names). The
    topics' owner stands in for an agent a record named none usable of."""
    return f"{agent or owner}/{thread_id or ''}".encode()


def payload_hash(entry: dict[str, Any]) -> dict[str, Any]:
    """`payloadSha256` of a resume entry: the hex SHA-256 of its payload's RFC 8785
    canonical JSON; null without a payload, with `payloadNotHashed` saying why when the
    payload has no canonical form (an integer beyond +-2^53, nesting deeper than the
    canonicalizer reaches)."""
    if "payload" not in entry:
        return {"payloadSha256": None}
    try:
        written = canonical.dumps(entry["payload"])
    except rfc8785.IntegerDomainError:
        why = "it holds an integer beyond +-(2^53 - 1), which RFC 8785 cannot write"
    except rfc8785.FloatDomainError:
        why = "it holds a number RFC 8785 cannot write"
    except rfc8785.CanonicalizationError:
        why = "it has no RFC 8785 canonical form"
    except RecursionError:
        why = "it is nested too deep to canonicalize"
    else:
        return {"payloadSha256": hashlib.sha256(written).hexdigest()}
    # the canonicalizer's own message quotes the payload's value: never carried
    return {"payloadSha256": None, "payloadNotHashed": why}


def interrupts(raw: Any, decision: Decision, state: ThreadState | None) -> dict[str, Any]:
    """The resume entries of the request as sent (the first MAX_INTERRUPTS): each
    interrupt's id, status, the reason it was raised for (when it is open on the
    thread; with `toolName` when its tool call's name is known), whether it reached the
    agent, and its payload's hash."""
    resume = raw.get("resume") if raw is not NOT_DECODED and isinstance(raw, dict) else None
    if not isinstance(resume, list):
        return {"interrupts": []}
    reasons = {i.id: i.reason for i in state.interrupts} if state is not None else {}
    tools = {i.id: i.tool_name for i in state.interrupts if i.tool_name} if state else {}
    forwarded = (
        {a.interrupt_id for a in decision.answers} if decision.verdict is Verdict.FORWARD else set()
    )
    out: list[dict[str, Any]] = []
    for entry in resume[:MAX_INTERRUPTS]:
        if not isinstance(entry, dict):
            out.append(
                {
                    "interruptId": None,
                    "status": None,
                    "reason": None,
                    "forwarded": False,
                    "payloadSha256": None,
                }
            )
            continue
        interrupt_id = entry.get("interruptId")
        reason = reasons.get(interrupt_id) if isinstance(interrupt_id, str) else None
        tool = tools.get(interrupt_id) if isinstance(interrupt_id, str) else None
        out.append(
            {
                "interruptId": _text(interrupt_id, MAX_ID_CHARS),
                "status": _text(entry.get("status"), MAX_WORD_CHARS),
                "reason": _text(reason, MAX_ID_CHARS),
                **({} if tool is None else {"toolName": tool}),
                "forwarded": isinstance(interrupt_id, str) and interrupt_id in forwarded,
                **payload_hash(entry),
            }
        )
    found: dict[str, Any] = {"interrupts": out}
    if len(resume) > MAX_INTERRUPTS:
        found["interruptsOmitted"] = len(resume) - MAX_INTERRUPTS
    return found


def identity(who: Identity | None) -> dict[str, Any]:
    """`attestation` and `identity`: the verified identity, or unattested (null)."""
    if who is None:
        return {"attestation": UNATTESTED, "identity": None}
    found: dict[str, Any] = {
        "subject": clip(who.subject, MAX_ID_CHARS),
        "groups": [clip(g, MAX_ID_CHARS) for g in who.groups[:MAX_GROUPS]],
        "issuer": clip(who.issuer, MAX_ID_CHARS),
        "signer": clip(who.signer, MAX_ID_CHARS),
    }
    if len(who.groups) > MAX_GROUPS:
        found["groupsOmitted"] = len(who.groups) - MAX_GROUPS
    return {"attestation": VERIFIED, "identity": found}


def reasons(decision: Decision) -> dict[str, Any]:
    """The verdict's reasons (the first MAX_REASONS), each detail clipped."""
    out = []
    for finding in decision.reasons[:MAX_REASONS]:
        item: dict[str, Any] = {"code": clip(str(finding.code), MAX_WORD_CHARS)}
        if finding.interrupt_id is not None:
            item["interruptId"] = clip(finding.interrupt_id, MAX_ID_CHARS)
        if finding.path is not None:
            item["path"] = clip(finding.path, MAX_ID_CHARS)
        if finding.rule is not None:
            item["rule"] = clip(str(finding.rule), MAX_WORD_CHARS)
        item["detail"] = clip(finding.detail, MAX_DETAIL_CHARS)
        out.append(item)
    found: dict[str, Any] = {"reasons": out}
    if len(decision.reasons) > MAX_REASONS:
        found["reasonsOmitted"] = len(decision.reasons) - MAX_REASONS
    return found


def _correlation(record: InRecord) -> dict[str, Any]:
    found = correlation(record.header_bytes(HEADER_CORRELATION_ID))
    if found["correlationId"] is not None:
        found["correlationId"] = clip(found["correlationId"], MAX_ID_CHARS)
    return found


def encode(found: dict[str, Any]) -> bytes:
    """The record's JSON, under MAX_RECORD_BYTES whatever it holds: if its strings
    (escaped, up to six bytes a character) make it too large, its lists are left out
    and counted instead (`<name>Omitted`)."""
    value = dumps(found)
    if len(value) <= MAX_RECORD_BYTES:
        return value
    slim = dict(found)
    for name in ("interrupts", "reasons"):
        slim[name] = []
        slim[f"{name}Omitted"] = len(found[name]) + found.get(f"{name}Omitted", 0)
    who = found.get("identity")
    if who is not None:
        slim["identity"] = {
            **who,
            "groups": [],
            "groupsOmitted": len(who["groups"]) + who.get("groupsOmitted", 0),
        }
    return dumps(slim)


def body(
    record: InRecord,
    decision: Decision,
    agent: str | None,
    group: str | None,
    thread_id: str | None,
    judged_ms: int,
    decided_ms: int,
    raw: Any = NOT_DECODED,
    state: ThreadState | None = None,
) -> dict[str, Any]:
    """The audit record of `decision` on `record`. `judged_ms` is the time the request
    was judged at (its log-append time on a topic so configured), `decided_ms` the
    gateway's clock when it decided."""
    return {
        "auditVersion": AUDIT_VERSION,
        "verdict": str(decision.verdict),
        **identity(decision.identity),
        "agent": agent,
        **({} if group is None else {"group": group}),
        "threadId": thread_id,
        "runId": _text(decision.run_id, MAX_ID_CHARS),
        **interrupts(raw, decision, state),
        **reasons(decision),
        **_correlation(record),
        "source": record.source(),
        "requestedAt": shaping.iso(record.timestamp),
        "requestedAtMs": record.timestamp,
        "judgedAt": shaping.iso(judged_ms),
        "decidedAt": shaping.iso(decided_ms),
        "decidedAtMs": decided_ms,
    }
