"""Property-based tests of the core (hypothesis).

The verdict is checked against an oracle written here from NOTES.md, not from
the judge's helpers: expiry is known from how the time was generated, and each
responseSchema comes paired with a plain Python predicate.
"""

from __future__ import annotations

import copy
from collections import Counter
from dataclasses import dataclass
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.core import Finding, Policy, Reason, ThreadState, Verdict, Warn, apply_event, judge
from gateway.core.values.thread import from_dict, to_dict
from tests.core.factories import NOW_MS, RUN_1, THREAD, interrupt, iso_at, run_started, state_of

FAST = settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# --- JSON ------------------------------------------------------------------------------------

SCALARS = (
    st.none()
    | st.booleans()
    | st.integers()  # unbounded: JSON does not limit integers
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
)
JSON = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=16,
)
JSON_OBJECTS = st.dictionaries(st.text(max_size=8), JSON, max_size=5)

# --- threads with open interrupts ------------------------------------------------------------


@dataclass(frozen=True)
class Schema:
    schema: dict[str, Any]
    accepts: Any  # payload (None when absent) -> bool, written independently of jsonschema
    name: str


SCHEMAS = [
    Schema(
        {
            "type": "object",
            "properties": {"approved": {"type": "boolean"}},
            "required": ["approved"],
        },
        lambda p: isinstance(p, dict) and "approved" in p and isinstance(p["approved"], bool),
        "approval",
    ),
    Schema(
        {"type": "string", "minLength": 1}, lambda p: isinstance(p, str) and len(p) >= 1, "text"
    ),
    Schema(
        {"type": "integer", "minimum": 0},
        lambda p: isinstance(p, int) and not isinstance(p, bool) and p >= 0,
        "count",
    ),
    Schema({"enum": ["a", "b"]}, lambda p: isinstance(p, str) and p in ("a", "b"), "choice"),
    Schema({}, lambda p: True, "anything"),
    Schema({"type": 12}, lambda p: True, "unusable"),  # unusable: a warning, never a rejection
]
ABSENT = object()
PAYLOADS = [
    ABSENT,
    None,
    True,
    0,
    7,
    -3,
    "",
    "a",
    "free text",
    {"approved": True},
    {"approved": "yes"},
    {},
    [1, 2],
    {"approved": False, "x-unknown": {"deep": [None]}},
]


@dataclass(frozen=True)
class Open:
    id: str
    expiry: str  # none | past | now | future | unreadable
    offset_ms: int
    schema: Schema | None

    @property
    def expired(self) -> bool:
        return self.expiry in ("past", "now")

    def wire(self) -> dict[str, Any]:
        extra: dict[str, Any] = {}
        if self.expiry in ("past", "now", "future"):
            extra["expiresAt"] = iso_at(self.offset_ms)
        elif self.expiry == "unreadable":
            extra["expiresAt"] = "when the cows come home"
        if self.schema is not None:
            extra["responseSchema"] = copy.deepcopy(self.schema.schema)
        return interrupt(self.id, "input_required", **extra)


@st.composite
def open_interrupts(draw) -> list[Open]:
    count = draw(st.integers(1, 5))
    out = []
    for n in range(count):
        expiry = draw(st.sampled_from(["none", "none", "past", "now", "future", "unreadable"]))
        offset = {
            "past": -draw(st.integers(1, 10**9)),
            "now": 0,
            "future": draw(st.integers(1, 10**9)),
        }.get(expiry, 0)
        schema = draw(st.none() | st.sampled_from(SCHEMAS))
        out.append(Open(f"int-{n}", expiry, offset, schema))
    return out


