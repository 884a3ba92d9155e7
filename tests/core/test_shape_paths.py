"""Every path of `read_input` reads an input exactly as the strict validator's errors do.

`read_input` first validates ignoring extra members, then lists extra members and
unrecognised union elements by one walk that also builds the input without them;
`read_by_errors` reads every error of the validator that forbids extra members (the
protocol's own schema, checked against the protocol's models in test_shape.py). Over
generated inputs shaped like RunAgentInput (extra members, unrecognised tags and
malformed values anywhere), both give the same verdict, the same findings in the same
order, and the walk's copy is the input less exactly those members, in the same order.
"""

from __future__ import annotations

from typing import Any
from unittest import mock

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.core.reading import shape as shape_module
from gateway.core.reading.shape import read_by_errors, read_input, remove_paths
from gateway.core.values.jsontext import to_json

SETTINGS = settings(
    max_examples=400,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# member names an object may gain: some are field or tag names elsewhere in the schema
EXTRA_NAMES = st.sampled_from(["z", "user", "type", "role", "content", "id", "text", "x1"])
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-5, 5), st.text(max_size=3))
WRONG = st.one_of(st.integers(), st.lists(SCALARS, max_size=2), st.none(), st.booleans())


@st.composite
def perturbed(draw: Any, base: dict[str, Any]) -> dict[str, Any]:
    """`base` with, now and then, extra members, a field dropped or wrongly typed."""
    out = dict(base)
    if draw(st.integers(0, 9)) == 0 and out:
        victim = draw(st.sampled_from(sorted(out)))
        if draw(st.booleans()):
            del out[victim]
        else:
            out[victim] = draw(WRONG)
    for name in draw(st.lists(EXTRA_NAMES, max_size=2, unique=True)):
        if name not in base:
            out[name] = draw(SCALARS)
    return out


def source() -> st.SearchStrategy[dict[str, Any]]:
    return st.sampled_from(
        [
            {"type": "url", "value": "u"},
            {"type": "data", "value": "d", "mimeType": "image/png"},
            {"type": "ftp", "value": "x"},
        ]
    ).flatmap(perturbed)


def part() -> st.SearchStrategy[dict[str, Any]]:
    text = st.just({"type": "text", "text": "t"}).flatmap(perturbed)
    image = source().flatmap(lambda s: perturbed({"type": "image", "source": s}))
    holo = st.just({"type": "holo", "z": 1})
    return st.one_of(text, image, holo)


def message() -> st.SearchStrategy[dict[str, Any]]:
    content = st.one_of(st.just("x"), st.lists(part(), max_size=3))
    call = st.just({"id": "c", "type": "function", "function": {"name": "f", "arguments": ""}})
    user = content.flatmap(lambda c: perturbed({"id": "u", "role": "user", "content": c}))
    tool = content.flatmap(
        lambda c: perturbed({"id": "t", "role": "tool", "toolCallId": "c", "content": c})
    )
    assistant = st.lists(call.flatmap(perturbed), max_size=2).flatmap(
        lambda calls: perturbed({"id": "a", "role": "assistant", "toolCalls": calls})
    )
    other = st.sampled_from(
        [
            {"id": "s", "role": "system", "content": "x"},
            {"id": "r", "role": "robot", "content": "x"},
            {"id": "d", "role": 5, "content": "x"},
        ]
    ).flatmap(perturbed)
    return st.one_of(user, tool, assistant, other)


@st.composite
def inputs(draw: Any) -> dict[str, Any]:
    resume = st.lists(
        st.just({"interruptId": "a", "status": "resolved", "payload": {"z": 1}}).flatmap(perturbed),
        max_size=2,
    )
    base: dict[str, Any] = {
        "threadId": "t",
        "runId": "r",
        "messages": draw(st.lists(message(), max_size=5)),
    }
    if draw(st.booleans()):
        base["resume"] = draw(resume)
    if draw(st.booleans()):
        base["tools"] = draw(
            st.lists(
                st.just({"name": "n", "description": "d", "parameters": {}}).flatmap(perturbed)
            )
        )
    if draw(st.booleans()):
        base["context"] = draw(
            st.lists(st.just({"description": "d", "value": "v"}).flatmap(perturbed), max_size=2)
        )
    return draw(perturbed(base))


def same_reading(raw: dict[str, Any]) -> None:
    fast, reference = read_input(raw), read_by_errors(raw)
    assert fast.model == reference.model
    assert fast.malformed == reference.malformed
    assert fast.unknown == reference.unknown
    assert fast.stripped_unions == reference.stripped_unions
    assert fast.removed == reference.removed
    if fast.stripped is not None:
        expected = remove_paths(raw, [*reference.removed, *reference.unknown])
        assert to_json(fast.stripped) == to_json(expected)  # member order included


@SETTINGS
@given(inputs())
def test_every_reading_path_equals_the_strict_validators_errors(raw):
    same_reading(raw)


@SETTINGS
@given(inputs())
def test_the_one_pass_for_floods_equals_the_strict_validators_errors(raw):
    with mock.patch.object(shape_module, "MANY_ERRORS", 0):  # every error count is a flood
        same_reading(raw)


def test_the_generated_inputs_reach_every_path():
    """The generator is not vacuous: each reading path is taken by some example."""
    seen: set[str] = set()
    by_errors = shape_module._by_errors
    read: list[bool] = []  # whether the input was read error by error

    def recorded(*args: Any) -> Any:
        read.append(True)
        return by_errors(*args)

    @settings(max_examples=300, deadline=None, database=None)
    @given(inputs())
    def probe(raw: dict[str, Any]) -> None:
        read.clear()
        with mock.patch.object(shape_module, "_by_errors", recorded):
            shape = read_input(raw)
        if shape.model is None:
            seen.add("malformed")
        elif shape.stripped is raw:
            seen.add("clean")
        elif not read:
            seen.add("walked")
        else:
            seen.add("by errors")
        if shape.unknown:
            seen.add("unknown")
        if shape.stripped_unions:
            seen.add("unrecognised")

    probe()
    assert seen >= {"malformed", "clean", "walked", "by errors", "unknown", "unrecognised"}


@SETTINGS
@given(inputs())
def test_errors_read_from_the_validators_json_read_alike(raw):
    """Every input read as a flood, its errors from the validator's JSON two at a time
    (as 700 of them are read 256 at a time), reads as with its errors built at once."""
    reference = read_input(raw)
    with (
        mock.patch.object(shape_module, "MANY_ERRORS", 0),
        mock.patch.object(shape_module, "ERRORS_AT_ONCE", 2),
    ):
        sliced = read_input(raw)
    assert sliced.model == reference.model
    assert sliced.malformed == reference.malformed
    assert sliced.unlisted == reference.unlisted
    assert sliced.unknown == reference.unknown
    assert sliced.stripped_unions == reference.stripped_unions
    assert sliced.removed == reference.removed
