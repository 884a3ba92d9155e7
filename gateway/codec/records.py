"""Records as the shell sees them, and the JSON bytes on the gateway's topics."""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import Any

from gateway.codec import jsonio
from gateway.core.events.classify import KNOWN_TYPES, EventKind, classify
from gateway.core.values.codes import Reason, Verdict
from gateway.core.values.decision import Decision
from gateway.core.values.findings import Finding

TIMESTAMP_LOG_APPEND = 1
# Every record the gateway writes stays under the producer's and the broker's default
# limit (1 MiB): a record Kafka refuses would abort the round again and again.
MAX_RECORD_BYTES = 1_000_000

HEADER_REPLY_TO = "agui-reply-to"
HEADER_CORRELATION_ID = "agui-correlation-id"
# The agent a record is for (events, requests, forwards) on a group's shared topics.
HEADER_AGENT = "agui-agent"


@dataclass(slots=True)
class InRecord:
    """One consumed record of an agent's events or requests topic."""

    topic: str
    partition: int
    offset: int
    timestamp: int  # epoch ms
    timestamp_type: int  # 0 CreateTime, 1 LogAppendTime (as aiokafka's ConsumerRecord)
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...] = ()
    received: float = 0.0  # monotonic seconds when consumed

    @property
    def log_append_time(self) -> bool:
        return self.timestamp_type == TIMESTAMP_LOG_APPEND

    def header(self, name: str) -> str | None:
        for key, value in self.headers:
            if key == name and value is not None:
                try:
                    return value.decode()
                except UnicodeDecodeError:
                    return None
        return None

    def header_bytes(self, name: str) -> bytes | None:
        """A header's value exactly as received (the first of that name), or None."""
        for key, value in self.headers:
            if key == name and value is not None:
                return bytes(value)
        return None

    def source(self) -> dict[str, Any]:
        return source_of(self)


def correlation(value: bytes | None) -> dict[str, Any]:
    """The JSON members carrying a correlation id: the text when UTF-8, else base64 with
    `correlationIdEncoding: "base64"`; null when there was none. Never dropped."""
    if value is None:
        return {"correlationId": None}
    try:
        return {"correlationId": value.decode("utf-8")}
    except UnicodeDecodeError:
        return {
            "correlationId": base64.b64encode(value).decode(),
            "correlationIdEncoding": "base64",
        }


def source_of(record: Any) -> dict[str, Any]:
    """Where a consumed record (an InRecord or aiokafka's ConsumerRecord) came from."""
    return {"topic": record.topic, "partition": record.partition, "offset": record.offset}


def from_consumer(record: Any, received: float, where: tuple[str, int] | None = None) -> InRecord:
    """A consumed record as an InRecord. A record read as the fetch decoded it (the
    gateway's consumers: `gateway.kafka.wire.asread`) has no topic nor partition: `where`
    gives them (a ConsumerRecord's own otherwise)."""
    if isinstance(record, InRecord):
        return record
    topic, partition = where if where is not None else (record.topic, record.partition)
    return InRecord(
        topic,
        partition,
        record.offset,
        record.timestamp,
        record.timestamp_type,
        record.key,
        record.value,
        tuple(record.headers or ()),
        received,
    )


@dataclass(slots=True)
class OutRecord:
    topic: str
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes]] = field(default_factory=list)
    partition: int | None = None


class Undecodable(ValueError):
    pass


def decode_json(value: bytes | None) -> Any:
    """The JSON value of a record, or Undecodable with a specific reason."""
    if value is None:
        raise Undecodable("the record has no value (null)")
    try:
        return jsonio.loads(value)
    except jsonio.DuplicateKey as exc:
        raise Undecodable(f"the record value is not read: {exc}") from None
    except jsonio.JSONDecodeError as exc:
        try:
            value.decode("utf-8")
        except UnicodeDecodeError:
            raise Undecodable("the record value is not UTF-8 text") from None
        raise Undecodable(f"the record value is not JSON: {exc}") from None
    except jsonio.TooDeep as exc:
        raise Undecodable(f"the record value cannot be read exactly: {exc}") from None


NOT_DECODED: Any = object()  # `original_input`'s `decoded` when the value was not read


