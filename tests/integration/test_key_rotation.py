"""A signing key rotated while requests flow, on the real broker: the gateway reads its
trusted keys file again as it changes (new key added, signers switched, old key
dropped), and no request signed by a key trusted at the time is refused."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pytest

from gateway.client import ForwardReply, GatewayClient, Identity, RejectReply, Signer
from gateway.kafka.wire.attestation import generate_key
from tests.integration.inprocess import interrupted, running, settings_for
from tests.integration.support import Namespace, produce

pytestmark = pytest.mark.integration

AGENT = "vault"
ALICE = Identity("alice", ("approvers",))


def key(tmp_path: Path, key_id: str) -> Signer:
    pem, _ = generate_key()
    (tmp_path / f"{key_id}.pem").write_bytes(pem)
    return Signer.from_file(key_id, tmp_path / f"{key_id}.pem")


def trust(path: Path, *signers: Signer) -> None:
    """Rewrite the trusted keys file at once (a rename), as an operator's tool would."""
    staged = path.with_suffix(".new")
    staged.write_text(json.dumps({s.key_id: s.public_key() for s in signers}))
    os.replace(staged, path)


def answer(thread: str) -> dict:
    resume = [{"interruptId": "a", "status": "resolved"}]
    return {"threadId": thread, "runId": f"{thread}-r2", "messages": [], "resume": resume}


async def test_a_key_rotates_under_traffic_without_refusing_a_request(
    kafka_bootstrap: str, create_topics, tmp_path: Path
) -> None:
    ns = Namespace(kafka_bootstrap)
    await ns.create_agent(AGENT, partitions=2)
    [replies] = await create_topics([f"{ns.prefix}.replies"], partitions=1)
    old, new = key(tmp_path, "edge-old"), key(tmp_path, "edge-new")
    keys = tmp_path / "trusted.json"
    trust(keys, old)
    threads = [f"t-{i}" for i in range(60)]
    for thread in threads + ["t-late"]:
        await produce(ns.bootstrap, ns.events(AGENT), interrupted(thread))
    settings = settings_for(
        ns,
        approvers=[{"agent": AGENT, "answer_groups": ["approvers"]}],
        attest_trusted_keys_file=keys,
        attest_keys_reload_s=0.1,
    )
    client_settings = settings.model_copy(update={"group_id": "unused"})
    replies_seen: list[object] = []
    async with running(settings):
        async with (
            GatewayClient(reply_topic=replies, settings=client_settings, signer=old) as by_old,
            GatewayClient(reply_topic=replies, settings=client_settings, signer=new) as by_new,
        ):
            signer = by_old

            async def traffic(batch: list[str]) -> None:
                for thread in batch:
                    replies_seen.append(
                        await signer.send(AGENT, answer(thread), 60, identity=ALICE)
                    )
                    await asyncio.sleep(0.01)

            first = asyncio.create_task(traffic(threads[:20]))
            await asyncio.sleep(0.1)
            trust(keys, old, new)  # 1. trust the new key, while the old one signs
            await first
            await asyncio.sleep(0.5)  # a few looks at the file
            signer = by_new  # 2. the signer switches
            await traffic(threads[20:40])
            second = asyncio.create_task(traffic(threads[40:]))
            trust(keys, new)  # 3. the old key dropped, while the new one signs
            await second
            await asyncio.sleep(0.5)
            late = await by_old.send(AGENT, answer("t-late"), 60, identity=ALICE)
    assert len(replies_seen) == len(threads)
    refused = [r for r in replies_seen if not isinstance(r, ForwardReply)]
    assert refused == []
    # a request signed by the dropped key is no longer believed
    assert isinstance(late, RejectReply)
    assert late.codes() == ["approver_unverified"]
    assert "edge-old" in late.reasons[0].detail
