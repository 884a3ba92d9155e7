"""Hostile records: judged within a CPU budget, never raising, no verdict resting on an exception.

The corpus (tests/core/hostile.py) holds the worst shapes found by the hostile-input
campaign, and the 1 MB record limit filled with what costs most per byte. Each is
judged as the service judges it (decoded from bytes, judged by the core, a forward's
bytes built).

The budget is a ratio, not a time: tests assert no clock readings. The unit of work
is measured in the same test, on the same machine, just before: orjson reading 1 MB
of small JSON objects (the decode every full-size record needs at least). The goal,
50 ms of CPU per record on the reference 2-core machine, is `BUDGET_UNITS` of that
work there (one unit measured 12 to 16 ms on it); the assertion allows
`MACHINE_FACTOR` more, for machines whose Python and orjson speeds differ more. CPU
time (`time.process_time`), best of five runs, so a preempted run does not count.
`python -m tests.core.hostile` prints every case's milliseconds and units.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.core import Verdict, Warn, judge
from gateway.core.reading.response_schema import prepare
from gateway.core.values.jsontext import to_json
from tests.core.hostile import (
    APPROVAL,
    EVENTS,
    REQUESTS,
    THREAD,
    active,
    apply,
    as_the_service,
    chain,
    cpu,
    interrupted_with,
    judge_request,
    nested,
    reference_record,
    units,
)

BUDGET_UNITS = 3.5  # 50 ms / ~14 ms, the unit on the reference machine
MACHINE_FACTOR = 2.5
# Shapes still over the goal (docs/concepts/limits.md, "CPU per record"): none. The last
# two left it: the flood of unrecognised image sources (the pass lists each in the list's
# own loop and copies nothing once a required member is listed) and the flood of members
# the gateway strips (what the validator returned for the input is not validated again
# once they are out). A shape listed here is held to the regression guard, not the goal.
OVER_GOAL: set[str] = set()
# ~0.5 s on the reference machine, five times the worst shape when shapes were last
# listed here (7.5 units, with the collector set as the service sets it): the
# seconds-long blow-ups of the campaign stay gone
GUARD_UNITS = 40.0


@pytest.fixture(scope="module")
def reference() -> bytes:
    return reference_record()


@pytest.fixture(scope="module")
def unit(reference: bytes) -> float:
    return units(lambda: None, reference)[1]


def within(name: str, work: Callable[[], object], reference: bytes) -> None:
    limit = GUARD_UNITS if name in OVER_GOAL else BUDGET_UNITS * MACHINE_FACTOR
    with as_the_service():  # the collector as the service sets it
        spent, unit = units(work, reference)
    assert spent <= limit, (
        f"{name}: {spent:.1f} units of reference work (one unit {unit * 1000:.1f} ms here), "
        f"over {limit}"
    )


@pytest.mark.parametrize("name", list(REQUESTS))
def test_every_hostile_request_is_judged_within_its_budget(name, reference):
    schema, build = REQUESTS[name]
    data = build()
    assert len(data) <= 1_100_000  # the record limit (1 MiB), what a broker accepts
    state = interrupted_with(schema)
    within(name, lambda: judge_request(data, state), reference)


@pytest.mark.parametrize("name", list(EVENTS))
def test_every_hostile_event_is_applied_within_its_budget(name, reference):
    data = EVENTS[name]()
    assert len(data) <= 1_100_000
    state = active()
    within(name, lambda: apply(data, state), reference)


SCHEMAS = [
    APPROVAL,
    {**APPROVAL, "uniqueItems": True},
    {"pattern": "^(a+)+$"},
    {"items": {"type": "string"}},
    {"uniqueItems": True},
    chain("anyOf", 8),
    chain("anyOf", 16),
    {"$ref": "#"},
    {"pattern": "(?<=x)y"},
    {"type": 12},
]

json_values = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(min_value=-(10**30), max_value=10**30),
        st.floats(allow_nan=False, allow_infinity=False),
        st.text(max_size=30),
        st.just("a" * 40 + "!"),
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=5), st.dictionaries(st.text(max_size=5), inner, max_size=5)
    ),
    max_leaves=30,
)
deep_values = st.builds(nested, st.integers(0, 990), json_values)
tags = st.one_of(
    st.sampled_from(["user", "assistant", "robot", "image", "text", "data"]),
    st.builds(nested, st.integers(1, 990), st.just("user")),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
    st.integers(),
)
messages = st.lists(
    st.fixed_dictionaries(
        {"id": st.text(max_size=4), "role": tags},
        optional={
            "content": st.one_of(
                st.text(max_size=5),
                st.lists(st.fixed_dictionaries({"type": tags, "text": st.text(max_size=3)})),
            ),
            "extra": json_values,
        },
    ),
    max_size=6,
)
entries = st.lists(
    st.fixed_dictionaries(
        {
            "interruptId": st.sampled_from(["a", "b"]),
            "status": st.sampled_from(["resolved", "cancelled", 5]),
        },
        optional={"payload": st.one_of(json_values, deep_values)},
    ),
    max_size=3,
)


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    schema=st.sampled_from(SCHEMAS),
    msgs=messages,
    resume=entries,
    extra=st.dictionaries(
        st.sampled_from(["state", "tools", "unknown", "forwardedProps"]), json_values
    ),
)
def test_no_exception_escapes_judge_and_no_verdict_rests_on_one(schema, msgs, resume, extra, unit):
    raw = {"threadId": THREAD, "runId": "r2", "messages": msgs, "resume": resume, **extra}
    state = interrupted_with(schema)
    decision, _ = judge(state, raw, 10, thread_id=THREAD)
    again, _ = judge(state, raw, 10, thread_id=THREAD)
    assert decision == again
    # the record as the service reads it: within the budget, the same verdict
    data = to_json(raw)
    assert cpu(lambda: judge_request(data, state), runs=3) <= BUDGET_UNITS * MACHINE_FACTOR * unit
    read = judge_request(data, state)
    assert read is None or read.verdict is decision.verdict or len(data) > 1_000_000
    prepared = prepare(schema)
    unusable = [w for w in decision.warnings if w.code == str(Warn.RESPONSE_SCHEMA_UNUSABLE)]
    if prepared.validator is not None:
        # usable from the schema alone: no payload may turn the check off
        assert unusable == []
        if decision.verdict is Verdict.FORWARD:
            for entry in resume:
                if entry["interruptId"] == "a" and entry["status"] == "resolved":
                    assert prepared.validator.is_valid(entry.get("payload"))
    else:
        assert all(w.detail for w in unusable)
