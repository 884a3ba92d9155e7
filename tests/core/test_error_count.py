"""A flood's errors counted without the validator, and read window by window, as the
validator reports them.

`error_count.counter` counts what `SchemaValidator.validate_python(value, strict=True)`
reports without building the errors; `shape._Windows` reads them window by window of
messages. Over generated inputs shaped like RunAgentInput (tests/core/test_shape_paths.py),
the count is the validator's own, and an input read with windows of one message (every
input of more than one message is then read so) reads exactly as one validation of it
all: the same findings, the same count of the errors past the listed ones.
"""

from __future__ import annotations

from typing import Any
from unittest import mock

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError
from pydantic_core import SchemaValidator

from gateway.core.reading import shape as shape_module
from gateway.core.reading.error_count import Unsure, counter
from gateway.core.reading.input_schema import lenient, lenient_count, schema, validator
from gateway.core.reading.shape import read_input
from tests.core.test_shape_paths import WRONG, inputs, message

SETTINGS = settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def errors_of(checker: SchemaValidator, raw: Any) -> int:
    try:
        checker.validate_python(raw, strict=True)
    except ValidationError as exc:
        return exc.error_count()
    return 0


@SETTINGS
@given(inputs())
def test_the_count_is_the_lenient_validators(raw):
    count = lenient_count()
    assert count is not None
    try:
        counted = count(raw)
    except Unsure:
        assume(False)
    assert counted == errors_of(lenient(), raw)


@SETTINGS
@given(inputs())
def test_the_count_is_the_strict_validators(raw):
    try:
        counted = counter(schema())(raw)
    except Unsure:
        assume(False)
    assert counted == errors_of(validator(), raw)


@SETTINGS
@given(st.one_of(WRONG, st.dictionaries(st.sampled_from(["threadId", "messages"]), WRONG)))
def test_the_count_of_any_value_is_the_validators(raw):
    try:
        counted = counter(schema())(raw)
    except Unsure:
        assume(False)
    assert counted == errors_of(validator(), raw)


def test_a_schema_it_does_not_count_is_left_to_the_validator():
    with pytest.raises(Unsure):
        counter({"type": "str", "max_length": 3})
    with pytest.raises(Unsure):
        counter({"type": "int"})


def fields_of(shape: shape_module.Shape) -> tuple[Any, ...]:
    return (
        shape.model,
        shape.malformed,
        shape.unlisted,
        shape.unknown,
        shape.stripped_unions,
        shape.removed,
    )


@st.composite
def long_inputs(draw: Any) -> dict[str, Any]:
    """An input of several messages (each window then holds one), floods of the same
    message now and then."""
    raw = draw(inputs())
    messages = draw(st.lists(message(), min_size=2, max_size=8))
    if draw(st.booleans()):
        messages = messages * draw(st.integers(2, 6))
    raw["messages"] = messages
    return raw


@SETTINGS
@given(long_inputs(), st.sampled_from([1, 2, 3, 50]), st.integers(0, 300))
def test_errors_read_window_by_window_read_alike(raw, listed, many):
    """Windows of one message, a few locations listed (so that the count past them is
    read from any window), floods or not: as the errors of one validation."""
    with (
        mock.patch.object(shape_module, "MAX_MALFORMED", listed),
        mock.patch.object(shape_module, "MANY_ERRORS", many),
        mock.patch.object(shape_module, "ERRORS_AT_ONCE", 2),
    ):
        with mock.patch.object(shape_module, "lenient_count", lambda: None):
            reference = read_input(raw)
        with mock.patch.object(shape_module, "WINDOW", 1):
            windowed = read_input(raw)
    assert fields_of(windowed) == fields_of(reference)


def test_windows_are_read_for_a_flood():
    """The long inputs above are read window by window (the test is not vacuous)."""
    made: list[int] = []
    windows = shape_module._Windows

    def recorded(raw: Any, count: int) -> Any:
        made.append(count)
        return windows(raw, count)

    raw = {
        "threadId": "t",
        "runId": "r",
        "messages": [{"id": 1, "role": "user", "content": 1}] * 600,
        "tools": [{"name": 1}],
    }
    with mock.patch.object(shape_module, "_Windows", recorded):
        shape = read_input(raw)
    assert made == [errors_of(lenient(), raw)]
    assert shape.model is None
    assert shape.malformed[-1][0] == "/messages/24/content"  # two locations a message
    assert shape.unlisted == made[0] - 25 * 3  # three errors a message: id, content twice
