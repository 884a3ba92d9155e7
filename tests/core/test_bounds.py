"""Hostile requests: judged within bounds, never raising, no verdict resting on an exception.

The corpus (tests/core/hostile.py) holds the worst shapes found by the hostile-input
campaign. Each took seconds (up to 27 s) before its class was bounded; the README's
"Limits" gives the measured cost of each today against the 50 ms goal.
"""

from __future__ import annotations

import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.codec.records import Undecodable, decode_json
from gateway.core import Verdict, Warn, judge
from gateway.core.response_schema import prepare
from tests.core.hostile import APPROVAL, CASES, THREAD, chain, interrupted_with, nested

# A guard, not the goal: each of these shapes cost 2 s to 27 s of CPU before its fix; the
# slowest now costs ~0.13 s on a loaded 2-core machine (README, "Limits"). The best of three
# runs is compared, so one preempted run does not fail the test.
CPU_GUARD_S = 1.0


def judged(data: bytes, schema: object):
    state = interrupted_with(schema)
    try:
        raw = decode_json(data)
    except Undecodable:
        return None
    return judge(state, raw, 10, thread_id=THREAD)[0]


@pytest.mark.parametrize("name", list(CASES))
def test_every_hostile_record_is_judged_within_the_cpu_guard(name):
    schema, build = CASES[name]
    data = build()
    assert len(data) <= 1_000_000
    best = float("inf")
    for _ in range(3):
        start = time.process_time()
        judged(data, schema)
        best = min(best, time.process_time() - start)
    assert best < CPU_GUARD_S, f"{name}: {best * 1000:.0f} ms of CPU"


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
def test_no_exception_escapes_judge_and_no_verdict_rests_on_one(schema, msgs, resume, extra):
    raw = {"threadId": THREAD, "runId": "r2", "messages": msgs, "resume": resume, **extra}
    state = interrupted_with(schema)
    decision, _ = judge(state, raw, 10, thread_id=THREAD)
    again, _ = judge(state, raw, 10, thread_id=THREAD)
    assert decision == again
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
