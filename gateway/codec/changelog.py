"""Changelog values: a thread's state as versioned Avro (fastavro).

A value is one format-version byte followed by the Avro binary encoding of
`schemas/thread_state.v<N>.avsc`, read as package data of `gateway.schemas`
(the build maps that package to the top-level `schemas/` directory, so a
wheel carries the schemas and an editable install reads them in place). Readers keep every version's schema, so a
newer gateway restores an older changelog (Avro schema resolution fills new
fields from their defaults). A tombstone (null value) deletes a thread.

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
from fastavro import parse_schema, schemaless_reader, schemaless_writer

from gateway.codec import jsonio
from gateway.core import response_schema
from gateway.core.thread import ThreadState, from_dict, to_dict

SCHEMA_PACKAGE = "gateway.schemas"
CURRENT_VERSION = 3


class ChangelogFormatError(ValueError):
    """A changelog value this gateway cannot read."""


@cache
def schema(version: int) -> Any:
    path = resources.files(SCHEMA_PACKAGE).joinpath(f"thread_state.v{version}.avsc")
    try:
        return parse_schema(orjson.loads(path.read_bytes()))
    except FileNotFoundError:
        raise ChangelogFormatError(f"unknown changelog format version {version}") from None


def _json_or_none(value: Any) -> str | None:
    return None if value is None else jsonio.dumps(value).decode()


def _json_value(text: str | None) -> Any:
    if not text:
        return None
    try:
        return jsonio.loads(text.encode())
    except (jsonio.JSONDecodeError, jsonio.TooDeep) as exc:
        raise ChangelogFormatError(f"undecodable JSON in a changelog value: {exc}") from None


def _kept(text: str | None) -> bytes | None:
    """A kept schema's bytes: the schema cache's own object when it knows them, so that
    restored threads holding one schema share it."""
    if not text:
        return None
    data = text.encode()
    known = response_schema.known(data)
    return data if known is None else known


def encode(state: ThreadState) -> bytes:
    record = to_dict(state)
    for item in (*record["interrupts"], *record["held_interrupts"]):
        item["response_schema_json"] = item.pop("response_schema")  # canonical JSON text
        item["metadata_json"] = _json_or_none(item.pop("metadata"))
    out = io.BytesIO()
    out.write(bytes([CURRENT_VERSION]))
    schemaless_writer(out, schema(CURRENT_VERSION), record)
    return out.getvalue()


def decode(value: bytes) -> ThreadState:
    if not value:
        raise ChangelogFormatError("empty changelog value")
    writer = schema(value[0])
    try:
        record = schemaless_reader(io.BytesIO(value[1:]), writer, schema(CURRENT_VERSION))
    except Exception as exc:
        raise ChangelogFormatError(f"undecodable changelog value: {exc}") from None
    if not isinstance(record, dict):
        raise ChangelogFormatError("changelog value is not a record")
    for item in (*record["interrupts"], *record["held_interrupts"]):
        raw_schema = item.pop("response_schema_json", None)
        raw_meta = item.pop("metadata_json", None)
        if value[0] >= 3 or not raw_schema:  # the canonical form, judged when recorded
            item["response_schema"] = _kept(raw_schema)
        else:  # v1, v2: the schema as received, judged now as it would be when recorded
            kept, unusable, _ = response_schema.record(_json_value(raw_schema))
            item["response_schema"] = kept
            item["response_schema_unusable"] = unusable
        item["metadata"] = _json_value(raw_meta)
    try:
        return from_dict(record)
    except (ValueError, KeyError, TypeError) as exc:  # e.g. a status this version lacks
        raise ChangelogFormatError(f"unreadable changelog state: {exc!r}") from None


HEADER_STATUS = "agui-status"
HEADER_OPEN = "agui-open"


def hints(state: ThreadState) -> list[tuple[str, bytes]]:
    """The headers a changelog record carries about its state."""
    return [
        (HEADER_STATUS, str(state.status).encode()),
        (HEADER_OPEN, str(len(state.interrupts)).encode()),
    ]


def read_hints(headers: object) -> tuple[str, int] | None:
    """(status, open interrupts) from a record's headers, or None when absent or unreadable."""
    status: str | None = None
    open_count: int | None = None
    for key, value in headers or ():  # type: ignore[attr-defined]
        try:
            if key == HEADER_STATUS:
                status = value.decode()
            elif key == HEADER_OPEN:
                open_count = int(value)
        except (UnicodeDecodeError, ValueError, AttributeError):
            return None
    if status is None or open_count is None:
        return None
    return status, open_count
