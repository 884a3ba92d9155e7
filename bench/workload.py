"""The benchmark's workload: AG-UI traffic shaped like real agents, as wire bytes.

Everything is deterministic for a seed and does no I/O. Events are JSON
objects with `type` first, the layout real producers use and the gateway
peeks at. Keys are thread ids; partitions follow the Kafka default
partitioner (murmur2), so a thread's events and requests meet on one
partition pair exactly as they would in production.

Three workloads:

- `EventStream`: an agent's events topic. Many concurrent runs interleaved on
  each partition; about 90% streaming deltas (TEXT_MESSAGE_CONTENT,
  TOOL_CALL_ARGS, REASONING_MESSAGE_CONTENT), lifecycle and step events, tool
  calls, subagents, and a configurable share of runs that end in interrupts
  (some parallel, some raised by subagents).
- `DecisionWorkload`: threads left interrupted (RUN_STARTED + an interrupting
  RUN_FINISHED) and a stream of run requests for them: valid resumes,
  duplicates, uncovered interrupts, unrecognised entries, expired interrupts,
  malformed inputs, payloads breaking their responseSchema, unknown threads.
- `thread_states`-style builders for the memory and restore scenarios
  (`idle_thread_events`, `interrupted_thread_events`).
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
from aiokafka.partitioner import murmur2

Event = dict[str, Any]

DELTA_TYPES = frozenset({"TEXT_MESSAGE_CONTENT", "TOOL_CALL_ARGS", "REASONING_MESSAGE_CONTENT"})

_WORDS = (
    "the gateway checks every resume against the open interrupts of its thread before "
    "the agent sees it so an answer that covers nothing or answers an expired question "
    "never reaches the model we will draft the email schedule the meeting and update the "
    "ticket once you approve the plan I found three matching invoices in the ledger and "
    "two of them are overdue would you like me to send a reminder to the customer"
).split()
_PUNCT = (".", ",", "?", "\n", ":")
_TOOLS = (
    ("send_email", '{"to": "%s@example.com", "subject": "Re: invoice %d", "body": "%s"}'),
    ("search_docs", '{"query": "%s", "limit": %d, "filters": {"lang": "%s"}}'),
    ("create_ticket", '{"title": "%s", "priority": %d, "assignee": "%s"}'),
    ("run_sql", '{"sql": "select * from invoices where customer = \'%s\' limit %d", "db": "%s"}'),
)
_SUBAGENTS = ("researcher", "planner", "billing-specialist", "code-reviewer")

APPROVAL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"approved": {"type": "boolean"}, "comment": {"type": "string"}},
    "required": ["approved"],
    "additionalProperties": False,
}
ANSWER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"answer": {"type": "string", "minLength": 1}},
    "required": ["answer"],
}
DECISION_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"decision": {"enum": ["approve", "reject"]}, "note": {"type": "string"}},
    "required": ["decision"],
}
TOOL_DEFINITIONS: list[dict[str, Any]] = [
    {
        "name": "send_email",
        "description": "Send an email on the user's behalf. Requires approval.",
        "parameters": {
            "type": "object",
            "properties": {
                "to": {"type": "string", "format": "email"},
                "subject": {"type": "string"},
                "body": {"type": "string"},
            },
            "required": ["to", "subject", "body"],
        },
    },
    {
        "name": "search_docs",
        "description": "Full-text search over the knowledge base.",
        "parameters": {
            "type": "object",
            "properties": {
                "query": {"type": "string"},
                "limit": {"type": "integer", "minimum": 1, "maximum": 50},
            },
            "required": ["query"],
        },
    },
    {
        "name": "create_ticket",
        "description": "Open a support ticket.",
        "parameters": {
            "type": "object",
            "properties": {
                "title": {"type": "string"},
                "priority": {"type": "integer", "enum": [1, 2, 3, 4]},
                "assignee": {"type": "string"},
            },
            "required": ["title"],
        },
    },
]


def iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def partition_for(key: bytes, partitions: int) -> int:
    """The partition the Kafka default partitioner picks for `key`."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions


def dumps(value: Any) -> bytes:
    return orjson.dumps(value)