@st.composite
def resume_entries(draw, opens: list[Open]) -> list[dict[str, Any]]:
    """Mostly near-valid lists, so that each single defect decides the verdict."""
    chosen: list[tuple[str, Open | None]] = []
    for o in opens:
        copies = draw(st.sampled_from([1] * 14 + [0, 2]))
        chosen += [(o.id, o)] * copies
    if draw(st.integers(0, 2)) == 0:
        extras = draw(
            st.lists(st.sampled_from(["extra-0", "extra-1", "extra-2"]), min_size=1, unique=True)
        )
        if draw(st.integers(0, 4)) == 0:
            extras.append(extras[0])
        chosen += [(i, None) for i in extras]
    chosen = draw(st.permutations(chosen))
    entries = []
    for interrupt_id, o in chosen:
        statuses = ["resolved", "cancelled", "cancelled"] if o and o.expired else ["resolved"] * 3
        entry: dict[str, Any] = {
            "interruptId": interrupt_id,
            "status": draw(st.sampled_from([*statuses, "cancelled"])),
        }
        if o is not None and o.schema is not None and draw(st.integers(0, 3)) > 0:
            payload = draw(st.sampled_from([p for p in PAYLOADS if o.schema.accepts(_value(p))]))
        else:
            payload = draw(st.sampled_from(PAYLOADS))
        if payload is not ABSENT:
            entry["payload"] = copy.deepcopy(payload)
        if draw(st.booleans()):
            entry["metadata"] = draw(JSON_OBJECTS)
        entries.append(entry)
    return entries


def _value(payload: Any) -> Any:
    return None if payload is ABSENT else payload


@dataclass
class Case:
    opens: list[Open]
    raw: dict[str, Any]
    strict: bool
    malformed: bool
    unknown_top: bool
    unknown_entry: list[int]


@st.composite
def cases(draw) -> Case:
    opens = draw(open_interrupts())
    entries = draw(resume_entries(opens))
    raw: dict[str, Any] = {
        "threadId": THREAD,
        "runId": "run-2",
        "messages": [{"id": "m-1", "role": "user", "content": "continue"}],
        "state": draw(JSON),
        "forwardedProps": draw(JSON),
    }
    if entries or draw(st.booleans()):
        raw["resume"] = entries
    unknown_top = draw(st.booleans())
    if unknown_top:
        raw["x-extension"] = draw(JSON)
    unknown_entry = []
    for index, entry in enumerate(entries):
        if draw(st.integers(0, 4)) == 0:
            entry["signature"] = draw(st.text(max_size=5))
            unknown_entry.append(index)
    malformed = False
    if draw(st.integers(0, 7)) == 0:
        malformed = True
        how = draw(st.sampled_from(["status", "id", "runId", "messages"]))
        if how in ("status", "id") and entries:
            target = draw(st.sampled_from(entries))
            if how == "status":
                target["status"] = draw(st.sampled_from(["done", "RESOLVED", "", "abandoned"]))
            else:
                target["interruptId"] = draw(st.integers() | st.none() | st.lists(st.text()))
        elif how == "runId":
            raw["runId"] = draw(st.integers() | st.booleans() | st.lists(st.text(), max_size=2))
        else:
            del raw["messages"]
    return Case(opens, raw, draw(st.booleans()), malformed, unknown_top, unknown_entry)


def thread_for(opens: list[Open]) -> ThreadState:
    return state_of(
        run_started(),
        {
            "type": "RUN_FINISHED",
            "threadId": THREAD,
            "runId": RUN_1,
            "outcome": {"type": "interrupt", "interrupts": [o.wire() for o in opens]},
        },
    )


def oracle_forwards(case: Case) -> bool:
    """NOTES.md, read independently: forward iff well formed, every open interrupt has
    exactly one entry, no resolved entry answers an expired interrupt or breaks its
    schema, no interrupt is named twice, and (strict) nothing unrecognised."""
    if case.malformed:
        return False
    entries = case.raw.get("resume", [])
    counts = Counter(e["interruptId"] for e in entries)
    if any(n > 1 for n in counts.values()):
        return False
    by_id = {o.id: o for o in case.opens}
    if any(counts[o.id] != 1 for o in case.opens):
        return False
    if case.strict and any(i not in by_id for i in counts):
        return False
    for e in entries:
        o = by_id.get(e["interruptId"])
        if o is None or e["status"] != "resolved":
            continue
        if o.expired:
            return False
        if o.schema is not None and not o.schema.accepts(e.get("payload")):
            return False
    return True


@FAST
@given(cases())
def test_the_verdict_matches_the_oracle(case):
    state = thread_for(case.opens)
    assert [i.id for i in state.interrupts] == [o.id for o in case.opens]
    pristine = copy.deepcopy(case.raw)
    decision, new_state = judge(state, case.raw, NOW_MS, Policy(case.strict), THREAD)
    assert case.raw == pristine
    expected = oracle_forwards(case)
    assert (decision.verdict is Verdict.FORWARD) == expected, decision.to_json()
    if expected:
        assert decision.reasons == ()
        assert new_state is not None and len(new_state.forwards) == 1
    else:
        assert decision.verdict is Verdict.REJECT
        assert decision.reasons
        assert decision.input is None
        assert new_state is state
    if case.malformed:
        assert {r.code for r in decision.reasons} == {str(Reason.MALFORMED_INPUT)}


