"""One co-partitioned pair: partition p of an agent's events and requests topics.

The pair merges its two buffered inputs in timestamp order, feeds them to the
core, and collects what must happen (output records, metric updates, state
changes) for the runner to commit in one transaction. Nothing here talks to
Kafka: the runner hands in records and fences and takes out records.
"""

from __future__ import annotations

import functools
import logging
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from gateway.codec import changelog
from gateway.codec.jsonio import forwarded
from gateway.codec.records import (
    HEADER_CORRELATION_ID,
    HEADER_REPLY_TO,
    NOT_DECODED,
    InRecord,
    OutRecord,
    Undecodable,
    correlation,
    decode_json,
    dumps,
    from_consumer,
    original_input,
    peek_type,
    raw_input,
    source_of,
    stream_type,
)
from gateway.core import (
    Change,
    Decision,
    Policy,
    Reason,
    Rule,
    RunStatus,
    ThreadState,
    Verdict,
    Warn,
    apply_event,
    judge,
)
from gateway.core.findings import Finding
from gateway.core.sweep import expire_due
from gateway.kafka.topics import LEGAL_TOPIC, AgentTopics
from gateway.observe.metrics import Metrics, event_type_label, outcome_label, reason_label
from gateway.observe.warnings import WarningLimiter
from gateway.state.retention import Retention
from gateway.state.store import ThreadStore

log = logging.getLogger("gateway.pair")


# A rejection carries the original request up to this size; a larger one is
# referenced by `source` instead, so the record always fits the topic's limit.
MAX_CARRIED_INPUT = 512 * 1024
# Every record the gateway writes stays under the producer's and the broker's default
# limit (1 MiB): a record Kafka refuses would abort the round again and again.
MAX_RECORD_BYTES = 1_000_000
# What a record carries of the findings: the first few, each string bounded.
MAX_CARRIED_FINDINGS = 50
MAX_FINDING_TEXT = 1_000
# A record key longer than this is no usable threadId (and could not be written back).
MAX_KEY_BYTES = 8 * 1024


@dataclass(frozen=True, slots=True)
class Fence:
    """Events up to `events_end` were in the log when requests up to `covers` had arrived."""

    covers: int  # highest request offset the fence covers
    events_end: int  # the events partition's end offset, looked up after those requests


@dataclass(frozen=True, slots=True)
class PairContext:
    settings_strict: bool
    rejections_topic: str
    warnings_topic: str
    merge_max_wait_s: float
    retention: Retention


def iso(ms: int) -> str:
    try:
        return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")
    except (ValueError, OverflowError, OSError):
        return f"{ms} ms since the epoch"  # a record timestamp outside years 1-9999


def _short(text: str) -> str:
    if len(text) <= MAX_FINDING_TEXT:
        return text
    return f"{text[:MAX_FINDING_TEXT]}... ({len(text):,} characters)"


def carried(finding: Finding) -> dict[str, Any]:
    """A finding as a record carries it: long strings (a huge unknown key's path) cut."""
    return {k: _short(v) if isinstance(v, str) else v for k, v in finding.to_json().items()}


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


def _output_key(record: Any, thread_id: str | None) -> bytes | None:
    if thread_id is not None:
        return thread_id.encode()
    key = record.key
    return key if key is not None and len(key) <= MAX_KEY_BYTES else None