class Ids:
    """Deterministic identifiers in the shapes real agents use."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def uuid(self) -> str:
        h = f"{self.rng.getrandbits(128):032x}"
        return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-a{h[17:20]}-{h[20:]}"

    def short(self, prefix: str, length: int = 24) -> str:
        return prefix + f"{self.rng.getrandbits(4 * length):0{length}x}"


# --- events ------------------------------------------------------------------------------


def _deltas(rng: random.Random, count: int) -> list[str]:
    words, punct = _WORDS, _PUNCT
    out = []
    for _ in range(count):
        r = rng.random()
        if r < 0.08:
            out.append(punct[int(r * 60) % len(punct)])
        else:
            out.append(" " + words[int(rng.random() * len(words))])
    return out


def _chunks(text: str, rng: random.Random) -> list[str]:
    out, i = [], 0
    while i < len(text):
        step = 3 + int(rng.random() * 6)
        out.append(text[i : i + step])
        i += step
    return out


def _tool_args(rng: random.Random, ids: Ids, name_index: int) -> tuple[str, str]:
    name, template = _TOOLS[name_index]
    word = _WORDS[int(rng.random() * len(_WORDS))]
    body = " ".join(
        _WORDS[int(rng.random() * len(_WORDS))] for _ in range(4 + int(rng.random() * 20))
    )
    if name == "send_email":
        return name, template % (word, int(rng.random() * 9000), body)
    if name == "search_docs":
        return name, template % (body, 5 + int(rng.random() * 20), "en")
    if name == "create_ticket":
        return name, template % (body, 1 + int(rng.random() * 4), word)
    return name, template % (word, 10 + int(rng.random() * 90), "ledger")


def text_message(
    rng: random.Random, message_id: str, deltas: int, subagent: str | None = None
) -> list[Event]:
    extra = {"subagentRunId": subagent} if subagent else {}
    out: list[Event] = [
        {"type": "TEXT_MESSAGE_START", "messageId": message_id, "role": "assistant", **extra}
    ]
    out += [
        {"type": "TEXT_MESSAGE_CONTENT", "messageId": message_id, "delta": d, **extra}
        for d in _deltas(rng, deltas)
    ]
    out.append({"type": "TEXT_MESSAGE_END", "messageId": message_id, **extra})
    return out


def reasoning(rng: random.Random, message_id: str, deltas: int) -> list[Event]:
    out: list[Event] = [
        {"type": "REASONING_START", "messageId": message_id},
        {"type": "REASONING_MESSAGE_START", "messageId": message_id, "role": "reasoning"},
    ]
    out += [
        {"type": "REASONING_MESSAGE_CONTENT", "messageId": message_id, "delta": d}
        for d in _deltas(rng, deltas)
    ]
    out += [
        {"type": "REASONING_MESSAGE_END", "messageId": message_id},
        {"type": "REASONING_END", "messageId": message_id},
    ]
    return out


def tool_call(
    rng: random.Random,
    ids: Ids,
    call_id: str,
    parent_message_id: str,
    *,
    result: bool,
    subagent: str | None = None,
) -> tuple[list[Event], str]:
    name, args = _tool_args(rng, ids, int(rng.random() * len(_TOOLS)))
    extra = {"subagentRunId": subagent} if subagent else {}
    out: list[Event] = [
        {
            "type": "TOOL_CALL_START",
            "toolCallId": call_id,
            "toolCallName": name,
            "parentMessageId": parent_message_id,
            **extra,
        }
    ]
    out += [
        {"type": "TOOL_CALL_ARGS", "toolCallId": call_id, "delta": c, **extra}
        for c in _chunks(args, rng)
    ]
    out.append({"type": "TOOL_CALL_END", "toolCallId": call_id, **extra})
    if result:
        out.append(
            {
                "type": "TOOL_CALL_RESULT",
                "messageId": ids.short("msg_"),
                "toolCallId": call_id,
                "content": f'{{"ok": true, "id": "{ids.short("", 12)}"}}',
                "role": "tool",
                **extra,
            }
        )
    return out, name


def interrupted_run(thread_id: str, run_id: str, interrupts: list[dict[str, Any]]) -> list[bytes]:
    """A run's events, started and finished with these interrupts open."""
    return closed_run(thread_id, run_id, {"type": "interrupt", "interrupts": interrupts})