@FAST
@given(cases())
def test_one_reason_per_offending_interrupt(case):
    decision, _ = judge(thread_for(case.opens), case.raw, NOW_MS, Policy(case.strict), THREAD)
    if case.malformed:
        return
    entries = case.raw.get("resume", [])
    named = Counter(e["interruptId"] for e in entries)
    uncovered = [r.interrupt_id for r in decision.reasons if r.code == Reason.UNCOVERED_INTERRUPT]
    assert uncovered == [o.id for o in case.opens if named[o.id] == 0]
    duplicated = [r.interrupt_id for r in decision.reasons if r.code == Reason.DUPLICATE_ENTRY]
    assert sorted(duplicated) == sorted(i for i, n in named.items() if n > 1)
    first = {}
    for e in entries:
        first.setdefault(e["interruptId"], e)
    expired = [r.interrupt_id for r in decision.reasons if r.code == Reason.EXPIRED_INTERRUPT]
    assert expired == [
        o.id for o in case.opens if o.expired and first.get(o.id, {}).get("status") == "resolved"
    ]


@FAST
@given(cases())
def test_forwarding_strips_only_what_it_warns_about_and_alters_nothing_else(case):
    state = thread_for(case.opens)
    decision, _ = judge(state, case.raw, NOW_MS, Policy(case.strict), THREAD)
    if decision.verdict is not Verdict.FORWARD:
        return
    open_ids = {o.id for o in case.opens}
    expected = copy.deepcopy(case.raw)
    expected.pop("x-extension", None)
    kept = []
    for index, entry in enumerate(expected.get("resume", [])):
        if index in case.unknown_entry:
            del entry["signature"]
        if entry["interruptId"] in open_ids:
            kept.append(entry)
    if "resume" in expected:
        expected["resume"] = kept
    assert decision.input == expected
    forwarded = decision.input
    assert forwarded is not None
    assert forwarded["forwardedProps"] == case.raw["forwardedProps"]
    assert forwarded["state"] == case.raw["state"]
    originals = {e["interruptId"]: e for e in case.raw.get("resume", [])}
    for entry in forwarded.get("resume", []):
        original = originals[entry["interruptId"]]
        assert entry.get("payload", ABSENT) == original.get("payload", ABSENT)
        assert entry.get("metadata", ABSENT) == original.get("metadata", ABSENT)
    stripped = {w.path for w in decision.warnings if w.code == Warn.UNKNOWN_MEMBER_STRIPPED}
    assert stripped == (
        ({"/x-extension"} if case.unknown_top else set())
        | {f"/resume/{i}/signature" for i in case.unknown_entry}
    )
    unrecognised = [w.path for w in decision.warnings if w.code == Warn.UNRECOGNISED_ENTRY]
    assert unrecognised == [
        f"/resume/{i}"
        for i, e in enumerate(case.raw.get("resume", []))
        if e["interruptId"] not in open_ids
    ]


# --- never raising ---------------------------------------------------------------------------

STATES = [
    None,
    ThreadState(THREAD),
    state_of(run_started()),
    state_of(run_started(), {"type": "RUN_FINISHED", "threadId": THREAD, "runId": RUN_1}),
    state_of(
        run_started(),
        {
            "type": "RUN_FINISHED",
            "threadId": THREAD,
            "runId": RUN_1,
            "outcome": {
                "type": "interrupt",
                "interrupts": [
                    interrupt("int-0", responseSchema={"type": "object"}, expiresAt=iso_at(-1)),
                    interrupt("int-1", expiresAt="garbage"),
                ],
            },
        },
    ),
]
KNOWN_FIELDS = [
    "threadId",
    "runId",
    "parentRunId",
    "protocolVersion",
    "state",
    "messages",
    "tools",
    "context",
    "forwardedProps",
    "resume",
]
LOOSE_INPUTS = st.dictionaries(
    st.sampled_from(KNOWN_FIELDS) | st.text(max_size=6), JSON, max_size=8
)
LOOSE_ENTRIES = st.lists(
    st.fixed_dictionaries(
        {},
        optional={
            "interruptId": st.sampled_from(["int-0", "int-1", "x"]) | JSON,
            "status": st.sampled_from(["resolved", "cancelled"]) | JSON,
            "payload": JSON,
            "metadata": JSON,
        },
    ),
    max_size=4,
)


