"""Changelog values: a thread's state, versioned.

A value is one format-version byte followed by the state's encoding. Version 4
(written now) is a MessagePack array (ormsgpack) of the state's fields by position,
described in the README ("Changelog"): no field names, trailing fields at their
defaults left out, text as UTF-8 without escaping. Versions 1-3 are the Avro binary
encoding of `schemas/thread_state.v<N>.avsc`, read as package data of
`gateway.schemas` (the build maps that package to the top-level `schemas/`
directory, so a wheel carries the schemas and an editable install reads them in
place); they are still read, so a newer gateway restores an older changelog (Avro
schema resolution fills new fields from their defaults). A tombstone (null value)
deletes a thread.

Each record also carries two headers, `agui-status` (the run status) and
`agui-open` (how many interrupts are open), so a restore can count and index
threads without decoding them. A record without them is decoded.
"""

from __future__ import annotations

import io
from functools import cache
from importlib import resources
from typing import Any

import orjson
import ormsgpack
from fastavro import parse_schema, schemaless_reader

from gateway.codec import jsonio
from gateway.core.reading import response_schema
from gateway.core.values.thread import (
    ForwardRecord,
    InterruptRecord,
    RunStatus,
    SuspendedSubagent,
    ThreadState,
    from_dict,
)

SCHEMA_PACKAGE = "gateway.schemas"
CURRENT_VERSION = 4
AVRO_VERSIONS = (1, 2, 3)  # read only: each has its schemas/thread_state.v<N>.avsc

# Version 4's run status codes (stable: a code is never reused).
STATUS_CODES: dict[RunStatus, int] = {
    RunStatus.UNKNOWN: 0,
    RunStatus.ACTIVE: 1,
    RunStatus.SUCCEEDED: 2,
    RunStatus.INTERRUPTED: 3,
    RunStatus.CANCELLED: 4,
    RunStatus.FAILED: 5,
}
_STATUS_OF = {code: status for status, code in STATUS_CODES.items()}


class ChangelogFormatError(ValueError):
    """A changelog value this gateway cannot read."""


@cache  # keyed by format version: only 1, 2 and 3 are read, others raise
def schema(version: int) -> Any:
    """The Avro schema of format version 1, 2 or 3."""
    if version not in AVRO_VERSIONS:
        raise ChangelogFormatError(f"unknown changelog format version {version}")
    path = resources.files(SCHEMA_PACKAGE).joinpath(f"thread_state.v{version}.avsc")
    try:
        return parse_schema(orjson.loads(path.read_bytes()))
    except FileNotFoundError:
        raise ChangelogFormatError(f"unknown changelog format version {version}") from None


def _json_value(data: bytes | None) -> Any:
    if not data:
        return None
    try:
        return jsonio.loads(data)
    except (jsonio.JSONDecodeError, jsonio.TooDeep) as exc:
        raise ChangelogFormatError(f"undecodable JSON in a changelog value: {exc}") from None


def _kept(data: bytes | None) -> bytes | None:
    """A kept schema's bytes: the schema cache's own object when it knows them, so that
    restored threads holding one schema share it."""
    if not data:
        return None
    known = response_schema.known(data)
    return data if known is None else known


# --- version 4: writing ---------------------------------------------------------------------


def _trimmed(fields: list[Any]) -> list[Any]:
    """`fields` without its trailing defaults (None, false, 0, empty list)."""
    end = len(fields)
    while end and (fields[end - 1] is None or fields[end - 1] is False or fields[end - 1] == []):
        end -= 1
    return fields[:end] if end < len(fields) else fields


def _interrupt(i: InterruptRecord) -> list[Any]:
    return _trimmed(
        [
            i.id,
            i.reason,
            i.message,
            i.tool_call_id,
            i.response_schema,
            i.expires_at,
            None if i.metadata is None else jsonio.dumps(i.metadata),
            i.subagent_run_id,
            i.expiry_announced,
            i.response_schema_unusable,
            i.tool_name,
        ]
    )


def encode(state: ThreadState) -> bytes:
    """The version 4 value of `state`."""
    return _encode(state, state.thread_id)


def encode_held(state: ThreadState) -> bytes:
    """How a store may hold `state` in memory: its version 4 value without the thread id
    (null in its place; the store's key holds it). Read back with `decode_held`."""
    return _encode(state, None)


