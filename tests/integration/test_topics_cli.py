"""`agui-gateway topics create` against the real broker."""

from __future__ import annotations

import asyncio

from tests.integration.support import GATEWAY_BIN, Namespace


async def run(ns: Namespace, *args: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        str(GATEWAY_BIN),
        "topics",
        "create",
        *args,
        env=ns.env(),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout=60)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def test_create_is_idempotent_and_reports_what_it_cannot_fix(kafka_bootstrap, create_topics):
    ns = Namespace(kafka_bootstrap)
    code, out, _ = await run(ns, "--agent", "alpha", "--partitions", "2")
    assert code == 0
    assert sorted(line.split()[0] for line in out.splitlines()) == ["created"] * 8
    code, out, _ = await run(ns, "--agent", "alpha", "--partitions", "2")
    assert code == 0 and {line.split()[0] for line in out.splitlines()} == {"exists"}

    await create_topics([ns.events("beta")], partitions=4)
    code, out, err = await run(ns, "--agent", "beta", "--partitions", "2")
    assert code == 1
    assert f"mismatch {ns.events('beta')}  (has 4 partitions, expected 2)" in out
    assert "cannot fix" in err
    await create_topics([ns.changelog("gamma")], partitions=2)  # created with delete policy
    code, out, _ = await run(ns, "--agent", "gamma", "--partitions", "2")
    assert code == 1 and "cleanup.policy is delete, expected compact" in out


async def test_invalid_agent_name_and_unreachable_kafka_are_clear_errors(kafka_bootstrap):
    ns = Namespace(kafka_bootstrap)
    code, _, err = await run(ns, "--agent", "no spaces", "--partitions", "1")
    assert code == 2 and "not a valid agent name" in err
    ns.bootstrap = "127.0.0.1:1"
    code, _, err = await run(ns, "--agent", "ok", "--partitions", "1")
    assert code == 2 and "cannot reach Kafka" in err


async def test_a_groups_topics_are_made_with_the_groups_partitions(kafka_bootstrap):
    ns = Namespace(kafka_bootstrap)
    groups = '{"team": {"agents": ["a", "b"], "partitions": 2}, "ops": {"partitions": 1}}'

    async def run_groups(*args: str) -> tuple[int, str, str]:
        proc = await asyncio.create_subprocess_exec(
            str(GATEWAY_BIN),
            "topics",
            "create",
            *args,
            env=ns.env(groups=groups),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(proc.communicate(), timeout=60)
        assert proc.returncode is not None
        return proc.returncode, out.decode(), err.decode()

    code, out, err = await run_groups("--group", "team")
    assert code == 0, err
    made = {line.split()[1]: line.split()[0] for line in out.splitlines()}
    assert made == {
        ns.events("team"): "created",
        ns.requests("team"): "created",
        ns.run_requests("team"): "created",
        ns.changelog("team"): "created",
        ns.rejections: "created",
        ns.warnings: "created",
        ns.audit: "created",
        ns.interrupts: "created",
    }  # the group's four topics: none of its agents'
    partitions = await _partitions(ns, [ns.events("team"), ns.changelog("team")])
    assert partitions == {ns.events("team"): 2, ns.changelog("team"): 2}
    code, out, err = await run_groups("--all-groups")
    assert code == 0, err
    actions = {line.split()[1]: line.split()[0] for line in out.splitlines()}
    assert actions[ns.events("team")] == "exists" and actions[ns.events("ops")] == "created"
    assert (await _partitions(ns, [ns.requests("ops")])) == {ns.requests("ops"): 1}
    code, _, err = await run_groups("--group", "nope")
    assert code == 2 and "no group 'nope'" in err


async def _partitions(ns: Namespace, topics: list[str]) -> dict[str, int]:
    from aiokafka.admin import AIOKafkaAdminClient

    admin = AIOKafkaAdminClient(bootstrap_servers=ns.bootstrap)
    await admin.start()
    try:
        return {t["topic"]: len(t["partitions"]) for t in await admin.describe_topics(topics)}
    finally:
        await admin.close()


async def test_the_audit_topic_keeps_its_records_long_and_is_never_compacted(
    kafka_bootstrap, kafka_admin, create_topics
):
    from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

    ns = Namespace(kafka_bootstrap)
    code, out, err = await run(ns, "--agent", "alpha", "--partitions", "1")
    assert code == 0, err
    assert f"created  {ns.audit}" in out
    (response,) = await kafka_admin.describe_configs(
        [ConfigResource(ConfigResourceType.TOPIC, ns.audit)]
    )
    (resource,) = response.to_object()["resources"]
    configs = {e["config_names"]: e["config_value"] for e in resource["config_entries"]}
    assert configs["retention.ms"] == str(400 * 24 * 3600 * 1000)
    assert configs["cleanup.policy"] == "delete"

    forever = Namespace(kafka_bootstrap)
    proc = await asyncio.create_subprocess_exec(
        str(GATEWAY_BIN),
        "topics",
        "create",
        "--agent",
        "alpha",
        env=forever.env(audit_retention_days=-1),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    await asyncio.wait_for(proc.communicate(), timeout=60)
    assert proc.returncode == 0
    (response,) = await kafka_admin.describe_configs(
        [ConfigResource(ConfigResourceType.TOPIC, forever.audit)]
    )
    (resource,) = response.to_object()["resources"]
    configs = {e["config_names"]: e["config_value"] for e in resource["config_entries"]}
    assert configs["retention.ms"] == "-1"

    compacted = Namespace(kafka_bootstrap)  # a compacted trail would keep one record a key
    await create_topics([compacted.audit], partitions=3, configs={"cleanup.policy": "compact"})
    code, out, _ = await run(compacted, "--agent", "alpha", "--partitions", "1")
    assert code == 1 and "cleanup.policy is compact, expected delete" in out

    off = Namespace(kafka_bootstrap)
    proc = await asyncio.create_subprocess_exec(
        str(GATEWAY_BIN),
        "topics",
        "create",
        "--agent",
        "alpha",
        env=off.env(audit_enabled="false"),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out_bytes, _ = await asyncio.wait_for(proc.communicate(), timeout=60)
    assert proc.returncode == 0 and off.audit not in out_bytes.decode()
