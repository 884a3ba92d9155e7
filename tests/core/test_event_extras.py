"""An event's unknown members taken out before its models validate it
(gateway.core.reading.extras) change nothing: over generated lifecycle events with unknown
members at every level (members named like a field by its Python name too, and
malformed values), applying the event gives the same state, change and warnings as
the protocol's models validating the whole event and keeping the members as extras.
"""

from __future__ import annotations

from typing import Any
from unittest import mock

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.core import apply_event
from gateway.core.events import step as step_module
from gateway.core.reading.extras import without_extras
from tests.core.factories import RUN_1, THREAD, run_started

SETTINGS = settings(
    max_examples=400,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# unknown names, and a field's Python name (read by the models as well as its alias)
EXTRA_NAMES = st.sampled_from(["z", "q", "thread_id", "run_id", "expires_at", "interrupts", "id"])
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.text(max_size=3))


@st.composite
def perturbed(draw: Any, base: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    if draw(st.integers(0, 7)) == 0 and out:
        out[draw(st.sampled_from(sorted(out)))] = draw(SCALARS)  # a value of the wrong type
    for name in draw(st.lists(EXTRA_NAMES, max_size=3, unique=True)):
        if name not in base:
            out[name] = draw(SCALARS)
    return out


def interrupts() -> st.SearchStrategy[list[dict[str, Any]]]:
    one = st.builds(
        lambda n, schema: {"id": f"i{n}", "reason": "r", **schema},
        st.integers(0, 3),
        st.sampled_from([{}, {"responseSchema": {"type": "object"}}, {"expiresAt": "x"}]),
    ).flatmap(perturbed)
    return st.lists(one, min_size=0, max_size=3)


def outcomes() -> st.SearchStrategy[Any]:
    interrupt = interrupts().flatmap(lambda i: perturbed({"type": "interrupt", "interrupts": i}))
    plain = st.sampled_from([{"type": "success"}, {"type": "cancelled"}, {"type": "later"}])
    return st.one_of(interrupt, plain.flatmap(perturbed), st.none(), SCALARS)


def events() -> st.SearchStrategy[dict[str, Any]]:
    finished = outcomes().flatmap(
        lambda o: perturbed(
            {"type": "RUN_FINISHED", "threadId": THREAD, "runId": RUN_1, "outcome": o}
        )
    )
    started = st.just({"type": "RUN_STARTED", "threadId": THREAD, "runId": "r9"}).flatmap(perturbed)
    error = st.just({"type": "RUN_ERROR", "message": "m"}).flatmap(perturbed)
    sub_started = st.just({"type": "SUBAGENT_STARTED", "subagentRunId": "s", "name": "n"})
    sub_finished = outcomes().flatmap(
        lambda o: perturbed({"type": "SUBAGENT_FINISHED", "subagentRunId": "s", "outcome": o})
    )
    return st.one_of(finished, started, error, sub_started.flatmap(perturbed), sub_finished)


def whole(model: Any, event: Any, found: dict[Any, list[str]]) -> Any:
    return event  # the models validate the whole event, keeping its unknown members


def outcome_of(event: dict[str, Any], taken_out: bool) -> Any:
    state = apply_event(None, THREAD, run_started(), 1).state
    if taken_out:
        return apply_event(state, THREAD, event, 2)
    with mock.patch.object(step_module, "without_extras", whole):
        return apply_event(state, THREAD, event, 2)


@SETTINGS
@given(events())
def test_taking_unknown_members_out_first_changes_nothing(event):
    assert outcome_of(event, True) == outcome_of(event, False)


def test_the_members_taken_out_are_the_unknown_ones_at_every_level():
    from ag_ui.core import RunFinishedEvent

    event = {
        "type": "RUN_FINISHED",
        "z": 1,
        "threadId": THREAD,
        "runId": RUN_1,
        "outcome": {
            "type": "interrupt",
            "q": 2,
            "interrupts": [{"id": "a", "reason": "r", "w": 3}],
        },
    }
    found: dict[Any, list[str]] = {}
    stripped = without_extras(RunFinishedEvent, event, found)
    assert found == {(): ["z"], ("outcome",): ["q"], ("outcome", "interrupts", 0): ["w"]}
    assert stripped["outcome"]["interrupts"][0] == {"id": "a", "reason": "r"}
    assert "z" not in stripped and event["z"] == 1  # the event itself is left as it was
    # a field named both by alias and by Python name: the model decides, nothing taken out
    both = {**event, "thread_id": "other", "outcome": None}
    found = {}
    assert without_extras(RunFinishedEvent, both, found) is both and found == {}


@SETTINGS
@given(events(), st.integers(0, 4))
def test_a_flood_of_unknown_members_is_counted_and_its_first_ones_listed(event, limit):
    from ag_ui.core import RunFinishedEvent, SubagentFinishedEvent
    from pydantic import ValidationError

    from gateway.core.reading.strip import unknown_members

    model = {"RUN_FINISHED": RunFinishedEvent, "SUBAGENT_FINISHED": SubagentFinishedEvent}.get(
        event["type"]
    )
    if model is None:
        return
    found: dict[Any, list[str]] = {}
    try:
        parsed = model.model_validate(without_extras(model, event, found), strict=True)
    except ValidationError:
        return
    every: list[Any] = []
    first: list[Any] = []
    assert unknown_members(parsed, event, (), every, found) == len(every)
    assert unknown_members(parsed, event, (), first, found, limit) == len(every)
    assert first == every[:limit]