def held_from(value: bytes) -> bytes | None:
    """`encode_held`'s bytes of a state, from the version 4 value `encode` wrote for it:
    the same array with its first member (the thread id) made nil, without encoding the
    state again (a store holds every thread a transaction changed so). None when `value`
    is not laid out as `encode` writes it (then encode the state)."""
    if len(value) < 3 or value[0] != CURRENT_VERSION or value[1] & 0xF0 != 0x90:
        return None  # not version 4, or not a fixarray (at most 15 fields)
    tag = value[2]
    if 0xA0 <= tag <= 0xBF:  # fixstr
        end = 3 + (tag & 0x1F)
    elif tag == 0xD9:  # str 8
        end = 4 + value[3]
    elif tag == 0xDA:  # str 16
        end = 5 + int.from_bytes(value[3:5], "big")
    elif tag == 0xDB:  # str 32
        end = 7 + int.from_bytes(value[3:7], "big")
    else:
        return None
    if end > len(value):
        return None
    return value[:2] + b"\xc0" + value[end:]


def _encode(state: ThreadState, thread_id: str | None) -> bytes:
    fields = [
        thread_id,
        STATUS_CODES[state.status],
        state.run_id,
        state.outcome,
        state.closed_at_ms,
        state.updated_ms or None,
        state.interrupts_run_id,
        state.interrupts_closed_at_ms,
        [_interrupt(i) for i in state.interrupts],
        [
            _trimmed([f.run_id, f.fingerprint, f.answered_run_id, list(f.interrupt_ids), f.settled])
            for f in state.forwards
        ],
        [_interrupt(i) for i in state.held_interrupts],
        list(state.open_subagents),
        [_trimmed([s.subagent_run_id, list(s.interrupt_ids)]) for s in state.suspended],
        state.failed_late,
        [list(call) for call in state.tool_calls],
    ]
    return b"\x04" + ormsgpack.packb(_trimmed(fields))


# --- version 4: reading ---------------------------------------------------------------------


def _bad(what: str) -> ChangelogFormatError:
    return ChangelogFormatError(f"unreadable changelog state: {what}")


def _text(value: Any, what: str) -> str:
    if type(value) is not str:
        raise _bad(f"{what} is not text")
    return value


def _opt_text(value: Any, what: str) -> str | None:
    if value is not None and type(value) is not str:
        raise _bad(f"{what} is not text")
    return value


def _opt_int(value: Any, what: str) -> int | None:
    if value is not None and type(value) is not int:
        raise _bad(f"{what} is not an integer")
    return value


def _bool(value: Any, what: str) -> bool:
    if type(value) is not bool:
        raise _bad(f"{what} is not a boolean")
    return value


def _list(value: Any, what: str, most: int) -> list[Any]:
    if type(value) is not list or len(value) > most:
        raise _bad(f"{what} is not a list of at most {most} members")
    return value


def _texts(value: Any, what: str) -> tuple[str, ...]:
    items = _list(value, what, 1 << 16)
    for item in items:
        if type(item) is not str:
            raise _bad(f"{what} holds a member that is not text")
    return tuple(items)


_INTERRUPT_DEFAULTS: tuple[Any, ...] = (
    None,
    None,
    None,
    None,
    None,
    None,
    None,
    None,
    False,
    None,
    None,
)
_FORWARD_DEFAULTS: tuple[Any, ...] = (None, None, None, [], False)


def _padded(fields: list[Any], defaults: tuple[Any, ...]) -> list[Any]:
    """`fields` with the trailing ones the writer left out at their defaults."""
    return [*fields, *defaults[len(fields) :]]


def _read_interrupt(value: Any) -> InterruptRecord:
    fields = _list(value, "an interrupt", len(_INTERRUPT_DEFAULTS))
    if len(fields) < 2:
        raise _bad("an interrupt lacks its id or reason")
    i, reason, message, call, schema_bytes, expires, meta, sub, announced, unusable, tool = _padded(
        fields, _INTERRUPT_DEFAULTS
    )
    if schema_bytes is not None and type(schema_bytes) is not bytes:
        raise _bad("a responseSchema is not bytes")
    if meta is not None and type(meta) is not bytes:
        raise _bad("interrupt metadata is not bytes")
    return InterruptRecord(
        _text(i, "an interrupt id"),
        _text(reason, "an interrupt reason"),
        _opt_text(message, "an interrupt message"),
        _opt_text(call, "a toolCallId"),
        _kept(schema_bytes),
        _opt_text(expires, "an expiresAt"),
        _json_value(meta),
        _opt_text(sub, "a subagentRunId"),
        _bool(announced, "expiry_announced"),
        _opt_text(unusable, "response_schema_unusable"),
        _opt_text(tool, "a tool name"),
    )


def _read_tool_call(value: Any) -> tuple[str, str]:
    fields = _list(value, "a tool call", 2)
    if len(fields) != 2:
        raise _bad("a tool call lacks its toolCallId or name")
    return _text(fields[0], "a toolCallId"), _text(fields[1], "a tool name")