class PartitionPair:
    def __init__(
        self,
        topics: AgentTopics,
        partition: int,
        context: PairContext,
        metrics: Metrics,
        limiter: WarningLimiter,
        topic_exists: Callable[[str], bool],
    ) -> None:
        self.topics = topics
        self.agent = topics.agent
        self.partition = partition
        self.ctx = context
        self.policy = Policy(strict=context.settings_strict)
        self.metrics = metrics
        self.limiter = limiter
        self.topic_exists = topic_exists
        self.store = ThreadStore()
        self.events: deque[Any] = deque()  # ConsumerRecord or InRecord: same attributes
        self._active: set[bytes] = set()  # keys of threads whose run is active
        self._active_committed: set[bytes] = set()  # the same, as last committed
        self._sweep_ids: list[str] | None = None  # the sweep pass in progress
        self._sweep_at = 0
        self.requests: deque[InRecord] = deque()
        self.fence: Fence | None = None
        self.waiting_since: float | None = None
        # pending until the round's transaction commits
        self.out: list[OutRecord] = []
        self._admitted: list[Any] = []  # the limiter's changes this round, for an abort
        self.next_offsets: dict[str, int] = {}  # "events"/"requests" -> next offset
        self._deferred: list[Callable[[], None]] = []
        self._event_counts: Counter[str] = Counter()
        self._decided: list[float] = []
        self._open_delta = 0
        self._thread_delta = 0
        # the changelog value of each state put this round, encoded inside the record's
        # defect boundary (a state that cannot be encoded fails its record, not the round)
        self._encoded: dict[str, tuple[ThreadState, bytes]] = {}
        self.dirty_since: float | None = None
        # committed facts
        self.open_interrupts = 0
        self.thread_count = 0

    # --- intake ------------------------------------------------------------------------

    def take(self, side: str, records: list[Any], received: float = 0.0) -> None:
        """Buffer consumed records (aiokafka ConsumerRecords or InRecords) of one side."""
        if side == "events":
            self.events.extend(records)
        else:
            self.requests.extend(
                r if isinstance(r, InRecord) else from_consumer(r, received) for r in records
            )

    def load_store(self, store: ThreadStore, active: set[str], open_interrupts: int) -> None:
        """Take a restored store, with its threads whose run is active and its open count."""
        self.store = store
        self.thread_count = len(store)
        self.open_interrupts = open_interrupts
        self._active_committed = {thread_id.encode() for thread_id in active}
        self._active = set(self._active_committed)

    def needs_fence(self) -> bool:
        if not self.requests:
            return False
        return self.fence is None or self.requests[0].offset > self.fence.covers

    def set_fence(self, events_end: int) -> None:
        if self.requests:
            self.fence = Fence(self.requests[-1].offset, events_end)

    def has_work(self) -> bool:
        return bool(self.events or self.requests)

    @property
    def decided_pending(self) -> bool:
        """Requests were decided since the last commit."""
        return bool(self._decided)

    def has_pending(self) -> bool:
        return bool(self.next_offsets or self.out or self.store.changes())

    # --- the merge -------------------------------------------------------------------------

    def process(self, events_position: int | None, mono_now: float, wall_ms: int) -> None:
        """Consume buffered records in timestamp order, as far as the fence allows."""
        events, requests = self.events, self.requests
        if not requests and events:
            self._apply_all(events)
        while events or requests:
            if requests and (not events or requests[0].timestamp < events[0].timestamp):
                head = requests[0]
                if not events and not self._fenced(head, events_position):
                    if self.waiting_since is None:
                        self.waiting_since = mono_now
                    if mono_now - self.waiting_since < self.ctx.merge_max_wait_s:
                        break  # the events side lags: wait for it, bounded
                    log.warning(
                        "judging a request without its events side caught up",
                        extra={
                            "agent": self.agent,
                            "partition": self.partition,
                            "waited_s": round(mono_now - self.waiting_since, 3),
                        },
                    )
                    self._defer(self.metrics.merge_wait_expired.labels(self.agent).inc)
                self.waiting_since = None
                requests.popleft()
                self._judge(head, wall_ms)
            else:
                self._apply(events.popleft())

    def _fenced(self, head: InRecord, events_position: int | None) -> bool:
        fence = self.fence
        if fence is None or head.offset > fence.covers or events_position is None:
            return False
        return events_position >= fence.events_end

    # --- events ---------------------------------------------------------------------------

    def _apply_all(self, events: deque[Any]) -> None:
        """Apply every buffered event: deltas of active runs are only counted."""
        counts = self._event_counts
        active = self._active
        for record in events:
            if record.key in active:
                name = stream_type(record.value)
                if name is not None:
                    counts[name] += 1
                    continue
            self._apply(record)
        self.next_offsets["events"] = events[-1].offset + 1
        events.clear()

    def _apply(self, record: Any) -> None:
        self.next_offsets["events"] = record.offset + 1
        thread_id = _thread_of(record)
        peeked = peek_type(record.value)
        if thread_id is None:
            self._event_counts[event_type_label(peeked)] += 1
            self._violation(
                record,
                None,
                None,
                Rule.MISSING_KEY,
                f"event record has {_key_problem(record)}; the key must be the threadId. Dropped",
            )
            return
        state = self.store.get(thread_id)
        if state is not None and state.status is RunStatus.ACTIVE:
            name = stream_type(record.value)
            if name is not None:
                self._event_counts[name] += 1  # the hot path: a delta inside an active run
                return
        exc = self._guarded(
            lambda: self._apply_decoded(record, thread_id, state),
            "internal error applying an event; the thread's state is left as it was",
            record,
            thread_id,
        )
        if exc is not None:
            self._warn(
                Finding(
                    str(Warn.INTERNAL_ERROR),
                    f"the gateway failed to apply this event ({type(exc).__name__}: {exc}); "
                    "the thread's state is unchanged",
                ),
                record,
                thread_id,
                state.run_id if state is not None else None,
            )

    def _guarded(
        self, work: Callable[[], None], message: str, record: Any, thread_id: str | None
    ) -> Exception | None:
        """Run one record's work; on a defect, take back what it half did and log it.

        A defect must not stop the partition: the caller turns the returned
        exception into that record's rejection or warning.
        """
        mark = self._mark()
        try:
            work()
        except Exception as exc:
            self._undo(mark)
            log.exception(
                message,
                extra={"agent": self.agent, "threadId": thread_id, "source": record.source()},
            )
            return exc
        return None

    def _apply_decoded(self, record: Any, thread_id: str, state: ThreadState | None) -> None:
        try:
            event = decode_json(record.value)
        except Undecodable as exc:
            self._event_counts["unknown"] += 1
            self._violation(record, thread_id, None, Rule.MALFORMED_EVENT, f"{exc}. Dropped")
            return
        event_type = event.get("type") if isinstance(event, dict) else None
        self._event_counts[event_type_label(event_type)] += 1
        outcome = apply_event(state, thread_id, event, record.timestamp)
        new = outcome.state
        run_id = new.run_id if new is not None else None
        for warning in outcome.warnings:
            self._warn(warning, record, thread_id, run_id)
        if new is not None and outcome.change is not Change.NONE:
            self._count_change(outcome.change, new)
        if new is not None and new is not state:
            self._put(state, new)  # last: nothing above is left half done

    def _count_change(self, change: Change, state: ThreadState) -> None:
        m, agent = self.metrics, self.agent
        if change is Change.CLOSED:
            self._defer(m.runs_closed.labels(agent, outcome_label(state.outcome)).inc)
            for interrupt in state.interrupts:
                self._defer(m.interrupts_raised.labels(agent, reason_label(interrupt.reason)).inc)
        elif change is Change.FAILED:
            self._defer(m.runs_closed.labels(agent, "failed").inc)

    # --- requests ---------------------------------------------------------------------------

    def _judge(self, record: InRecord, wall_ms: int) -> None:
        self.next_offsets["requests"] = record.offset + 1
        now_ms = record.timestamp if record.log_append_time else wall_ms
        thread_id = _thread_of(record)
        exc = self._guarded(
            lambda: self._judge_one(record, thread_id, now_ms),
            "internal error judging a request; rejected as internal_error",
            record,
            thread_id,
        )
        if exc is not None:
            self._internal_error(record, thread_id, now_ms, exc)

    def _judge_one(self, record: InRecord, thread_id: str | None, now_ms: int) -> None:
        decision: Decision
        new: ThreadState | None = None
        state: ThreadState | None = None
        raw: Any = NOT_DECODED
        if thread_id is None:
            decision = Decision(
                Verdict.REJECT,
                reasons=(
                    Finding(
                        str(Reason.THREAD_MISMATCH),
                        f"the request record has {_key_problem(record)}; the key must be the "
                        "threadId",
                    ),
                ),
            )
        else:
            try:
                raw = decode_json(record.value)
            except Undecodable as exc:
                decision = Decision(
                    Verdict.REJECT,
                    reasons=(Finding(str(Reason.MALFORMED_INPUT), str(exc), path=""),),
                    thread_id=thread_id,
                )
            else:
                state = self.store.get(thread_id)
                decision, new = judge(state, raw, now_ms, self.policy, thread_id)
        forward: bytes | None = None
        if decision.verdict is Verdict.FORWARD:
            # the bytes received, less what was stripped: every value exactly as sent
            forward = forwarded(record.value or b"", list(decision.removed), decision.input)
            if len(forward) > MAX_RECORD_BYTES:
                decision = _too_large(decision, len(forward))
                forward, new = None, None  # not forwarded: nothing to remember
        self._decided.append(record.received)
        self._effects(record, decision, thread_id, now_ms, forward, raw)
        if new is not None and new is not state:
            self._put(state, new)  # last: nothing above is left half done

    def _mark(self) -> tuple[int, int, int, int]:
        return len(self.out), len(self._deferred), len(self._decided), len(self._admitted)

    def _undo(self, mark: tuple[int, int, int, int]) -> None:
        """Forget what a record that failed half way added to the round."""
        out, deferred, decided, admitted = mark
        del self.out[out:]
        del self._deferred[deferred:]
        del self._decided[decided:]
        self.limiter.undo(self._admitted[admitted:])
        del self._admitted[admitted:]

    def _internal_error(
        self, record: InRecord, thread_id: str | None, now_ms: int, exc: Exception
    ) -> None:
        """The rejection of a request the gateway failed on: plain values only, the input
        carried as the bytes received."""
        m, agent = self.metrics, self.agent
        code = str(Reason.INTERNAL_ERROR)
        correlation_id = record.header_bytes(HEADER_CORRELATION_ID)
        headers = [(HEADER_CORRELATION_ID, correlation_id)] if correlation_id is not None else []
        key = _output_key(record, thread_id)
        as_received = raw_input(record.value, MAX_CARRIED_INPUT)
        reply = {
            "verdict": str(Verdict.REJECT),
            "agent": agent,
            "threadId": thread_id,
            "runId": None,
            **correlation(correlation_id),
            "reasons": [
                carried(
                    Finding(
                        code,
                        f"the gateway failed to judge this request ({type(exc).__name__}: "
                        f"{exc}); it is rejected, not forwarded. Please report it",
                    )
                )
            ],
            "warnings": [],
            **as_received,
            "at": iso(now_ms),
            "source": record.source(),
        }
        body = fitted(reply, record.value)
        self.out.append(OutRecord(self.ctx.rejections_topic, key, body, headers))
        reply_to = record.header(HEADER_REPLY_TO)
        if reply_to and LEGAL_TOPIC.match(reply_to) and self.topic_exists(reply_to):
            self.out.append(OutRecord(reply_to, key, body, headers))
        self._decided.append(record.received)
        self._defer(m.requests.labels(agent, str(Verdict.REJECT)).inc)
        self._defer(m.rejections.labels(agent, code).inc)

    def _effects(
        self,
        record: InRecord,
        decision: Decision,
        thread_id: str | None,
        now_ms: int,
        forward: bytes | None,
        raw: Any,
    ) -> None:
        """A decision's outputs. `raw` is the request's JSON (NOT_DECODED if unread)."""
        m, agent = self.metrics, self.agent
        self._defer(m.requests.labels(agent, str(decision.verdict)).inc)
        correlation_id = record.header_bytes(HEADER_CORRELATION_ID)
        headers = [(HEADER_CORRELATION_ID, correlation_id)] if correlation_id is not None else []
        key = _output_key(record, thread_id)
        envelope: dict[str, Any] = {
            "verdict": str(decision.verdict),
            "agent": agent,
            "threadId": thread_id,
            "runId": decision.run_id,
            **correlation(correlation_id),
        }
        for warning in decision.warnings:
            self._warn(warning, record, thread_id, decision.run_id)
        reply: dict[str, Any]
        body: bytes | None = None  # the reply's JSON, once written
        if decision.verdict is Verdict.FORWARD:
            assert forward is not None
            self.out.append(OutRecord(self.topics.run_requests, key, forward, headers))
            for answer in decision.answers:
                if answer.raised_at_ms is not None:
                    seconds = max(0.0, (record.timestamp - answer.raised_at_ms) / 1000)
                    hist = m.interrupt_response.labels(
                        agent, reason_label(answer.reason), answer.status
                    )
                    self._defer(functools.partial(hist.observe, seconds))
            reply = {
                **envelope,
                **carried_list(decision.warnings, "warnings"),
                "at": iso(now_ms),
            }
        elif decision.verdict is Verdict.REJECT:
            reply = {
                **envelope,
                **carried_list(decision.reasons, "reasons"),
                **carried_list(decision.warnings, "warnings"),
                **original_input(record.value, MAX_CARRIED_INPUT, raw),
                "at": iso(now_ms),
                "source": record.source(),
            }
            body = fitted(reply, record.value)
            self.out.append(OutRecord(self.ctx.rejections_topic, key, body, headers))
            for reason in decision.reasons:
                self._defer(m.rejections.labels(agent, reason.code).inc)
                if reason.code == Reason.UNCOVERED_INTERRUPT:
                    self._defer(m.uncovered_interrupts.labels(agent).inc)
                elif reason.code == Reason.EXPIRED_INTERRUPT:
                    self._defer(m.expired_answers.labels(agent).inc)
                elif reason.code == Reason.UNRECOGNISED_ENTRY:
                    self._defer(m.unrecognised_entries.labels(agent).inc)
        else:
            reply = {**envelope, "at": iso(now_ms)}
        reply_to = record.header(HEADER_REPLY_TO)
        if reply_to:
            if LEGAL_TOPIC.match(reply_to) and self.topic_exists(reply_to):
                if body is None:
                    body = fitted(reply, record.value)
                self.out.append(OutRecord(reply_to, key, body, headers))
            else:
                self._warn(
                    Finding(
                        str(Warn.REPLY_TOPIC_UNKNOWN),
                        f"reply topic {_short(reply_to)!r} does not exist, is not a legal "
                        "topic name, or is one of the gateway's own topics; no reply sent",
                    ),
                    record,
                    thread_id,
                    decision.run_id,
                )

    # --- sweeping -------------------------------------------------------------------------

    @property
    def sweeping(self) -> bool:
        return self._sweep_ids is not None

    def sweep(self, now_ms: int, limit: int | None = None, max_changes: int | None = None) -> bool:
        """Announce interrupts that expired unanswered; forget threads past retention.

        A pass goes over the threads held when it began, looking at up to `limit`
        threads and changing up to `max_changes` of them per call (None: no bound),
        so neither a large store nor a burst of expiries stalls a round. True when
        a pass ends.
        """
        if self._sweep_ids is None:
            self._sweep_ids = self.store.ids()
            self._sweep_at = 0
        ids = self._sweep_ids
        stop = len(ids) if limit is None else min(len(ids), self._sweep_at + limit)
        changes = 0
        retention = self.ctx.retention
        at = self._sweep_at
        while at < stop and (max_changes is None or changes < max_changes):
            thread_id = ids[at]
            at += 1
            state = self.store.get(thread_id)
            if state is None:
                continue
            if retention.expired(state, now_ms):
                self._delete(state)
                changes += 1
                continue
            new, due = expire_due(state, now_ms)
            if not due:
                continue
            changes += 1
            try:
                self._put(state, new)
            except Exception:
                log.exception(
                    "internal error storing a thread's expired interrupts; state left as it was",
                    extra={"agent": self.agent, "threadId": thread_id},
                )
                continue
            for interrupt in due:
                self._defer(self.metrics.interrupts_expired.labels(self.agent).inc)
                self._warn(
                    Finding(
                        str(Warn.INTERRUPT_EXPIRED),
                        f"interrupt {interrupt.id!r} ({interrupt.reason}) passed its "
                        f"expiresAt {interrupt.expires_at} unanswered; it can now only be "
                        "abandoned",
                        interrupt_id=interrupt.id,
                    ),
                    None,
                    state.thread_id,
                    state.run_id,
                    now_ms=now_ms,
                )
        self._sweep_at = at
        if at >= len(ids):
            self._sweep_ids = None
        return self._sweep_ids is None

    # --- warnings -------------------------------------------------------------------------

    def _violation(
        self, record: Any, thread_id: str | None, run_id: str | None, rule: Rule, detail: str
    ) -> None:
        self._warn(
            Finding(str(Warn.PROTOCOL_VIOLATION), detail, rule=str(rule)), record, thread_id, run_id
        )

    def _warn(
        self,
        warning: Finding,
        record: Any,
        thread_id: str | None,
        run_id: str | None,
        now_ms: int | None = None,
    ) -> None:
        m, agent = self.metrics, self.agent
        at = now_ms if now_ms is not None else (record.timestamp if record else 0)
        self._defer(m.warnings.labels(agent, warning.code).inc)
        if warning.code == Warn.PROTOCOL_VIOLATION and warning.rule:
            self._defer(m.protocol_violations.labels(agent, warning.rule).inc)
        elif warning.code == Warn.UNRECOGNISED_ENTRY:
            self._defer(m.unrecognised_entries.labels(agent).inc)
        admitted, suppressed = self.limiter.admit(
            (agent, thread_id or "", warning.code, warning.rule or ""), at, self._admitted
        )
        if not admitted:
            self._defer(m.warnings_suppressed.labels(agent, warning.code).inc)
            return
        body: dict[str, Any] = {
            **carried(warning),
            "agent": agent,
            "threadId": thread_id,
            "runId": run_id,
            "at": iso(at),
        }
        if record is not None:
            body["source"] = source_of(record)
        if suppressed:
            body["suppressed"] = suppressed
        key = thread_id.encode() if thread_id is not None else None
        self.out.append(OutRecord(self.ctx.warnings_topic, key, dumps(body)))
        self._deferred.append(functools.partial(log.info, "warning", extra={"warning": body}))

    # --- state and the round's bookkeeping ---------------------------------------------------

    def _put(self, old: ThreadState | None, new: ThreadState) -> None:
        # First: a state that cannot be encoded raises here, before anything changed.
        self._encoded[new.thread_id] = (new, changelog.encode(new))
        self._open_delta += len(new.interrupts) - (len(old.interrupts) if old else 0)
        if old is None:
            self._thread_delta += 1
        if new.status is RunStatus.ACTIVE:
            self._active.add(new.thread_id.encode())
        elif old is not None and old.status is RunStatus.ACTIVE:
            self._active.discard(new.thread_id.encode())
        self.store.put(new)

    def _delete(self, old: ThreadState) -> None:
        self._open_delta -= len(old.interrupts)
        self._thread_delta -= 1
        self._active.discard(old.thread_id.encode())
        self._encoded.pop(old.thread_id, None)
        self.store.delete(old.thread_id)

    def _defer(self, update: Callable[[], None]) -> None:
        self._deferred.append(update)

    def changelog_records(self) -> list[OutRecord]:
        out = []
        for thread_id, state in self.store.changes().items():
            if state is None:
                out.append(
                    OutRecord(
                        self.topics.changelog, thread_id.encode(), None, partition=self.partition
                    )
                )
                continue
            try:
                record = self._changelog_record(thread_id, state)
            except Exception:
                # `_put` encoded this state already; a defect here is a backstop's matter:
                # the thread is kept in memory only, the round still commits.
                log.exception(
                    "internal error encoding a thread state; kept in memory only",
                    extra={"agent": self.agent, "threadId": thread_id},
                )
                continue
            if record is not None:
                out.append(record)
        return out

    def _changelog_record(self, thread_id: str, state: ThreadState) -> OutRecord | None:
        cached = self._encoded.get(thread_id)
        value: bytes | None
        if cached is not None and cached[0] is state:
            value = cached[1]
        else:
            value = changelog.encode(state)
        if len(value) > MAX_RECORD_BYTES:
            value = self._slimmed(state, len(value))
            if value is None:
                return None
        return OutRecord(
            self.topics.changelog,
            thread_id.encode(),
            value,
            changelog.hints(state),
            partition=self.partition,
        )

    def _slimmed(self, state: ThreadState, size: int) -> bytes | None:
        """A state too large for one record: kept without what makes it large.

        The interrupts' `responseSchema` and `metadata` go first (payloads are then
        not checked), then their messages. The state in memory becomes the one
        written, so a restart judges as this instance does. A state still too large
        is kept in memory only: a record Kafka refuses would abort every round.
        """
        lighter: list[dict[str, Any]] = [
            {"response_schema": None, "metadata": None},
            {"response_schema": None, "metadata": None, "message": None},
        ]
        for fields in lighter:
            slim = replace(state, interrupts=tuple(replace(i, **fields) for i in state.interrupts))
            value = changelog.encode(slim)
            if len(value) <= MAX_RECORD_BYTES:
                self.store.put(slim)  # replaces its pending value: the dict keeps its size
                log.error(
                    "thread state too large for a changelog record; written without "
                    f"the interrupts' {', '.join(fields)}",
                    extra={"agent": self.agent, "threadId": state.thread_id, "bytes": size},
                )
                return value
        log.error(
            "thread state too large for a changelog record even without its interrupts' "
            "schemas, metadata and messages; kept in memory only",
            extra={"agent": self.agent, "threadId": state.thread_id, "bytes": size},
        )
        return None

    def committed(self, mono_now: float) -> None:
        """The round's transaction committed: make its effects visible."""
        for thread_id, state in self.store.changes().items():
            if state is not None and state.status is RunStatus.ACTIVE:
                self._active_committed.add(thread_id.encode())
            else:
                self._active_committed.discard(thread_id.encode())
        self.store.commit()
        self.open_interrupts += self._open_delta
        self.thread_count += self._thread_delta
        for update in self._deferred:
            update()
        for event_type, count in self._event_counts.items():
            self.metrics.events.labels(self.agent, event_type).inc(count)
        for received in self._decided:
            self.metrics.decision_seconds.observe(max(0.0, mono_now - received))
        self._reset_round()

    def aborted(self) -> None:
        """The round's transaction aborted: forget everything it decided."""
        self.limiter.undo(self._admitted)
        self.store.rollback()
        self._active = set(self._active_committed)
        self.events.clear()
        self.requests.clear()
        self.fence = None
        self.waiting_since = None
        self._reset_round()

    def _reset_round(self) -> None:
        self._admitted = []
        self.out = []
        self.next_offsets = {}
        self._deferred = []
        self._event_counts = Counter()
        self._decided = []
        self._open_delta = 0
        self._thread_delta = 0
        self._encoded = {}
        self.dirty_since = None


def _too_large(decision: Decision, size: int) -> Decision:
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
    )


def _key_problem(record: Any) -> str:
    if record.key is not None and len(record.key) > MAX_KEY_BYTES:
        return f"a key of {len(record.key):,} bytes, over the {MAX_KEY_BYTES:,} a threadId may have"
    return "no UTF-8 key"


def _thread_of(record: Any) -> str | None:
    if not record.key or len(record.key) > MAX_KEY_BYTES:
        return None
    try:
        return record.key.decode("utf-8")
    except UnicodeDecodeError:
        return None
