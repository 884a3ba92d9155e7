"""One co-partitioned pair: partition p of an agent's (or a group's) events and requests.

The pair merges its two buffered inputs in timestamp order, feeds them to the
core, and fills its open round (`gateway.kafka.pairs.round`) with what must happen.
Two layers of pending work sit over the committed store: the open round, being
filled, and the sealed round, whose transaction is being committed. The pair
reads thread states through both. Nothing here talks to Kafka: the runner
hands in records and fences, the checkpoint takes out sealed rounds.

A pair's `layout` (`gateway.kafka.pairs.agents`) says whose each record is: on an agent's
own topics the topic's agent, on a group's the agent its `agui-agent` header names.
Threads are held under the layout's key (the threadId, or (agent, threadId) in a
group); a record whose agent is not usable is rejected (a request) or dropped with a
warning (an event), each with its code.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from gateway.codec.changelog import SweepView
from gateway.codec.records import (
    NOT_DECODED,
    InRecord,
    Undecodable,
    decode_json,
    from_consumer,
    peek_type,
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
    Warn,
    apply_event,
)
from gateway.core.values.approvers import ApproverRule
from gateway.core.values.findings import Finding
from gateway.kafka.pairs import shaping
from gateway.kafka.pairs.agents import Layout, OwnTopics, Unusable
from gateway.kafka.pairs.decide import decide, lagging, rejected
from gateway.kafka.pairs.effects import Effects
from gateway.kafka.pairs.merge import Fence, Merge, Step
from gateway.kafka.pairs.round import InboxTarget, Round
from gateway.kafka.pairs.shaping import MAX_KEY_BYTES, MAX_RECORD_BYTES
from gateway.kafka.pairs.sweep import Sweep
from gateway.kafka.wire.attestation import Verifier, caller_of
from gateway.kafka.wire.topics import AgentTopics
from gateway.observe.metrics import Metrics, event_type_label, outcome_label, reason_label
from gateway.observe.warnings import WarningLimiter
from gateway.state.retention import Retention
from gateway.state.store import ThreadStore

log = logging.getLogger("gateway.pair")

__all__ = ["MAX_KEY_BYTES", "MAX_RECORD_BYTES", "Fence", "PairContext", "PartitionPair"]


@dataclass(frozen=True, slots=True)
class PairContext:
    """What every pair of an instance shares: its settings, metrics, warning limiter and
    the check of a reply topic (the pair's `Effects` read them from here too)."""

    settings_strict: bool
    merge_max_wait_s: float
    retention: Retention
    metrics: Metrics
    limiter: WarningLimiter
    topic_exists: Callable[[str], bool]
    # the approver policy, and the identity headers' verifier (None: no key is trusted)
    approvers: tuple[ApproverRule, ...] = ()
    verifier: Verifier | None = None
    interrupts_topic: str | None = None  # the inbox's compacted topic (None: not written)
    interrupts_runs: bool = True  # each thread's run record written there too


class PartitionPair:
    def __init__(
        self,
        topics: AgentTopics,
        partition: int,
        context: PairContext,
        layout: Layout | None = None,
    ) -> None:
        self.topics = topics
        self.agent = topics.agent  # the topics' owner: an agent, or a group
        self.layout: Layout = layout if layout is not None else OwnTopics(topics.agent)
        self.partition = partition
        self.ctx = context
        self.policy = Policy(strict=context.settings_strict, approvers=context.approvers)
        self.metrics = context.metrics
        self.store = ThreadStore(self.layout.thread_of)  # committed states
        self.merge = Merge(context.merge_max_wait_s)  # the two inputs, buffered
        self._active: set[bytes] = set()  # keys of threads whose run is active
        self._active_committed: set[bytes] = set()  # the same, as last committed
        self.sweeper = Sweep(context.retention)
        self.effects = Effects(topics, context, self.layout.group)
        self.inbox = (
            None
            if not context.interrupts_topic
            else InboxTarget(
                context.interrupts_topic,
                self.layout.split,
                self.layout.group,
                context.interrupts_runs,
            )
        )
        self.round = self._new_round()  # the open round, being filled
        self.sealed: Round | None = None  # the round whose transaction is being committed
        # committed facts
        self.open_interrupts = 0
        self.thread_count = 0

    def _new_round(self) -> Round:
        return Round(self.agent, self.topics.changelog, self.partition, self.inbox)

    # --- intake ------------------------------------------------------------------------

    def take(self, side: str, records: list[Any], received: float = 0.0) -> None:
        """Buffer consumed records of one side (aiokafka's, read as they are or not, or
        InRecords)."""
        topic = self.topics.events if side == "events" else self.topics.requests
        self.merge.take(side, records, received, (topic, self.partition))

    def load_store(self, store: ThreadStore, active: set[str], open_interrupts: int) -> None:
        """Take a restored store, with its threads whose run is active and its open count
        (keyed as the layout keys them)."""
        store.thread_of = self.layout.thread_of
        self.store = store
        self.thread_count = len(store)
        self.open_interrupts = open_interrupts
        self._active_committed = {thread_id.encode() for thread_id in active}
        self._active = set(self._active_committed)
        self.sweeper.reset()  # its next pass looks at every thread of this store

    def state(self, thread_id: str) -> ThreadState | None:
        """A thread's state as this pair sees it: open round, sealed round, then committed.

        `thread_id` is the layout's key: the threadId, or in a group the group's key."""
        for layer in (self.round, self.sealed):
            if layer is not None and thread_id in layer.changes:
                return layer.changes[thread_id]
        return self.store.get(thread_id)

    def pending(self, thread_id: str) -> bool:
        """Whether a round not yet committed holds a change of a thread."""
        return any(
            layer is not None and thread_id in layer.changes for layer in (self.round, self.sealed)
        )

    def sweep_view(self, thread_id: str) -> SweepView | None:
        """What a sweep needs of a committed thread held as bytes, without decoding it
        (`changelog.sweep_view`); None when a round layer holds a change of it, or the
        store holds it otherwise: read its `state`."""
        return None if self.pending(thread_id) else self.store.sweep_view(thread_id)

    def needs_fence(self) -> bool:
        return self.merge.needs_fence()

    def set_fence(self, events_end: int, covers: int | None = None) -> None:
        """The events partition's end offset, read after the requests up to offset
        `covers` had arrived (None: every request buffered now). A fence that already
        covers as far is kept (a look-up can land after a newer fence from the fetch)."""
        if covers is None:
            self.merge.set_fence(events_end)
            return
        current = self.merge.fence
        if current is None or current.covers < covers:
            self.merge.fence = Fence(covers, events_end)

    def has_work(self) -> bool:
        return self.merge.has_work()

    def has_pending(self) -> bool:
        """Something decided or consumed is not committed yet (in either layer)."""
        return not self.round.empty() or self.sealed is not None

    def process(self, events_position: int | None, mono_now: float, wall_ms: int) -> None:
        """Consume buffered records in timestamp order, as far as the fence allows."""
        merge = self.merge
        self.round.at_ms = max(self.round.at_ms, wall_ms)
        if not merge.requests and merge.events:
            self._apply_all(merge.events)
        while (step := merge.next(events_position, mono_now)) is not None:
            if step.kind is Step.EVENT:
                self._apply(step.record)
            elif step.kind is Step.REQUEST:
                self._judge(step.record, wall_ms)
            else:
                self._lagging(step.record, wall_ms, step.waited)
        if self.round.started is None and not self.round.empty():
            self.round.started = mono_now

    # --- events ---------------------------------------------------------------------------

    def _apply_all(self, events: deque[Any]) -> None:
        """Apply every buffered event: deltas of active runs are only counted."""
        counts = self.round.event_counts
        active = self._active
        active_key = self.layout.active_key
        for record in events:
            if active_key(record) in active:
                name = stream_type(record.value)
                if name is not None:
                    counts[name] += 1
                    continue
            self._apply(record)
        self.round.offsets["events"] = events[-1].offset + 1
        events.clear()

    def _apply(self, record: Any) -> None:
        self.round.offsets["events"] = record.offset + 1
        agent = self.layout.identify(record)
        thread_id = shaping.thread_of(record)
        key: str | None = None
        state = None
        if thread_id is not None and not isinstance(agent, Unusable):
            key = self.layout.key(agent, thread_id)
            state = self.state(key)
            if state is not None and state.status is RunStatus.ACTIVE:
                name = stream_type(record.value)
                if name is not None:
                    self.round.event_counts[name] += 1  # the hot path: a delta inside an active run
                    return
        # anything else may be written about: the record with its topic and partition
        record = from_consumer(record, 0.0, (self.topics.events, self.partition))
        if isinstance(agent, Unusable):
            self.round.event_counts[event_type_label(peek_type(record.value))] += 1
            self._warn(Finding(agent.code, f"{agent.detail}. Dropped"), record, thread_id, None)
            return
        if thread_id is None or key is None:  # (the key is there whenever the thread is)
            self.round.event_counts[event_type_label(peek_type(record.value))] += 1
            self._violation(
                record,
                None,
                None,
                Rule.MISSING_KEY,
                f"event record has {shaping.key_problem(record)}; the key must be the threadId. "
                "Dropped",
                agent,
            )
            return
        exc = self._guarded(
            lambda: self._apply_decoded(record, agent, key, thread_id, state),
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
                agent,
            )

    def _guarded(
        self, work: Callable[[], None], message: str, record: Any, thread_id: str | None
    ) -> Exception | None:
        """Run one record's work; on a defect, take back what it half did and log it.

        A defect must not stop the partition: the caller turns the returned
        exception into that record's rejection or warning.
        """
        mark = self.round.mark()
        try:
            work()
        except Exception as exc:
            self.ctx.limiter.undo(self.round.undo(mark))
            log.exception(
                message,
                extra={"agent": self.agent, "threadId": thread_id, "source": record.source()},
            )
            return exc
        return None

    def _apply_decoded(
        self, record: Any, agent: str, key: str, thread_id: str, state: ThreadState | None
    ) -> None:
        try:
            event = decode_json(record.value)
        except Undecodable as exc:
            self.round.event_counts["unknown"] += 1
            self._violation(record, thread_id, None, Rule.MALFORMED_EVENT, f"{exc}. Dropped", agent)
            return
        event_type = event.get("type") if isinstance(event, dict) else None
        self.round.event_counts[event_type_label(event_type)] += 1
        outcome = apply_event(state, thread_id, event, record.timestamp)
        new = outcome.state
        run_id = new.run_id if new is not None else None
        for warning in outcome.warnings:
            self._warn(warning, record, thread_id, run_id, agent)
        if new is not None and outcome.change is not Change.NONE:
            self._count_change(outcome.change, new)
        if new is not None and new is not state:
            self.put(state, new, key)  # last: nothing above is left half done

    def _count_change(self, change: Change, state: ThreadState) -> None:
        m, agent = self.metrics, self.agent
        if change is Change.CLOSED:
            self.defer(m.runs_closed.labels(agent, outcome_label(state.outcome)).inc)
            for interrupt in state.interrupts:
                self.defer(m.interrupts_raised.labels(agent, reason_label(interrupt.reason)).inc)
        elif change is Change.FAILED:
            self.defer(m.runs_closed.labels(agent, "failed").inc)

    # --- requests ---------------------------------------------------------------------------

    def _judge(self, record: InRecord, wall_ms: int) -> None:
        self.round.offsets["requests"] = record.offset + 1
        now_ms = record.timestamp if record.log_append_time else wall_ms
        thread_id = shaping.thread_of(record)
        agent = self.layout.identify(record)
        if isinstance(agent, Unusable):
            self._reject_unusable(record, agent, thread_id, now_ms, wall_ms)
            return
        exc = self._guarded(
            lambda: self._judge_one(record, agent, thread_id, now_ms, wall_ms),
            "internal error judging a request; rejected as internal_error",
            record,
            thread_id,
        )
        if exc is not None:
            self.effects.internal_error(self.round, record, thread_id, now_ms, exc, agent, wall_ms)

    def _reject_unusable(
        self, record: InRecord, why: Unusable, thread_id: str | None, now_ms: int, wall_ms: int
    ) -> None:
        """Reject a request whose agent is not usable: never judged, nothing remembered;
        the rejections topic and its reply topic get the verdict (naming no agent)."""
        decision = self._identified(rejected(Reason(why.code), why.detail, thread_id), record)
        own = self.layout.group is None  # on an agent's own topic: that agent's record
        self._reject_unjudged(
            record, decision, thread_id, self.agent if own else None, None, now_ms, wall_ms
        )

    def _reject_unjudged(
        self,
        record: InRecord,
        decision: Decision,
        thread_id: str | None,
        named: str | None,
        agent: str | None,
        now_ms: int,
        wall_ms: int,
    ) -> None:
        """Write a rejection decided without judging (no state read or changed): `named`
        is the agent its record names, `agent` the one an internal error is counted for."""

        def reject() -> None:
            self.round.decided.append(record.received)
            self.effects.decision(
                self.round, record, decision, thread_id, now_ms, None, NOT_DECODED, named,
                wall_ms=wall_ms,
            )  # fmt: skip

        exc = self._guarded(reject, "internal error rejecting a request", record, thread_id)
        if exc is not None:
            self.effects.internal_error(self.round, record, thread_id, now_ms, exc, agent, wall_ms)

    def _lagging(self, record: InRecord, wall_ms: int, waited: float) -> None:
        """Reject a request whose events side lagged past `merge_max_wait_ms` (retryable)."""
        self.round.offsets["requests"] = record.offset + 1
        now_ms = record.timestamp if record.log_append_time else wall_ms
        thread_id = shaping.thread_of(record)
        agent = self.layout.identify(record)
        if isinstance(agent, Unusable):  # never judged either way: its own code says why
            self._reject_unusable(record, agent, thread_id, now_ms, wall_ms)
            return
        log.warning(
            "events side lagging past merge_max_wait_ms; request rejected as events_lagging",
            extra={"agent": self.agent, "partition": self.partition, "waited_s": round(waited, 3)},
        )
        decision = self._identified(lagging(thread_id, waited), record)
        self._reject_unjudged(record, decision, thread_id, agent, agent, now_ms, wall_ms)
        self.defer(self.metrics.merge_wait_expired.labels(self.agent).inc)

    def _identified(self, decision: Decision, record: InRecord) -> Decision:
        """A decision made without judging, naming who sent the request when its identity
        headers verify (as a judged one does)."""
        identity = caller_of(record, self.ctx.verifier, "", None).identity
        return decision if identity is None else replace(decision, identity=identity)

    def _judge_one(
        self, record: InRecord, agent: str, thread_id: str | None, now_ms: int, wall_ms: int
    ) -> None:
        key = self.layout.key

        def state_of(thread: str) -> ThreadState | None:
            return self.state(key(agent, thread))

        caller = caller_of(record, self.ctx.verifier, agent, self.layout.group)
        result = (
            "verified"
            if caller.identity is not None
            else ("unverified" if caller.unverified is not None else "unattested")
        )
        self.defer(self.metrics.identities.labels(self.agent, result).inc)
        found = decide(record, thread_id, state_of, now_ms, self.policy, caller)
        self.round.decided.append(record.received)
        self.effects.decision(
            self.round,
            record,
            found.decision,
            thread_id,
            now_ms,
            found.forward,
            found.raw,
            agent,
            found.state,
            wall_ms,
        )
        if found.new is not None and found.new is not found.state:
            assert thread_id is not None  # a state is only ever found for a thread
            # last: nothing above is left half done
            self.put(found.state, found.new, key(agent, thread_id))
            if found.forward is not None:  # cannot fail: what the interrupts topic says
                self.round.answered(key(agent, thread_id), found.raw)

    # --- sweeping -------------------------------------------------------------------------

    @property
    def sweeping(self) -> bool:
        return self.sweeper.running

    def sweep(self, now_ms: int, limit: int | None = None, max_changes: int | None = None) -> bool:
        """Announce interrupts that expired unanswered; forget threads past retention.

        See `gateway.kafka.pairs.sweep.Sweep`. True when a pass ends.
        """
        self.round.at_ms = max(self.round.at_ms, now_ms)
        return self.sweeper.step(self, now_ms, limit, max_changes)

    # --- warnings -------------------------------------------------------------------------

    def _violation(
        self,
        record: Any,
        thread_id: str | None,
        run_id: str | None,
        rule: Rule,
        detail: str,
        agent: str | None,
    ) -> None:
        self.effects.violation(self.round, record, thread_id, run_id, rule, detail, agent)

    def _warn(
        self,
        warning: Finding,
        record: Any,
        thread_id: str | None,
        run_id: str | None,
        agent: str | None = None,
    ) -> None:
        """A warning a record brought; `agent` is the record's (None: not usable)."""
        self.effects.warn(self.round, warning, record, thread_id, run_id, agent)

    def warn(self, warning: Finding, thread_id: str, run_id: str | None, now_ms: int) -> None:
        """A warning about a thread that no record brought (the sweep's expiries);
        `thread_id` is the layout's key."""
        agent, thread = self.layout.split(thread_id)
        self.effects.warn(self.round, warning, None, thread, run_id, agent, now_ms=now_ms)

    # --- state and the round's bookkeeping ---------------------------------------------------

    def put(self, old: ThreadState | None, new: ThreadState, key: str | None = None) -> None:
        """Store a thread's new state in the open round, under the layout's `key` (by
        default its threadId: right on an agent's own topics only)."""
        key = new.thread_id if key is None else key
        self.round.put(old, new, key)  # first: raises, changing nothing, if not encodable
        if new.status is RunStatus.ACTIVE:
            self._active.add(key.encode())
        elif old is not None and old.status is RunStatus.ACTIVE:
            self._active.discard(key.encode())

    def delete(self, old: ThreadState, key: str | None = None) -> None:
        """Forget a thread in the open round (the sweep's retention)."""
        key = old.thread_id if key is None else key
        self.round.delete(old, key)
        self._active.discard(key.encode())

    def defer(self, update: Callable[[], None]) -> None:
        """A metric update to make once the open round commits."""
        self.round.deferred.append(update)

    def expired_counter(self) -> Callable[[], None]:
        return self.metrics.interrupts_expired.labels(self.agent).inc

    def committed_ids(self) -> list[str]:
        return self.store.ids()

    def committed_count(self) -> int:
        return len(self.store)

    def changed_ids(self) -> list[str]:
        return self.store.take_changed()

    def sweep_size(self) -> int:
        """About how many threads the next sweep pass looks at."""
        return self.sweeper.next_size(len(self.store), self.store.changed_count())

    def seal(self) -> Round:
        """Hand the open round over for committing; a new one opens over it."""
        assert self.sealed is None, "one round commits at a time"
        self.sealed, self.round = self.round, self._new_round()
        return self.sealed

    def committed_round(self, done: Round, mono_now: float) -> None:
        """The sealed round's transaction committed: make its effects visible."""
        assert done is self.sealed
        self.sealed = None
        for key, active in done.active_changes().items():
            if active:
                self._active_committed.add(key)
            else:
                self._active_committed.discard(key)
        store = self.store
        for thread_id, state in done.changes.items():
            if state is None:
                store.delete(thread_id)
            else:  # the bytes held are cut from the value the round encoded
                store.put(state, thread_id, done.value_of(thread_id, state))
        store.commit()
        self.open_interrupts += done.open_delta
        self.thread_count += done.thread_delta
        for update in done.deferred:
            update()
        for event_type, count in done.event_counts.items():
            self.metrics.events.labels(self.agent, event_type).inc(count)
        for received in done.decided:
            self.metrics.decision_seconds.observe(max(0.0, mono_now - received))

    def aborted(self) -> None:
        """A transaction aborted (or the pair is given up): forget both pending layers.

        Their records are read again from the last committed offsets.
        """
        for layer in (self.round, self.sealed):
            if layer is not None:
                self.ctx.limiter.undo(layer.admitted)
        self.round, self.sealed = self._new_round(), None
        self._active = set(self._active_committed)
        self.merge.clear()