def _read_forward(value: Any) -> ForwardRecord:
    fields = _list(value, "a forward", 5)
    if len(fields) < 2:
        raise _bad("a forward lacks its runId or fingerprint")
    run, fingerprint, answered, ids, settled = _padded(fields, _FORWARD_DEFAULTS)
    return ForwardRecord(
        _text(run, "a forward's runId"),
        _text(fingerprint, "a forward's fingerprint"),
        _opt_text(answered, "a forward's answered runId"),
        _texts(ids, "a forward's interrupt ids"),
        _bool(settled, "a forward's settled"),
    )


def _read_suspended(value: Any) -> SuspendedSubagent:
    fields = _list(value, "a suspended invocation", 2)
    if not fields:
        raise _bad("a suspended invocation lacks its subagentRunId")
    ids = _texts(fields[1], "suspended interrupt ids") if len(fields) > 1 else ()
    return SuspendedSubagent(_text(fields[0], "a subagentRunId"), ids)


_STATE_DEFAULTS: tuple[Any, ...] = (
    None,
    0,
    None,
    None,
    None,
    None,
    None,
    None,
    [],
    [],
    [],
    [],
    [],
    False,
    [],
)
_MANY = 1 << 16  # far beyond what the core's bounds let a state hold


def _decode_v4(value: bytes, key: str | None = None) -> ThreadState:
    try:
        body = ormsgpack.unpackb(value[1:])
    except (ValueError, TypeError) as exc:
        raise ChangelogFormatError(f"undecodable changelog value: {exc}") from None
    fields = _list(body, "the state", len(_STATE_DEFAULTS))
    if not fields:
        raise _bad("the state lacks its thread id")
    (
        thread_id,
        status,
        run_id,
        outcome,
        closed_at_ms,
        updated_ms,
        interrupts_run_id,
        interrupts_closed_at_ms,
        interrupts,
        forwards,
        held,
        open_subagents,
        suspended,
        failed_late,
        tool_calls,
    ) = _padded(fields, _STATE_DEFAULTS)
    if key is not None and thread_id is None:
        thread_id = key
    run_status = _STATUS_OF.get(status) if type(status) is int else None
    if run_status is None:
        raise _bad(f"run status {status!r} is not one this version knows")
    return ThreadState(
        _text(thread_id, "the thread id"),
        run_status,
        _opt_text(run_id, "runId"),
        _opt_text(outcome, "outcome"),
        tuple(_read_interrupt(i) for i in _list(interrupts, "interrupts", _MANY)),
        _opt_int(closed_at_ms, "closed_at_ms"),
        _bool(failed_late, "failed_late"),
        _texts(open_subagents, "open subagents"),
        tuple(_read_suspended(s) for s in _list(suspended, "suspended", _MANY)),
        tuple(_read_forward(f) for f in _list(forwards, "forwards", _MANY)),
        _opt_int(updated_ms, "updated_ms") or 0,
        _opt_text(interrupts_run_id, "interrupts_run_id"),
        _opt_int(interrupts_closed_at_ms, "interrupts_closed_at_ms"),
        tuple(_read_interrupt(i) for i in _list(held, "held interrupts", _MANY)),
        tuple(_read_tool_call(c) for c in _list(tool_calls, "tool calls", _MANY)),
    )


# --- reading any version ----------------------------------------------------------------------


def decode(value: bytes) -> ThreadState:
    """The state a changelog value of any version holds."""
    if not value:
        raise ChangelogFormatError("empty changelog value")
    if value[0] == CURRENT_VERSION:
        return _decode_v4(value)
    return _decode_avro(value)


def decode_held(value: bytes, thread_id: str) -> ThreadState:
    """The state a store holds as `encode_held` bytes (or as a changelog value of any
    version, as a restore leaves it), `thread_id` being the store's key."""
    if value[:1] == b"\x04":
        return _decode_v4(value, thread_id)
    return decode(value)


_INTERRUPTS_AT, _UPDATED_AT = 8, 5  # version 4's fields by position (see `_encode`)
_EXPIRES_AT, _ANNOUNCED_AT = 5, 8  # an interrupt's (see `_interrupt`)

# What a sweep reads of a thread without building its state: the run status, updated_ms,
# and each interrupt's expiresAt and whether its expiry was announced.
SweepView = tuple[RunStatus, int, list[tuple[str | None, bool]]]


