"""Sending an answer to the gateway, as any service sends a request: `GatewayClient`.

The answer goes to the agent's requests topic (its group's, for an agent of a group)
with the page's reply topic in `agui-reply-to`; the gateway judges it like every
other request and its verdict comes back on that topic. The page holds no other way
to an agent: it cannot write to a run-requests topic, so no rule can be bypassed.

An answer given by a person with a verified identity (`identity`) is attested: the
client signs it with the inbox's key (`attest_key_id`, `attest_private_key_file`,
through `GatewayClient`), so that the gateway, trusting that key, judges it with that
identity under the approver policy. Without an identity it goes unattested.

The client is started on the first answer (the reply topic is created then if
missing) and stopped by `aclose`.
"""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

from gateway.client import DuplicateReply, ForwardReply, GatewayClient, RejectReply
from gateway.core.values.identity import Identity
from gateway.settings import Settings

Verdict = ForwardReply | RejectReply | DuplicateReply


class AnswerSender(Protocol):
    async def send(
        self, agent: str, run_input: dict[str, Any], identity: Identity | None = None
    ) -> Verdict:
        """Publish `run_input` for `agent`, attesting `identity` when given; the
        gateway's verdict. Raises what `GatewayClient.send` raises (ReplyTimeout,
        UnknownAgent, KafkaError, AttestationError without a signing key)."""

    async def aclose(self) -> None:
        """Stop whatever `send` started."""


class KafkaSender:
    """An `AnswerSender` on the project's `GatewayClient`, started when first used."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._client: GatewayClient | None = None
        self._lock = asyncio.Lock()

    async def _started(self) -> GatewayClient:
        async with self._lock:
            if self._client is None:
                s = self.settings
                client = GatewayClient(
                    reply_topic=s.inbox_page_reply_topic,
                    create_reply_topic=True,
                    reply_topic_partitions=s.inbox_page_reply_partitions,
                    settings=s,
                )
                try:
                    await client.start()
                except BaseException:
                    await client.stop()  # what did start (the producer) is stopped
                    raise
                self._client = client
            return self._client

    async def send(
        self, agent: str, run_input: dict[str, Any], identity: Identity | None = None
    ) -> Verdict:
        client = await self._started()
        return await client.send(
            agent, run_input, timeout=self.settings.inbox_page_verdict_timeout_s, identity=identity
        )

    async def aclose(self) -> None:
        async with self._lock:
            if self._client is not None:
                await self._client.stop()
                self._client = None
