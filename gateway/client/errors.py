"""What `GatewayClient` raises, each a type of its own."""

from __future__ import annotations

from gateway.client.replies import DuplicateReply, RejectReply


class GatewayClientError(Exception):
    """Base of the client's errors."""


class InvalidRunInput(GatewayClientError, ValueError):
    """The input cannot be published: not an object, or no string `threadId`/`runId`."""


class UnknownAgent(GatewayClientError, LookupError):
    """The agent's requests topic does not exist (or its name is not a legal agent name)."""


class ReplyTimeout(GatewayClientError, TimeoutError):
    """No verdict within the timeout. The gateway still decides the request exactly once;
    its reply, when it comes, is dropped by this client."""

    def __init__(self, correlation_id: str, timeout: float) -> None:
        super().__init__(f"no reply for correlation id {correlation_id!r} within {timeout:g} s")
        self.correlation_id = correlation_id
        self.timeout = timeout


class RequestRejected(GatewayClientError):
    """The gateway rejected the request; `reply` is the rejection record."""

    def __init__(self, reply: RejectReply) -> None:
        codes = ", ".join(str(code) for code in reply.codes())
        super().__init__(f"rejected by the gateway: {codes}")
        self.reply = reply


class RequestDuplicate(GatewayClientError):
    """The request equals one already forwarded: it was not sent again, so no new run
    follows it. `reply` is the duplicate reply."""

    def __init__(self, reply: DuplicateReply) -> None:
        super().__init__(f"duplicate of run {reply.run_id!r}, already forwarded")
        self.reply = reply