def closed_run(thread_id: str, run_id: str, outcome: dict[str, Any]) -> list[bytes]:
    """A run's events, started and finished with `outcome`."""
    return [
        dumps({"type": "RUN_STARTED", "threadId": thread_id, "runId": run_id}),
        dumps({"type": "RUN_FINISHED", "threadId": thread_id, "runId": run_id, "outcome": outcome}),
    ]


def interrupt_for(
    rng: random.Random,
    ids: Ids,
    *,
    tool_call_id: str | None,
    subagent: str | None,
    expires_at: str | None,
    unique_schema_share: float,
) -> dict[str, Any]:
    """One interrupt, in the shapes real agents raise: approvals, questions, choices."""
    iid = ids.short("int_", 16)
    if tool_call_id is not None:
        item: dict[str, Any] = {
            "id": iid,
            "reason": "tool_call",
            "message": "Approve this tool call before it runs?",
            "toolCallId": tool_call_id,
            "responseSchema": APPROVAL_SCHEMA,
        }
    elif subagent is not None:
        item = {
            "id": iid,
            "reason": "approval_required",
            "message": "The billing specialist wants to issue a refund. Approve?",
            "responseSchema": DECISION_SCHEMA,
        }
    elif rng.random() < unique_schema_share:
        options = [ids.short("opt_", 8) for _ in range(3)]
        item = {
            "id": iid,
            "reason": "choice",
            "message": "Which of these accounts should I use?",
            "responseSchema": {
                "type": "object",
                "properties": {"choice": {"enum": options}},
                "required": ["choice"],
            },
            "metadata": {"options": options},
        }
    else:
        item = {
            "id": iid,
            "reason": "input_required",
            "message": "Which customer account should the refund go to?",
            "responseSchema": ANSWER_SCHEMA,
        }
    if subagent is not None:
        item["subagentRunId"] = subagent
    if expires_at is not None:
        item["expiresAt"] = expires_at
    return item


def payload_for(interrupt: dict[str, Any], rng: random.Random, *, valid: bool = True) -> Any:
    """A resolved payload satisfying (or, with valid=False, breaking) the interrupt's schema."""
    schema = interrupt.get("responseSchema") or {}
    props = schema.get("properties", {})
    if "approved" in props:
        return {"approved": True, "comment": "ok"} if valid else {"approved": "yes"}
    if "decision" in props:
        return {"decision": "approve", "note": "within policy"} if valid else {"decision": "maybe"}
    if "choice" in props:
        return {"choice": props["choice"]["enum"][0]} if valid else {"choice": "none-of-these"}
    return {"answer": "ACME Corp, account 4471"} if valid else {"answer": ""}


@dataclass(frozen=True, slots=True)
class RunPlan:
    outcome: str  # success | interrupt | cancelled | error
    interrupts: int = 0  # for interrupt: how many (parallel when > 1)
    subagent: bool = False
    subagent_interrupt: bool = False


@dataclass(frozen=True)
class EventShape:
    """Knobs of the events workload. Counts are per run unless said otherwise."""

    threads: int
    partitions: int
    second_run_share: float = 0.25  # threads with a follow-up run (a resume, or a new turn)
    interrupt_share: float = 0.3  # runs ending in the interrupt outcome
    parallel_share: float = 0.3  # of interrupting runs: 2-3 interrupts at once
    subagent_share: float = 0.2  # runs that invoke a subagent
    cancelled_share: float = 0.02
    error_share: float = 0.02
    concurrency: int = 200  # runs streaming at once on one partition
    text_deltas: tuple[int, int] = (20, 100)
    reasoning_share: float = 0.5
    reasoning_deltas: tuple[int, int] = (20, 80)
    tool_calls: tuple[int, int] = (0, 2)
    expires_share: float = 0.5  # interrupts carrying a (future) expiresAt
    unique_schema_share: float = 0.1  # of question interrupts: a schema of their own


def plan_run(rng: random.Random, shape: EventShape) -> RunPlan:
    r = rng.random()
    subagent = rng.random() < shape.subagent_share
    if r < shape.interrupt_share:
        count = 1 if rng.random() >= shape.parallel_share else 2 + int(rng.random() * 2)
        return RunPlan("interrupt", count, subagent, subagent and rng.random() < 0.5)
    r -= shape.interrupt_share
    if r < shape.cancelled_share:
        return RunPlan("cancelled", subagent=subagent)
    r -= shape.cancelled_share
    if r < shape.error_share:
        return RunPlan("error", subagent=subagent)
    return RunPlan("success", subagent=subagent)


