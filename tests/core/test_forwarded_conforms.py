"""Nothing is forwarded that the protocol's models would not read.

For every hostile input the judge forwards, the bytes the service would write
(`forward_bytes`: the input as received less what the judge stripped) are read
back and validated by the `ag-ui-protocol` package's own RunAgentInput, strictly
and by wire name as the gateway reads it, with no extra member left on any model.
The oracle is the package's models, not the gateway's typed-dict reading of them.
"""

from __future__ import annotations

import copy
from typing import Any

import orjson
import pytest
from ag_ui.core import RunAgentInput
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from gateway.codec.records import decode_json, forward_bytes
from gateway.core import Policy, Reason, Verdict, judge
from gateway.core.values.jsontext import to_json
from tests.core.factories import NOW_MS, RUN_1, THREAD, interrupt, run_started, state_of
from tests.core.test_shape_paths import WRONG, inputs, perturbed

SETTINGS = settings(
    max_examples=400,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def extras_left(model: Any) -> list[str]:
    """Names of the extra members any model in `model` kept (the gateway forbids them)."""
    found: list[str] = []
    stack = [model]
    while stack:
        node = stack.pop()
        if isinstance(node, BaseModel):
            found += list(node.__pydantic_extra__ or {})
            stack += [getattr(node, name) for name in type(node).model_fields]
        elif isinstance(node, list | tuple):
            stack += list(node)
    return found


def read_by_the_protocol(data: bytes) -> RunAgentInput:
    """The forward as the protocol's models read it, strictly and by wire name;
    raises when they would not read it."""
    model = RunAgentInput.model_validate(
        orjson.loads(data), strict=True, by_alias=True, by_name=False
    )
    assert extras_left(model) == [], "an unknown member was forwarded"
    return model


OPEN = state_of(
    run_started(),
    {
        "type": "RUN_FINISHED",
        "threadId": THREAD,
        "runId": RUN_1,
        "outcome": {"type": "interrupt", "interrupts": [interrupt("a"), interrupt("b")]},
    },
)
STATES = [None, OPEN]

# content parts and sources a hostile client sends: tags the protocol does not define,
# members missing or wrongly typed, sources of every kind
_SOURCES = st.one_of(
    st.sampled_from(
        [
            {"type": "s3", "value": "v"},
            {"type": "url", "value": "u"},
            {"type": "data", "value": "d", "mimeType": "image/png"},
            {"type": "file", "value": "f"},
            {"type": "", "value": "v"},
            {"value": "v"},
        ]
    ).flatmap(perturbed),
    WRONG,
)
_PARTS = st.builds(
    lambda kind, source: {"type": kind, "source": source},
    st.sampled_from(["image", "audio", "video", "document", "holo"]),
    _SOURCES,
).flatmap(perturbed)


@st.composite
def hostile_inputs(draw: Any) -> dict[str, Any]:
    raw = draw(inputs())
    messages = raw.get("messages")
    if isinstance(messages, list) and draw(st.booleans()):
        role = draw(st.sampled_from(["user", "tool"]))
        message: dict[str, Any] = {"id": "h", "role": role}
        if role == "tool":
            message["toolCallId"] = "c"
        message["content"] = draw(st.lists(_PARTS, min_size=1, max_size=3))
        messages.insert(draw(st.integers(0, len(messages))), message)
    if draw(st.booleans()):
        raw["resume"] = draw(
            st.lists(
                st.fixed_dictionaries(
                    {
                        "interruptId": st.sampled_from(["a", "b", "c"]),
                        "status": st.sampled_from(["resolved", "cancelled"]),
                    }
                ).flatmap(perturbed),
                max_size=4,
            )
        )
    return raw


@SETTINGS
@given(raw=hostile_inputs(), state=st.sampled_from(STATES), strict=st.booleans())
def test_every_forward_is_read_by_the_protocols_models(raw, state, strict):
    data = to_json(raw)
    pristine = copy.deepcopy(raw)
    decision, _ = judge(state, decode_json(data), NOW_MS, Policy(strict))
    assert raw == pristine
    decision, forward = forward_bytes(decision, data)
    if decision.verdict is not Verdict.FORWARD:
        return
    assert forward is not None
    read_by_the_protocol(forward)


# the campaign's finds (fuzzing, "forwarded_malformed"), each once by hand
S3 = [{"type": "image", "source": {"type": "s3", "value": "v"}}]


@pytest.mark.parametrize(
    "messages",
    [
        [{"id": "m", "role": "user", "content": S3}],
        [{"id": "m", "role": "tool", "toolCallId": "c", "content": S3}],
        [{"id": "r", "role": "robot"}, {"id": "m", "role": "user", "content": S3}],
        [
            {
                "id": "m",
                "role": "user",
                "content": [{"type": "holo"}, {"type": "text", "text": "t"}, *S3],
            }
        ],
    ],
)
def test_a_required_member_is_never_stripped_the_input_is_malformed(messages):
    raw = {"threadId": THREAD, "runId": "r2", "messages": messages}
    decision, _ = judge(None, raw, NOW_MS, Policy(), THREAD)
    assert decision.verdict is Verdict.REJECT
    assert {r.code for r in decision.reasons} == {str(Reason.MALFORMED_INPUT)}
    source = [r for r in decision.reasons if r.path and r.path.endswith("/source")]
    assert len(source) == 1
    # pointed at in the input as received (the robot message before it still counted)
    at = source[0].path
    node: Any = raw
    for part in at.strip("/").split("/"):
        node = node[int(part)] if isinstance(node, list) else node[part]
    assert node == {"type": "s3", "value": "v"}
    assert "'s3'" in source[0].detail and "required" in source[0].detail
    assert decision.warnings == ()  # nothing was stripped: nothing is forwarded


def test_an_unrecognised_source_is_stripped_with_its_content_part():
    """A part whose own tag is unrecognised is stripped whole, source and all."""
    part = {"type": "holo", "source": {"type": "s3", "value": "v"}}
    raw = {"threadId": THREAD, "runId": "r2", "messages": [{"id": "m", "role": "user"}]}
    raw["messages"][0]["content"] = [part, {"type": "text", "text": "t"}]
    decision, _ = judge(None, raw, NOW_MS, Policy(), THREAD)
    assert decision.verdict is Verdict.FORWARD
    data = forward_bytes(decision, to_json(raw))[1]
    assert data is not None
    assert read_by_the_protocol(data).messages[0].content[0].text == "t"  # type: ignore[union-attr]


def test_a_forward_less_unrecognised_resume_entries_is_checked_too(monkeypatch):
    """The judge strips resume entries naming no open interrupt after the reading: the
    forward it then builds is checked again, and one the models would not read (made
    so here: no schema of the protocol constrains the resume list) is rejected."""
    import sys

    from gateway.core.reading.shape import conforms

    judge_module = sys.modules[
        "gateway.core.requests.judge"
    ]  # (the package exports `judge` itself)

    checked: list[Any] = []

    def refusing(shape, raw, doc, removed, notes=None):  # type: ignore[no-untyped-def]
        assert conforms(shape, raw, doc, removed, notes)  # the real check reads it
        checked.append(doc)
        shape.malformed = [("/resume", "/resume: refused here")]
        return False

    raw = {
        "threadId": THREAD,
        "runId": "r2",
        "messages": [],
        "resume": [
            {"interruptId": "x", "status": "cancelled"},
            {"interruptId": "a", "status": "resolved"},
            {"interruptId": "b", "status": "cancelled"},
        ],
    }
    decision, _ = judge(OPEN, raw, NOW_MS, Policy(), THREAD)
    assert decision.verdict is Verdict.FORWARD and [*decision.removed] == [("resume", 0)]
    monkeypatch.setattr(judge_module, "conforms", refusing)
    refused, state = judge(OPEN, raw, NOW_MS, Policy(), THREAD)
    assert checked == [decision.input]
    assert refused.verdict is Verdict.REJECT and state is OPEN
    assert [(r.code, r.path) for r in refused.reasons] == [(str(Reason.MALFORMED_INPUT), "/resume")]


def test_what_the_validator_returned_settles_only_a_copy_equal_to_it():
    """`conforms` given what `lenient` returned for the input (`read`): a copy equal to
    it is read without validating it again; one that is not (here a member the pass
    missed, left in) is validated as before, and found not to be what the models read."""
    from gateway.core.reading.input_schema import lenient
    from gateway.core.reading.shape import Shape, conforms

    raw = {
        "threadId": THREAD,
        "runId": "r2",
        "messages": [{"id": "m", "role": "user", "content": "x", "z": 1}],
    }
    read = lenient().validate_python(raw, strict=True)
    stripped = {**raw, "messages": [{"id": "m", "role": "user", "content": "x"}]}
    assert conforms(Shape(raw=raw), raw, stripped, [], read=read)
    missed = Shape(raw=raw)
    assert not conforms(missed, raw, raw, [], read=read)
    assert [where for where, _ in missed.malformed] == ["/messages/0/z"]
