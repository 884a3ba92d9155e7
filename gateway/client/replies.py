"""The gateway's replies, typed: what a service reads from its `agui-reply-to` topic.

The shapes follow what the gateway writes (README, "Records"): a reply is the
rejection record on `reject`; on `forward` the envelope with its warnings; on
`duplicate` the envelope alone. Codes are the gateway's public enums. Members
the gateway may add later are kept (`extra="allow"`), never an error.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from gateway.core.codes import Reason, Rule, Verdict, Warn


class _Record(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True, populate_by_name=True)


class Finding(_Record):
    """One reason or warning: `code`, `detail` and where it applies."""

    detail: str = ""
    interrupt_id: str | None = Field(default=None, alias="interruptId")
    path: str | None = None
    rule: Rule | str | None = None  # a protocol_violation's rule; unknown rules kept as text


class RejectionReason(Finding):
    code: Reason


class GatewayWarning(Finding):
    code: Warn


class _Envelope(_Record):
    agent: str | None  # None: a record on a group's topics that named no usable agent
    group: str | None = None  # the group whose topics carried the request, if any
    thread_id: str | None = Field(alias="threadId")
    run_id: str | None = Field(default=None, alias="runId")
    correlation_id: str | None = Field(default=None, alias="correlationId")
    at: str


class ForwardReply(_Envelope):
    """Sent to the agent's run-requests topic (possibly with material stripped)."""

    verdict: Literal[Verdict.FORWARD]
    warnings: list[GatewayWarning] = []
    warnings_omitted: int = Field(default=0, alias="warningsOmitted")


class RejectReply(_Envelope):
    """Not sent; `reasons` say why. The rejection record, as on the rejections topic."""

    verdict: Literal[Verdict.REJECT]
    reasons: list[RejectionReason]
    warnings: list[GatewayWarning] = []
    reasons_omitted: int = Field(default=0, alias="reasonsOmitted")
    warnings_omitted: int = Field(default=0, alias="warningsOmitted")
    input: Any = None  # the request as received (None when carried as text or omitted)
    input_text: str | None = Field(default=None, alias="inputText")
    input_base64: str | None = Field(default=None, alias="inputBase64")
    input_omitted: str | None = Field(default=None, alias="inputOmitted")
    source: dict[str, Any] | None = None

    def codes(self) -> list[Reason]:
        return [reason.code for reason in self.reasons]


class DuplicateReply(_Envelope):
    """Equal to a request already forwarded: acknowledged, not sent again."""

    verdict: Literal[Verdict.DUPLICATE]


Reply = Annotated[ForwardReply | RejectReply | DuplicateReply, Field(discriminator="verdict")]

_REPLY: TypeAdapter[ForwardReply | RejectReply | DuplicateReply] = TypeAdapter(Reply)


def parse_reply(value: bytes | str | dict[str, Any]) -> ForwardReply | RejectReply | DuplicateReply:
    """A reply record's value as its typed model (pydantic.ValidationError if it is none)."""
    if isinstance(value, dict):
        return _REPLY.validate_python(value)
    return _REPLY.validate_json(value)
