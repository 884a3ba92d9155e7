"""A typed client for services that publish run requests through the gateway."""

from gateway.client.client import GatewayClient, encode_input, typed_event
from gateway.client.errors import (
    GatewayClientError,
    InvalidRunInput,
    ReplyTimeout,
    RequestDuplicate,
    RequestRejected,
    UnknownAgent,
)
from gateway.client.rendezvous import ReplyTopicMissing, UnreadableReply
from gateway.client.replies import (
    DuplicateReply,
    ForwardReply,
    GatewayWarning,
    RejectionReason,
    RejectReply,
    Reply,
    parse_reply,
)
from gateway.client.runs import RunEvent, RunNotStarted, RunOverflow, RunStreamError, RunTimedOut
from gateway.core.values.identity import Identity
from gateway.kafka.wire.attestation import AttestationError, Signer

__all__ = [
    "AttestationError",
    "Identity",
    "Signer",
    "DuplicateReply",
    "ForwardReply",
    "GatewayClient",
    "GatewayClientError",
    "GatewayWarning",
    "InvalidRunInput",
    "RejectReply",
    "RejectionReason",
    "ReplyTimeout",
    "ReplyTopicMissing",
    "Reply",
    "RequestDuplicate",
    "RequestRejected",
    "RunEvent",
    "RunNotStarted",
    "RunOverflow",
    "RunStreamError",
    "RunTimedOut",
    "UnknownAgent",
    "UnreadableReply",
    "encode_input",
    "parse_reply",
    "typed_event",
]