def assert_sane(decision, state_in, state_out) -> None:
    assert isinstance(decision.verdict, Verdict)
    assert all(isinstance(f, Finding) for f in (*decision.reasons, *decision.warnings))
    assert {r.code for r in decision.reasons} <= {str(r) for r in Reason}
    assert {w.code for w in decision.warnings} <= {str(w) for w in Warn}
    assert (decision.verdict is Verdict.REJECT) == bool(decision.reasons)
    assert (decision.input is not None) == (decision.verdict is Verdict.FORWARD)
    if decision.verdict is not Verdict.FORWARD:
        assert state_out is state_in
    decision.to_json()


@FAST
@given(raw=JSON, state=st.sampled_from(STATES), strict=st.booleans())
def test_judge_never_raises_on_any_json_value(raw, state, strict):
    decision, new_state = judge(state, raw, NOW_MS, Policy(strict), THREAD)
    assert_sane(decision, state, new_state)
    if not isinstance(raw, dict):
        assert [r.code for r in decision.reasons] == [str(Reason.MALFORMED_INPUT)]


@FAST
@given(raw=LOOSE_INPUTS, entries=LOOSE_ENTRIES, state=st.sampled_from(STATES), strict=st.booleans())
def test_judge_never_raises_on_objects_shaped_like_inputs(raw, entries, state, strict):
    raw.setdefault("threadId", THREAD)
    raw.setdefault("runId", "run-2")
    raw.setdefault("messages", [])
    raw["resume"] = entries
    decision, new_state = judge(state, raw, NOW_MS, Policy(strict), THREAD)
    assert_sane(decision, state, new_state)


def wrong(*types: str):
    pool = {
        "str": st.text(max_size=5),
        "int": st.integers(),
        "float": st.floats(allow_nan=False),
        "bool": st.booleans(),
        "null": st.none(),
        "list": st.lists(SCALARS, max_size=3),
        "object": st.dictionaries(st.text(max_size=4), SCALARS, max_size=3),
    }
    return st.one_of([pool[t] for t in types])


WRONGLY_TYPED = {
    # field: values its schema rejects (null is allowed where the field is optional)
    "threadId": wrong("int", "float", "bool", "null", "list", "object"),
    "runId": wrong("int", "float", "bool", "null", "list", "object"),
    "parentRunId": wrong("int", "float", "bool", "list", "object"),
    "protocolVersion": wrong("int", "float", "bool", "list", "object"),
    "messages": wrong("str", "int", "float", "bool", "null", "object"),
    "tools": wrong("str", "int", "float", "bool", "object"),
    "context": wrong("str", "int", "float", "bool", "object"),
    "resume": wrong("str", "int", "float", "bool", "object"),
}


@FAST
@given(data=st.data(), state=st.sampled_from(STATES), strict=st.booleans())
def test_a_wrongly_typed_known_field_is_malformed_input(data, state, strict):
    field = data.draw(st.sampled_from(sorted(WRONGLY_TYPED)))
    raw = {"threadId": THREAD, "runId": "run-2", "messages": []}
    raw[field] = data.draw(WRONGLY_TYPED[field])
    decision, new_state = judge(state, raw, NOW_MS, Policy(strict), THREAD)
    assert decision.verdict is Verdict.REJECT
    assert new_state is state
    malformed = [r for r in decision.reasons if r.code == Reason.MALFORMED_INPUT]
    assert malformed
    assert all(r.path is not None and r.path.startswith(f"/{field}") for r in malformed)