def run_events(
    rng: random.Random,
    ids: Ids,
    shape: EventShape,
    thread_id: str,
    run_id: str,
    plan: RunPlan,
    expires_at: str | None,
) -> list[Event]:
    """One run of an agent, from RUN_STARTED to its closing event."""
    lo, hi = shape.text_deltas
    out: list[Event] = [
        {"type": "RUN_STARTED", "threadId": thread_id, "runId": run_id},
        {"type": "STEP_STARTED", "stepName": "respond"},
    ]
    if rng.random() < shape.reasoning_share:
        out += reasoning(rng, ids.short("rsn_"), rng.randint(*shape.reasoning_deltas))
    message_id = ids.short("msg_")
    out += text_message(rng, message_id, rng.randint(lo, hi))
    interrupts: list[dict[str, Any]] = []
    tool_calls = rng.randint(*shape.tool_calls)
    pending_tool_interrupts = plan.interrupts if plan.outcome == "interrupt" else 0
    if plan.subagent_interrupt:
        pending_tool_interrupts -= 1
    for n in range(max(tool_calls, pending_tool_interrupts)):
        call_id = ids.short("call_")
        interrupting = n < pending_tool_interrupts
        events, _ = tool_call(rng, ids, call_id, message_id, result=not interrupting)
        out += events
        if interrupting:
            interrupts.append(
                interrupt_for(
                    rng,
                    ids,
                    tool_call_id=call_id if rng.random() < 0.7 else None,
                    subagent=None,
                    expires_at=expires_at,
                    unique_schema_share=shape.unique_schema_share,
                )
            )
    if plan.subagent:
        sub = ids.short("sub_", 16)
        out.append(
            {
                "type": "SUBAGENT_STARTED",
                "subagentRunId": sub,
                "name": _SUBAGENTS[int(rng.random() * len(_SUBAGENTS))],
                "parentMessageId": message_id,
            }
        )
        out += text_message(rng, ids.short("msg_"), rng.randint(lo, hi) // 2, subagent=sub)
        if plan.subagent_interrupt and plan.outcome == "interrupt":
            item = interrupt_for(
                rng,
                ids,
                tool_call_id=None,
                subagent=sub,
                expires_at=expires_at,
                unique_schema_share=0.0,
            )
            interrupts.append(item)
            out.append(
                {
                    "type": "SUBAGENT_FINISHED",
                    "subagentRunId": sub,
                    "outcome": {"type": "suspended", "interruptIds": [item["id"]]},
                }
            )
        else:
            out.append({"type": "SUBAGENT_FINISHED", "subagentRunId": sub, "result": "done"})
    out.append({"type": "STEP_FINISHED", "stepName": "respond"})
    if plan.outcome == "error":
        out.append({"type": "RUN_ERROR", "message": "upstream model timed out", "code": "timeout"})
        return out
    finished: Event = {"type": "RUN_FINISHED", "threadId": thread_id, "runId": run_id}
    if plan.outcome == "interrupt":
        finished["outcome"] = {"type": "interrupt", "interrupts": interrupts}
    elif plan.outcome == "cancelled":
        finished["outcome"] = {"type": "cancelled"}
    else:
        finished["outcome"] = {"type": "success"}
    finished["usage"] = [
        {
            "provider": "openai",
            "model": "gpt-4.1",
            "inputTokens": 1000 + int(rng.random() * 9000),
            "outputTokens": 50 + int(rng.random() * 900),
        }
    ]
    out.append(finished)
    return out


@dataclass
class StreamStats:
    events: int = 0
    bytes: int = 0
    threads: int = 0
    runs: int = 0
    by_type: Counter[str] = field(default_factory=Counter)
    outcomes: Counter[str] = field(default_factory=Counter)
    per_partition: Counter[int] = field(default_factory=Counter)

    @property
    def delta_share(self) -> float:
        deltas = sum(n for t, n in self.by_type.items() if t in DELTA_TYPES)
        return deltas / self.events if self.events else 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "events": self.events,
            "bytes": self.bytes,
            "mean_event_bytes": round(self.bytes / self.events, 1) if self.events else 0,
            "threads": self.threads,
            "runs": self.runs,
            "delta_share": round(self.delta_share, 4),
            "outcomes": dict(self.outcomes),
            "by_type": dict(self.by_type.most_common()),
            "per_partition": {str(k): v for k, v in sorted(self.per_partition.items())},
        }


