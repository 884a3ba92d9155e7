"""The gateway's replies, typed: what a service reads from its `agui-reply-to` topic.

The shapes follow what the gateway writes (README, "Records"): a reply is the
rejection record on `reject`; on `forward` the envelope with its warnings; on
`duplicate` the envelope alone. Members the gateway may add later are kept
(`extra="allow"`), never an error.

Codes are the gateway's public enums (`Reason`, `Warn`, `Rule`), and a newer gateway
may add codes: a reason, warning or rule code this client does not know is kept as
its plain string (a known one is always the enum member), so a reply is never
unreadable for a code alone. Compare codes with `==` (`code == Reason.RUN_ACTIVE`),
and treat a code that is no member as "some other reason".
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from gateway.core.values.codes import Reason, Rule, Verdict, Warn


class _Record(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True, populate_by_name=True)


class Finding(_Record):
    """One reason or warning: `code`, `detail` and where it applies."""

    detail: str = ""
    interrupt_id: str | None = Field(default=None, alias="interruptId")
    path: str | None = None
    # Codes: the enum member when known, else the string as sent. Tried left to right: a
    # plain (smart) `Enum | str` union would pick str for every code, known ones too.
    rule: Rule | str | None = Field(default=None, union_mode="left_to_right")
    """A protocol_violation's rule: a `Rule`, or the rule as sent when this client does not
    know it."""


class RejectionReason(Finding):
    code: Reason | str = Field(union_mode="left_to_right")
    """A `Reason`, or the code as sent when this client does not know it."""


class GatewayWarning(Finding):
    code: Warn | str = Field(union_mode="left_to_right")
    """A `Warn`, or the code as sent when this client does not know it."""


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

    def codes(self) -> list[Reason | str]:
        """The reasons' codes: `Reason` members, and unknown codes as their strings."""
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