@FAST
@given(
    data=st.data(),
    field=st.sampled_from(["interruptId", "status", "metadata"]),
    state=st.sampled_from(STATES),
)
def test_a_wrongly_typed_resume_entry_is_malformed_input(data, field, state):
    bad = {
        "interruptId": wrong("int", "float", "bool", "null", "list", "object"),
        "status": wrong("int", "bool", "null", "list", "object")
        | st.text(max_size=8).filter(lambda s: s not in ("resolved", "cancelled")),
        "metadata": wrong("str", "int", "float", "bool", "list"),
    }[field]
    entry = {"interruptId": "int-0", "status": "cancelled", field: data.draw(bad)}
    raw = {"threadId": THREAD, "runId": "run-2", "messages": [], "resume": [entry]}
    decision, _ = judge(state, raw, NOW_MS, Policy(), THREAD)
    assert decision.verdict is Verdict.REJECT
    assert [(r.code, r.path) for r in decision.reasons] == [
        (str(Reason.MALFORMED_INPUT), f"/resume/0/{field}")
    ]


# --- apply_event on arbitrary JSON -----------------------------------------------------------

LIFECYCLE_TYPES = [
    "RUN_STARTED",
    "RUN_FINISHED",
    "RUN_ERROR",
    "SUBAGENT_STARTED",
    "SUBAGENT_FINISHED",
    "SUBAGENT_ERROR",
    "TEXT_MESSAGE_START",
    "STEP_STARTED",
    "NOT_A_TYPE",
]
EVENT_MEMBERS = {
    "threadId": st.sampled_from([THREAD, "other"]) | JSON,
    "runId": st.sampled_from([RUN_1, "run-2"]) | JSON,
    "message": st.text(max_size=5) | JSON,
    "subagentRunId": st.sampled_from(["sub-1", "sub-2"]) | JSON,
    "outcome": JSON
    | st.fixed_dictionaries(
        {"type": st.sampled_from(["interrupt", "success", "cancelled", "suspended"]) | JSON},
        optional={
            "interrupts": st.lists(
                st.fixed_dictionaries(
                    {"id": st.sampled_from(["a", "b"]) | JSON},
                    optional={
                        "reason": st.text(max_size=4) | JSON,
                        "expiresAt": st.sampled_from([iso_at(-5), iso_at(5), "bad"]) | JSON,
                        "responseSchema": JSON,
                        "subagentRunId": JSON,
                        "metadata": JSON,
                    },
                ),
                max_size=3,
            ),
            "interruptIds": JSON,
        },
    ),
}
EVENTS = JSON | st.fixed_dictionaries(
    {"type": st.sampled_from(LIFECYCLE_TYPES) | JSON},
    optional=EVENT_MEMBERS,
)


@FAST
@given(events=st.lists(EVENTS, max_size=8), raw=JSON_OBJECTS | JSON, strict=st.booleans())
def test_apply_event_never_raises_and_always_leaves_a_usable_state(events, raw, strict):
    state: ThreadState | None = None
    for at, event in enumerate(events):
        outcome = apply_event(state, THREAD, event, NOW_MS + at)
        assert outcome.state is None or isinstance(outcome.state, ThreadState)
        assert all(isinstance(w, Finding) for w in outcome.warnings)
        assert {w.code for w in outcome.warnings} <= {str(w) for w in Warn}
        if outcome.state is None:
            assert state is None
        else:
            assert outcome.state.thread_id == THREAD
            assert from_dict(to_dict(outcome.state)) == outcome.state
            assert len({i.id for i in outcome.state.interrupts}) == len(outcome.state.interrupts)
        state = outcome.state
    decision, new_state = judge(state, raw, NOW_MS, Policy(strict), THREAD)
    assert_sane(decision, state, new_state)


# --- hostile streams: nothing escapes, every state fits and survives the changelog -----------


def _deep(depth: int, kind: type) -> object:
    value: object = "x"
    for _ in range(depth):
        value = [value] if kind is list else {"type": value}
    return value