class EventStream:
    """The events topic of one agent: (partition, key, value) in produce order.

    Per partition, `concurrency` runs stream at once, their events interleaved
    at random (as concurrent agent runs land on one partition); a finished run
    makes room for the next. A thread's follow-up run starts only after its
    previous run closed.
    """

    def __init__(self, shape: EventShape, seed: int, now: datetime | None = None) -> None:
        self.shape = shape
        self.seed = seed
        self.stats = StreamStats()
        self.expires_at = iso((now or datetime.now(UTC)) + timedelta(days=1))

    def __iter__(self) -> Iterator[tuple[int, bytes, bytes]]:
        shape = self.shape
        rng = random.Random(self.seed)
        ids = Ids(rng)
        by_partition: dict[int, list[str]] = {p: [] for p in range(shape.partitions)}
        for _ in range(shape.threads):
            thread_id = ids.uuid()
            by_partition[partition_for(thread_id.encode(), shape.partitions)].append(thread_id)
        self.stats.threads = shape.threads
        for partition, threads in by_partition.items():
            yield from self._partition(rng, ids, partition, threads)

    def _partition(
        self, rng: random.Random, ids: Ids, partition: int, threads: list[str]
    ) -> Iterator[tuple[int, bytes, bytes]]:
        shape, stats = self.shape, self.stats
        queue: list[tuple[str, int]] = [(t, 0) for t in reversed(threads)]  # (thread, run #)
        active: list[tuple[str, int, bytes, list[bytes], int]] = []
        dumps_ = orjson.dumps
        while queue or active:
            while queue and len(active) < shape.concurrency:
                thread_id, n = queue.pop()
                plan = plan_run(rng, shape)
                events = run_events(rng, ids, shape, thread_id, ids.uuid(), plan, self._expiry(rng))
                stats.runs += 1
                stats.outcomes[plan.outcome] += 1
                for e in events:
                    stats.by_type[e["type"]] += 1
                encoded = [dumps_(e) for e in events]
                active.append((thread_id, n, thread_id.encode(), encoded, 0))
            index = int(rng.random() * len(active))
            thread_id, n, key, encoded, pos = active[index]
            value = encoded[pos]
            stats.events += 1
            stats.bytes += len(value)
            stats.per_partition[partition] += 1
            yield partition, key, value
            if pos + 1 < len(encoded):
                active[index] = (thread_id, n, key, encoded, pos + 1)
            else:
                active[index] = active[-1]
                active.pop()
                if n == 0 and rng.random() < shape.second_run_share:
                    # the follow-up run (a resume, or the user's next turn) joins later
                    queue.insert(0, (thread_id, 1))

    def _expiry(self, rng: random.Random) -> str | None:
        return self.expires_at if rng.random() < self.shape.expires_share else None


# --- decisions -------------------------------------------------------------------------------

# Request kinds and what the gateway is expected to do with each.
EXPECTED = {
    "valid": "forward",
    "duplicate": "duplicate",
    "uncovered": "reject",
    "unrecognised": "forward",  # the extra entry is stripped with a warning
    "expired": "reject",
    "expired_cancel": "forward",
    "malformed": "reject",
    "not_json": "reject",
    "payload_mismatch": "reject",
    "unknown_thread": "forward",  # forwarded unjudged, with a warning
}

# Per thread, a script of requests in order: (weight, [kinds]).
SCRIPTS: dict[str, tuple[float, tuple[str, ...]]] = {
    "valid": (0.40, ("valid",)),
    "duplicate": (0.12, ("valid", "duplicate")),
    "uncovered": (0.12, ("uncovered", "valid")),
    "unrecognised": (0.10, ("unrecognised",)),
    "expired": (0.08, ("expired", "expired_cancel")),
    "malformed": (0.06, ("malformed", "valid")),
    "not_json": (0.02, ("not_json", "valid")),
    "payload_mismatch": (0.05, ("payload_mismatch", "valid")),
    "unknown_thread": (0.05, ("unknown_thread",)),
}