def original_input(
    value: bytes | None, max_bytes: int, decoded: Any = NOT_DECODED
) -> dict[str, Any]:
    """How a rejection carries the request it rejects, whatever its bytes were.

    `decoded` is the value's JSON when the caller already read it (it is not
    read again). A request larger than `max_bytes` is not copied (`inputOmitted`
    says why); the rejection's `source` still points at the original record.
    """
    if value is None or len(value) > max_bytes:
        return raw_input(value, max_bytes)
    if decoded is NOT_DECODED:
        try:
            jsonio.loads(value)
        except (jsonio.JSONDecodeError, jsonio.TooDeep):
            return raw_input(value, max_bytes)
    # read as JSON (at most jsonio.MAX_DEPTH levels): carried as the very bytes received,
    # so every number stays as sent and the record stays within the depth the gateway reads
    return {"input": jsonio.verbatim(value)}


def raw_input(value: bytes | None, max_bytes: int) -> dict[str, Any]:
    """The request as the bytes received, never parsed: for a rejection that must not fail."""
    if value is None:
        return {"input": None}
    if len(value) > max_bytes:
        return {
            "input": None,
            "inputOmitted": f"{len(value)} bytes, over {max_bytes}; read it at `source`",
        }
    try:
        return {"input": None, "inputText": value.decode("utf-8")}
    except UnicodeDecodeError:
        return {"input": None, "inputBase64": base64.b64encode(value).decode()}


_TYPE_PREFIX = b'{"type":"'


def peek_type(value: bytes | None) -> str | None:
    """The event type when the value opens with it (the common layout), without parsing."""
    if value is None or not value.startswith(_TYPE_PREFIX):
        return None
    end = value.find(b'"', len(_TYPE_PREFIX))
    if end < 0 or end - len(_TYPE_PREFIX) > 64:
        return None
    try:
        return value[len(_TYPE_PREFIX) : end].decode("ascii")
    except UnicodeDecodeError:
        return None


_STREAM_TYPES = {t.encode(): t for t in KNOWN_TYPES if classify(t) is EventKind.STREAM}
_SECOND_TYPE_FROM = len(b'{"type')  # past the opening member's name


def stream_type(value: bytes | None) -> str | None:
    """The streaming event type of a record read without parsing it, or None: parse it.

    Only a record opening with `{"type":"<a streaming type>"` whose text holds
    no other `"type"` qualifies. A record naming `type` twice (or holding the
    text `"type"` anywhere else) is left to the full decode, which rejects
    duplicate member names: both paths read every record alike (an event the
    fast path counts can only be a streaming event or unreadable, never one
    that changes a thread's state).
    """
    if value is None or not value.startswith(_TYPE_PREFIX):
        return None
    name = _STREAM_TYPES.get(value[len(_TYPE_PREFIX) : value.find(b'"', len(_TYPE_PREFIX), 80)])
    if name is None or value.find(b'"type"', _SECOND_TYPE_FROM) >= 0:
        return None
    return name


def too_large(decision: Decision, size: int) -> Decision:
    """The rejection (`input_too_large`) of a forward whose bytes would be `size`, over
    MAX_RECORD_BYTES; the judge's warnings are kept."""
    reason = Finding(
        str(Reason.INPUT_TOO_LARGE),
        f"the input to forward is {size:,} bytes, over the {MAX_RECORD_BYTES:,} a record the "
        "gateway writes may have",
    )
    return Decision(
        Verdict.REJECT,
        reasons=(reason,),
        warnings=decision.warnings,
        thread_id=decision.thread_id,
        run_id=decision.run_id,
        identity=decision.identity,  # who sent it: the audit trail records it
    )


def forward_bytes(decision: Decision, received: bytes) -> tuple[Decision, bytes | None]:
    """What a judged request becomes on the way out, for the service and `check` alike.

    A forward carries the bytes received less the members the judge removed
    (`jsonio.forwarded`); one that would be over MAX_RECORD_BYTES is rejected
    `input_too_large` instead (bytes None). Any other decision passes unchanged.
    """
    if decision.verdict is not Verdict.FORWARD:
        return decision, None
    forward = jsonio.forwarded(received, list(decision.removed), decision.input)
    if len(forward) > MAX_RECORD_BYTES:
        return too_large(decision, len(forward)), None
    return decision, forward


dumps = jsonio.dumps
