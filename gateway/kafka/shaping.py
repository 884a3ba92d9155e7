"""What the gateway writes, as pure functions: envelopes, headers, size limits.

Rejections, replies, warnings and changelog records are shaped here from a
decision or a finding; nothing here talks to Kafka, reads the clock or logs
(a purity test holds it to that). The pair decides, this module shapes, the
checkpoint writes.
"""

from __future__ import annotations

import functools
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from gateway.codec import changelog
from gateway.codec.records import (
    HEADER_CORRELATION_ID,
    MAX_RECORD_BYTES,
    InRecord,
    OutRecord,
    correlation,
    dumps,
    original_input,
    raw_input,
    source_of,
)
from gateway.core import Decision, Reason, ThreadState, Verdict
from gateway.core.findings import Finding

# A rejection carries the original request up to this size; a larger one is
# referenced by `source` instead, so the record always fits the topic's limit.
MAX_CARRIED_INPUT = 512 * 1024
# Every record the gateway writes stays under the producer's and the broker's default
# limit (1 MiB): a record Kafka refuses would abort the round again and again.
# What a record carries of the findings: the first few, each string bounded.
MAX_CARRIED_FINDINGS = 50
MAX_FINDING_TEXT = 1_000
# A record key longer than this is no usable threadId (and could not be written back).
MAX_KEY_BYTES = 8 * 1024

Headers = list[tuple[str, bytes]]


@functools.lru_cache(maxsize=1024)  # a round's decisions mostly share one wall time
def iso(ms: int) -> str:
    try:
        return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")
    except (ValueError, OverflowError, OSError):
        return f"{ms} ms since the epoch"  # a record timestamp outside years 1-9999


def short(text: str) -> str:
    if len(text) <= MAX_FINDING_TEXT:
        return text
    return f"{text[:MAX_FINDING_TEXT]}... ({len(text):,} characters)"


def carried(finding: Finding) -> dict[str, Any]:
    """A finding as a record carries it: long strings (a huge unknown key's path) cut."""
    return {k: short(v) if isinstance(v, str) else v for k, v in finding.to_json().items()}


def carried_list(findings: Any, name: str) -> dict[str, Any]:
    """`{name: [...]}` with at most MAX_CARRIED_FINDINGS findings, and how many were left out."""
    findings = list(findings)
    out: dict[str, Any] = {name: [carried(f) for f in findings[:MAX_CARRIED_FINDINGS]]}
    if len(findings) > MAX_CARRIED_FINDINGS:
        out[f"{name}Omitted"] = len(findings) - MAX_CARRIED_FINDINGS
    return out


def fitted(body: dict[str, Any], raw: bytes | None) -> bytes:
    """JSON of a rejection or reply, under MAX_RECORD_BYTES whatever its input was.

    The input is carried parsed; if that grows too large when written again
    (`1E9` becomes `1000000000.0`), as the text received; failing that, not at all.
    """
    value = dumps(body)
    if len(value) <= MAX_RECORD_BYTES or "input" not in body:
        return value
    slim = {k: v for k, v in body.items() if k not in ("input", "inputText", "inputBase64")}
    value = dumps({**slim, **raw_input(raw, MAX_CARRIED_INPUT)})
    if len(value) <= MAX_RECORD_BYTES:
        return value
    omitted = f"{len(raw or b'')} bytes, too large to carry; read it at `source`"
    return dumps({**slim, "input": None, "inputOmitted": omitted})


def thread_of(record: Any) -> str | None:
    """The threadId a record's key names, or None (absent, too long, not UTF-8)."""
    if not record.key or len(record.key) > MAX_KEY_BYTES:
        return None
    try:
        return str(record.key.decode("utf-8"))
    except UnicodeDecodeError:
        return None


def key_problem(record: Any) -> str:
    if record.key is not None and len(record.key) > MAX_KEY_BYTES:
        return f"a key of {len(record.key):,} bytes, over the {MAX_KEY_BYTES:,} a threadId may have"
    return "no UTF-8 key"


def output_key(record: Any, thread_id: str | None) -> bytes | None:
    if thread_id is not None:
        return thread_id.encode()
    key = record.key
    return key if key is not None and len(key) <= MAX_KEY_BYTES else None