def sweep_view(value: bytes) -> SweepView | None:
    """What a sweep needs of a version 4 value (held or written), read without
    building the state: a quarter to a tenth of what decoding it costs. None for a
    value of another version, and for one this reading cannot vouch for (decode it:
    `decode_held` says what is wrong with it). A value unreadable only in a field this
    does not read is found so when its thread is next read."""
    if value[:1] != b"\x04":
        return None
    try:
        fields = ormsgpack.unpackb(value[1:])
    except (ValueError, TypeError):
        return None
    if type(fields) is not list or not 2 <= len(fields) <= len(_STATE_DEFAULTS):
        return None
    status = fields[1]
    run_status = _STATUS_OF.get(status) if type(status) is int else None
    updated = fields[_UPDATED_AT] if len(fields) > _UPDATED_AT else None
    if run_status is None or (updated is not None and type(updated) is not int):
        return None
    interrupts = fields[_INTERRUPTS_AT] if len(fields) > _INTERRUPTS_AT else []
    if type(interrupts) is not list:
        return None
    expiries = []
    for i in interrupts:
        if type(i) is not list or not 2 <= len(i) <= len(_INTERRUPT_DEFAULTS):
            return None
        expires = i[_EXPIRES_AT] if len(i) > _EXPIRES_AT else None
        announced = i[_ANNOUNCED_AT] if len(i) > _ANNOUNCED_AT else False
        if (expires is not None and type(expires) is not str) or type(announced) is not bool:
            return None
        expiries.append((expires, announced))
    return run_status, updated or 0, expiries


def _decode_avro(value: bytes) -> ThreadState:
    writer = schema(value[0])
    try:
        record = schemaless_reader(io.BytesIO(value[1:]), writer, schema(AVRO_VERSIONS[-1]))
    except Exception as exc:
        raise ChangelogFormatError(f"undecodable changelog value: {exc}") from None
    if not isinstance(record, dict):
        raise ChangelogFormatError("changelog value is not a record")
    for item in (*record["interrupts"], *record["held_interrupts"]):
        raw_schema = item.pop("response_schema_json", None)
        raw_meta = item.pop("metadata_json", None)
        if value[0] >= 3 or not raw_schema:  # the canonical form, judged when recorded
            item["response_schema"] = _kept(raw_schema.encode() if raw_schema else None)
        else:  # v1, v2: the schema as received, judged now as it would be when recorded
            kept, unusable, _ = response_schema.record(_json_value(raw_schema.encode()))
            item["response_schema"] = kept
            item["response_schema_unusable"] = unusable
        item["metadata"] = _json_value(raw_meta.encode() if raw_meta else None)
    try:
        return from_dict(record)
    except (ValueError, KeyError, TypeError) as exc:  # e.g. a status this version lacks
        raise ChangelogFormatError(f"unreadable changelog state: {exc!r}") from None


HEADER_STATUS = "agui-status"
HEADER_OPEN = "agui-open"
_STATUS_BYTES = {status: str(status).encode() for status in RunStatus}


def status_bytes(status: RunStatus) -> bytes:
    """The status hint's value for `status`."""
    return _STATUS_BYTES[status]


def hints(state: ThreadState) -> list[tuple[str, bytes]]:
    """The headers a changelog record carries about its state."""
    return [
        (HEADER_STATUS, _STATUS_BYTES[state.status]),
        (HEADER_OPEN, b"%d" % len(state.interrupts)),
    ]


def read_hints(headers: object) -> tuple[str, int] | None:
    """(status, open interrupts) from a record's headers, or None when absent or unreadable."""
    status = open_count = None
    for key, value in headers or ():  # type: ignore[attr-defined]
        if key == HEADER_STATUS:
            status = value
        elif key == HEADER_OPEN:
            open_count = value
    if status is None or open_count is None:
        return None
    try:
        return status.decode(), int(open_count)
    except (UnicodeDecodeError, ValueError, AttributeError, TypeError):
        return None


# --- keys ------------------------------------------------------------------------------------
#
# On an agent's own changelog a record's key is the threadId (UTF-8), as it always was. On
# a group's changelog (`agui.<group>.gateway-changelog`) the threads of many agents meet,
# so the key names both: `<n>:<agent>:<threadId>`, n being the agent name's length in
# characters (decimal). The length makes it unambiguous whatever either name holds.


def group_key(agent: str, thread_id: str) -> str:
    """The store's and the changelog's key of `agent`'s thread `thread_id` in a group."""
    return f"{len(agent)}:{agent}:{thread_id}"


def split_group_key(key: str) -> tuple[str, str] | None:
    """(agent, threadId) of a group's key, or None when `key` is not one."""
    length, colon, rest = key.partition(":")
    if not colon or not (length.isascii() and length.isdigit()) or len(length) > 6:
        return None
    n = int(length)
    if n == 0 or len(rest) <= n or rest[n] != ":":
        return None
    return rest[:n], rest[n + 1 :]