@dataclass
class Request:
    key: bytes
    kind: str
    body: dict[str, Any] | None  # None: `raw` is sent as is
    raw: bytes | None = None
    correlation: str = ""
    reply: bool = False  # asks for a reply (agui-reply-to)

    def headers(self, reply_topic: str) -> list[tuple[str, bytes]]:
        out = [("agui-correlation-id", self.correlation.encode())]
        if self.reply:
            out.append(("agui-reply-to", reply_topic.encode()))
        return out

    def value(self, sent_at: float | None = None) -> bytes:
        if self.body is None:
            assert self.raw is not None
            return self.raw
        if sent_at is None:
            return orjson.dumps(self.body)
        props = self.body.setdefault("forwardedProps", {})
        props["benchSentAt"] = sent_at
        return orjson.dumps(self.body)


@dataclass
class DecisionThread:
    thread_id: str
    run_id: str
    interrupts: list[dict[str, Any]]
    events: list[bytes]  # RUN_STARTED, an interrupting RUN_FINISHED
    script: str


class DecisionWorkload:
    """Interrupted threads and the run requests answering them.

    `events()` is what must be on the events topic (and consumed) first;
    `requests()` the request stream, in order (a thread's requests keep
    their order; threads interleave).
    """

    def __init__(
        self,
        threads: int,
        partitions: int,
        seed: int,
        now: datetime | None = None,
        reply_share: float = 0.5,
    ):
        self.partitions = partitions
        self.reply_share = reply_share
        rng = self.rng = random.Random(seed)
        self.ids = Ids(rng)
        now = now or datetime.now(UTC)
        self.live_expiry = iso(now + timedelta(days=1))
        self.past_expiry = iso(now - timedelta(hours=1))
        names = list(SCRIPTS)
        weights = [SCRIPTS[n][0] for n in names]
        self.threads: list[DecisionThread] = []
        for _ in range(threads):
            script = rng.choices(names, weights)[0]
            self.threads.append(self._thread(script))

    def _thread(self, script: str) -> DecisionThread:
        rng, ids = self.rng, self.ids
        thread_id, run_id = ids.uuid(), ids.uuid()
        r = rng.random()
        count = 1 if r < 0.7 else (2 if r < 0.9 else 3)
        if script == "uncovered":
            count = max(count, 2)
        expires = self.past_expiry if script == "expired" else self.live_expiry
        subagent = ids.short("sub_", 16) if rng.random() < 0.2 else None
        interrupts = []
        for n in range(count):
            by_sub = subagent is not None and n == count - 1
            interrupts.append(
                interrupt_for(
                    rng,
                    ids,
                    tool_call_id=ids.short("call_") if not by_sub and rng.random() < 0.6 else None,
                    subagent=subagent if by_sub else None,
                    expires_at=expires if (script == "expired" or rng.random() < 0.5) else None,
                    unique_schema_share=0.1,
                )
            )
        events = interrupted_run(thread_id, run_id, interrupts)
        return DecisionThread(thread_id, run_id, interrupts, events, script)

    def events(self) -> list[tuple[int, bytes, bytes]]:
        out = []
        for t in self.threads:
            if t.script == "unknown_thread":
                continue  # the gateway has never seen these threads
            key = t.thread_id.encode()
            p = partition_for(key, self.partitions)
            out += [(p, key, value) for value in t.events]
        return out

    def requests(self) -> list[Request]:
        """Every thread's script, interleaved: all first requests (shuffled), then seconds."""
        rng = random.Random(self.rng.random())
        steps: list[list[Request]] = []
        for t in self.threads:
            previous: Request | None = None
            for step, kind in enumerate(SCRIPTS[t.script][1]):
                request = self._request(t, kind, previous)
                previous = request
                while len(steps) <= step:
                    steps.append([])
                steps[step].append(request)
        out: list[Request] = []
        for step_requests in steps:
            rng.shuffle(step_requests)
            out += step_requests
        for n, request in enumerate(out):
            request.correlation = f"req-{n}"
            request.reply = rng.random() < self.reply_share
        return out

    def partition(self, request: Request) -> int:
        return partition_for(request.key, self.partitions)

    def _request(self, t: DecisionThread, kind: str, previous: Request | None) -> Request:
        rng, ids = self.rng, self.ids
        key = t.thread_id.encode()
        if kind == "duplicate":
            assert previous is not None and previous.body is not None
            return Request(key, kind, orjson.loads(orjson.dumps(previous.body)))
        if kind == "not_json":
            return Request(key, kind, None, b'{"threadId": "' + key + b'", "runId": oops}')
        entries: list[dict[str, Any]] = []
        for n, interrupt in enumerate(t.interrupts):
            if kind == "uncovered" and n == len(t.interrupts) - 1:
                continue  # the last one is left unanswered
            if kind == "expired_cancel":
                entries.append({"interruptId": interrupt["id"], "status": "cancelled"})
            elif kind not in ("expired", "payload_mismatch") and rng.random() < 0.1:
                entries.append({"interruptId": interrupt["id"], "status": "cancelled"})
            else:
                entries.append(
                    {
                        "interruptId": interrupt["id"],
                        "status": "resolved",
                        "payload": payload_for(interrupt, rng, valid=kind != "payload_mismatch"),
                    }
                )
        if kind == "unrecognised":
            entries.append(
                {"interruptId": ids.short("int_", 16), "status": "resolved", "payload": {"a": 1}}
            )
        body = run_input(rng, ids, t.thread_id, t.run_id, entries)
        if kind == "malformed":
            if rng.random() < 0.5:
                body["resume"][0]["status"] = "approved"  # not resolved | cancelled
            else:
                body["messages"] = {"role": "user", "content": "hi"}  # not a list
        return Request(key, kind, body)


