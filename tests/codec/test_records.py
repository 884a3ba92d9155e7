"""The fast path and the full decode read every event record alike (gateway.codec.records)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.codec.records import Undecodable, decode_json, stream_type
from gateway.core import RunStatus, ThreadState, apply_event
from gateway.core.events.classify import KNOWN_TYPES, EventKind, classify

TYPES = sorted(KNOWN_TYPES) + ["NOT_A_TYPE"]
KEYS = ["type", "threadId", "runId", "delta", "messageId", "toolCallId", "outcome", "x"]

scalars = st.one_of(
    st.sampled_from(TYPES),
    st.sampled_from(['"type"', '\\"type\\"', "type", "\\", '\\"', "a\\\\"]),
    st.text(max_size=8),
    st.integers(),
    st.booleans(),
    st.none(),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.lists(st.tuples(st.sampled_from(KEYS), inner), max_size=4),  # an object, keys may repeat
    ),
    max_leaves=10,
)
spaces = st.sampled_from(["", " ", "\n "])


def text_of(value: object, draw_space: str) -> str:
    """JSON text of a generated value: an object is a list of (key, value) pairs, kept in order."""
    if isinstance(value, list) and value and all(isinstance(v, tuple) for v in value):
        members = (f"{json.dumps(k)}{draw_space}:{text_of(v, draw_space)}" for k, v in value)
        return "{" + ",".join(members) + "}"
    if isinstance(value, list):
        return "[" + ",".join(text_of(v, draw_space) for v in value) + "]"
    return json.dumps(value)


@st.composite
def records(draw) -> bytes:
    members = [("type", draw(st.sampled_from(TYPES)))]
    members += draw(st.lists(st.tuples(st.sampled_from(KEYS), values), max_size=5))
    if draw(st.booleans()):
        members.insert(draw(st.integers(0, len(members))), ("type", draw(st.sampled_from(TYPES))))
    space = draw(spaces)
    body = text_of(members, space)
    if draw(st.booleans()):  # the common layout the fast path looks for
        body = body.replace(f'"type"{space}:', '"type":', 1)
    return body.encode()


ACTIVE = ThreadState("t1", RunStatus.ACTIVE, "r1")


@settings(max_examples=300, deadline=None)
@given(records())
def test_the_fast_path_and_the_full_decode_agree_on_every_record(value):
    fast = stream_type(value)
    try:
        event = decode_json(value)
    except Undecodable:
        event = None  # unreadable (a duplicate member name among others): dropped
    if event is not None:
        kind = classify(event.get("type"))
        outcome = apply_event(ACTIVE, "t1", event, 1)
        if kind is not EventKind.STREAM:
            assert fast is None  # a state-changing (or unknown) event is never merely counted
        elif fast is not None:
            assert fast == event["type"]
            assert outcome.state == ACTIVE  # counting it changes nothing the decode would
    # unreadable by the full decode: the fast path, if it counts it, counts a streaming
    # type that the full decode drops; neither changes the thread's state


@pytest.mark.parametrize(
    "value",
    [
        b'{"type":"TOOL_CALL_END","toolCallId":"x","type":"RUN_FINISHED","runId":"r1"}',
        b'{"type":"TEXT_MESSAGE_CONTENT","delta":"a","type" :"RUN_ERROR","message":"m"}',
        b'{"type":"TEXT_MESSAGE_CONTENT","delta":"\\\\","type":"RUN_ERROR","message":"m"}',
    ],
)
def test_a_second_type_is_never_taken_by_the_fast_path_and_is_unreadable(value):
    assert stream_type(value) is None
    with pytest.raises(Undecodable, match="same member twice"):
        decode_json(value)


def test_a_single_streaming_event_takes_the_fast_path():
    value = b'{"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":"say \\"type\\" twice"}'
    assert stream_type(value) == "TEXT_MESSAGE_CONTENT"
    assert decode_json(value)["type"] == "TEXT_MESSAGE_CONTENT"