def correlation_headers(record: InRecord) -> Headers:
    """The correlation id header, carried exactly as received onto every output."""
    correlation_id = record.header_bytes(HEADER_CORRELATION_ID)
    return [(HEADER_CORRELATION_ID, correlation_id)] if correlation_id is not None else []


def _group(group: str | None) -> dict[str, Any]:
    """The `group` member of a record about a group's topics (absent on an agent's own)."""
    return {} if group is None else {"group": group}


def reply_body(
    record: InRecord,
    agent: str | None,
    decision: Decision,
    thread_id: str | None,
    now_ms: int,
    raw: Any,
    group: str | None = None,
) -> dict[str, Any]:
    """A decision's reply (for a rejection: the rejection record) as JSON members.

    `agent` is None for a request on a group's topics that named no usable agent."""
    envelope: dict[str, Any] = {
        "verdict": str(decision.verdict),
        "agent": agent,
        **_group(group),
        "threadId": thread_id,
        "runId": decision.run_id,
        **correlation(record.header_bytes(HEADER_CORRELATION_ID)),
    }
    if decision.verdict is Verdict.FORWARD:
        return {**envelope, **carried_list(decision.warnings, "warnings"), "at": iso(now_ms)}
    if decision.verdict is Verdict.REJECT:
        return {
            **envelope,
            **carried_list(decision.reasons, "reasons"),
            **carried_list(decision.warnings, "warnings"),
            **original_input(record.value, MAX_CARRIED_INPUT, raw),
            "at": iso(now_ms),
            "source": record.source(),
        }
    return {**envelope, "at": iso(now_ms)}


def internal_error_body(
    record: InRecord,
    agent: str | None,
    thread_id: str | None,
    now_ms: int,
    exc: Exception,
    group: str | None = None,
) -> bytes:
    """The rejection of a request the gateway failed on: plain values only, the input
    carried as the bytes received."""
    reply = {
        "verdict": str(Verdict.REJECT),
        "agent": agent,
        **_group(group),
        "threadId": thread_id,
        "runId": None,
        **correlation(record.header_bytes(HEADER_CORRELATION_ID)),
        "reasons": [
            carried(
                Finding(
                    str(Reason.INTERNAL_ERROR),
                    f"the gateway failed to judge this request ({type(exc).__name__}: "
                    f"{exc}); it is rejected, not forwarded. Please report it",
                )
            )
        ],
        "warnings": [],
        **raw_input(record.value, MAX_CARRIED_INPUT),
        "at": iso(now_ms),
        "source": record.source(),
    }
    return fitted(reply, record.value)


def warning_body(
    warning: Finding,
    agent: str | None,
    record: Any,
    thread_id: str | None,
    run_id: str | None,
    at_ms: int,
    suppressed: int,
    group: str | None = None,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        **carried(warning),
        "agent": agent,
        **_group(group),
        "threadId": thread_id,
        "runId": run_id,
        "at": iso(at_ms),
    }
    if record is not None:
        body["source"] = source_of(record)
    if suppressed:
        body["suppressed"] = suppressed
    return body


# What a state too large for one changelog record is written without, in this order.
LIGHTER: tuple[dict[str, Any], ...] = (
    {"response_schema": None, "metadata": None},
    {"response_schema": None, "metadata": None, "message": None},
)


def slimmed(state: ThreadState) -> tuple[ThreadState, bytes, tuple[str, ...]] | None:
    """A state too large for one record, without what makes it large: (state, value, what
    was left out), or None when even the lightest form is too large.

    The interrupts' `responseSchema` and `metadata` go first (payloads are then not
    checked), then their messages.
    """
    for fields in LIGHTER:
        slim = replace(state, interrupts=tuple(replace(i, **fields) for i in state.interrupts))
        value = changelog.encode(slim)
        if len(value) <= MAX_RECORD_BYTES:
            return slim, value, tuple(fields)
    return None


def changelog_record(
    topic: str, partition: int, thread_id: str, value: bytes | None, state: ThreadState | None
) -> OutRecord:
    """A thread's changelog record (a tombstone when `state` is None), with its hints."""
    if state is None:
        return OutRecord(topic, thread_id.encode(), None, partition=partition)
    return OutRecord(topic, thread_id.encode(), value, changelog.hints(state), partition=partition)