def run_input(
    rng: random.Random,
    ids: Ids,
    thread_id: str,
    parent_run_id: str,
    resume: list[dict[str, Any]],
) -> dict[str, Any]:
    """A RunAgentInput as a web client sends it: the history, tools, state, resume."""
    call_id = ids.short("call_")
    _, args = _tool_args(rng, ids, 0)
    messages: list[dict[str, Any]] = [
        {"id": ids.short("msg_"), "role": "user", "content": "Can you chase the overdue invoices?"},
        {
            "id": ids.short("msg_"),
            "role": "assistant",
            "content": "I found two overdue invoices from ACME Corp. I will draft a reminder.",
        },
        {
            "id": ids.short("msg_"),
            "role": "user",
            "content": "Yes, send it to their billing contact.",
        },
        {
            "id": ids.short("msg_"),
            "role": "assistant",
            "toolCalls": [
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": "send_email", "arguments": args},
                }
            ],
        },
    ]
    if rng.random() < 0.5:
        messages += [
            {
                "id": ids.short("msg_"),
                "role": "tool",
                "toolCallId": call_id,
                "content": '{"ok": true}',
            },
            {"id": ids.short("msg_"), "role": "assistant", "content": "Sent. Anything else?"},
            {"id": ids.short("msg_"), "role": "user", "content": "Also open a ticket for finance."},
        ]
    return {
        "threadId": thread_id,
        "runId": ids.uuid(),
        "parentRunId": parent_run_id,
        "state": {"stage": "awaiting_approval", "draftId": ids.short("draft_", 12)},
        "messages": messages,
        "tools": TOOL_DEFINITIONS,
        "context": [{"description": "user timezone", "value": "Europe/Berlin"}],
        "forwardedProps": {"client": "web", "locale": "en-GB"},
        "resume": resume,
    }


# --- single threads, for the memory and restore scenarios -------------------------------------


def idle_thread_events(rng: random.Random, ids: Ids, thread_id: str) -> list[bytes]:
    """A thread whose latest run closed with success: what most threads look like."""
    return closed_run(thread_id, ids.uuid(), {"type": "success"})


def interrupted_thread_events(
    rng: random.Random,
    ids: Ids,
    thread_id: str,
    expires_at: str,
    unique_schema_share: float = 0.1,
) -> tuple[list[bytes], list[dict[str, Any]]]:
    """A thread waiting on 1-3 open interrupts (some raised by a subagent)."""
    run_id = ids.uuid()
    r = rng.random()
    count = 1 if r < 0.7 else (2 if r < 0.9 else 3)
    subagent = ids.short("sub_", 16) if rng.random() < 0.2 else None
    interrupts = [
        interrupt_for(
            rng,
            ids,
            tool_call_id=ids.short("call_") if rng.random() < 0.6 else None,
            subagent=subagent if subagent and n == count - 1 else None,
            expires_at=expires_at if rng.random() < 0.5 else None,
            unique_schema_share=unique_schema_share,
        )
        for n in range(count)
    ]
    return interrupted_run(thread_id, run_id, interrupts), interrupts