HOSTILE = (
    JSON
    | st.builds(_deep, st.sampled_from([300, 1_000]), st.sampled_from([list, dict]))
    | st.builds(
        lambda n, c: c * n, st.integers(200, 3_000), st.sampled_from(["x", "é", "\U0001d11e"])
    )
    | st.just(10**400)
)
IDS = st.sampled_from(["a", "b", "sub-1", "sub-2", RUN_1, "run-2"]) | HOSTILE
HOSTILE_INTERRUPT = st.fixed_dictionaries(
    {"id": IDS},
    optional={
        "reason": st.text(max_size=4) | HOSTILE,
        "message": HOSTILE,
        "expiresAt": st.sampled_from([iso_at(-5), iso_at(5)]) | HOSTILE,
        "responseSchema": HOSTILE
        | st.builds(lambda n: {"description": "d" * n}, st.integers(10_000, 300_000)),
        "metadata": HOSTILE,
        "subagentRunId": IDS,
        "toolCallId": IDS,
    },
)
MANY_INTERRUPTS = st.integers(28, 40).map(
    lambda n: [{"id": f"i{k}", "reason": "r", "message": "m" * 30_000} for k in range(n)]
)
HOSTILE_OUTCOME = HOSTILE | st.fixed_dictionaries(
    {"type": st.sampled_from(["interrupt", "success", "cancelled", "suspended"]) | HOSTILE},
    optional={
        "interrupts": st.lists(HOSTILE_INTERRUPT, max_size=3) | MANY_INTERRUPTS,
        "interruptIds": st.lists(IDS, max_size=3)
        | st.integers(30, 40).map(lambda n: [f"i{k}" * 60 for k in range(n)]),
    },
)
HOSTILE_EVENT = st.fixed_dictionaries(
    {"type": st.sampled_from(LIFECYCLE_TYPES) | HOSTILE},
    optional={
        "threadId": st.just(THREAD) | HOSTILE,
        "runId": IDS,
        "message": HOSTILE,
        "name": HOSTILE,
        "subagentRunId": IDS,
        "outcome": HOSTILE_OUTCOME,
    },
)


def _burst(n: int, suspend: bool) -> list[dict[str, Any]]:
    """`n` subagent invocations started (and suspended, or left open) in one run."""
    events: list[dict[str, Any]] = []
    for k in range(n):
        sub = f"s{k}" * 40
        events.append({"type": "SUBAGENT_STARTED", "subagentRunId": sub, "name": "x"})
        if suspend:
            outcome = {"type": "suspended", "interruptIds": [f"i{k}"] * 3}
            events.append({"type": "SUBAGENT_FINISHED", "subagentRunId": sub, "outcome": outcome})
    return events


SUBAGENT_BURST = st.builds(_burst, st.integers(1, 40), st.booleans())
HOSTILE_STREAMS = st.lists(
    st.lists(HOSTILE_EVENT, min_size=1, max_size=3)
    | SUBAGENT_BURST
    | st.just([run_started(), {"type": "RUN_ERROR", "message": "x"}]),
    max_size=6,
).map(lambda chunks: [event for chunk in chunks for event in chunk])
HOSTILE_REQUESTS = st.fixed_dictionaries(
    {"threadId": st.just(THREAD), "runId": IDS, "messages": st.just([])},
    optional={
        "resume": st.lists(
            st.fixed_dictionaries(
                {"interruptId": IDS, "status": st.sampled_from(["resolved", "cancelled"])},
                optional={"payload": HOSTILE},
            ),
            max_size=4,
        )
    },
)


@settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.function_scoped_fixture,
        HealthCheck.large_base_example,
    ],
)
@given(events=HOSTILE_STREAMS, request=HOSTILE_REQUESTS)
def test_hostile_streams_raise_nothing_and_every_state_survives_the_changelog(
    events, request, capfd
):
    from gateway.codec import changelog
    from gateway.core.requests.sweep import expire_due
    from gateway.kafka.pairs.pair import MAX_RECORD_BYTES

    def survives(state: ThreadState | None) -> None:
        if state is None:
            return
        value = changelog.encode(state)
        assert len(value) <= MAX_RECORD_BYTES
        assert changelog.decode(value) == state

    state: ThreadState | None = None
    capfd.readouterr()
    for at, event in enumerate(events):
        outcome = apply_event(state, THREAD, event, NOW_MS + at)
        assert all(isinstance(w.detail, str) and len(w.detail) < 2_000 for w in outcome.warnings)
        assert {w.code for w in outcome.warnings} <= {str(w) for w in Warn}
        state = outcome.state
        survives(state)
        if state is not None:
            swept, _ = expire_due(state, NOW_MS + 10_000)
            survives(swept)
    assert capfd.readouterr().err == ""  # nothing printed by the models either
    decision, judged = judge(state, request, NOW_MS, Policy(), THREAD)
    assert decision.verdict in (Verdict.FORWARD, Verdict.REJECT, Verdict.DUPLICATE)
    survives(judged)
