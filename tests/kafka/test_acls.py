"""The gateway principal's ACLs: exactly what it needs, printed as kafka-acls commands."""

from __future__ import annotations

import shlex

import pytest

from gateway import cli
from gateway.kafka.wire import txnids
from gateway.kafka.wire.acls import (
    Acl,
    auditor_acls,
    bridge_acls,
    gateway_acls,
    group_acls,
    kafka_acls_commands,
    overlaps,
)
from gateway.settings import Settings

P = "User:agui-gateway"


def test_one_agent_gets_literal_topic_acls_and_nothing_else() -> None:
    acls = gateway_acls(Settings(), "support", P, ["agui.replies."])
    assert set(acls) == {
        Acl("topic", "agui.support.events", "literal", "Read", P),
        Acl("topic", "agui.support.requests", "literal", "Read", P),
        Acl("topic", "agui.support.run-requests", "literal", "Write", P),
        Acl("topic", "agui.support.gateway-changelog", "literal", "Read", P),
        Acl("topic", "agui.support.gateway-changelog", "literal", "Write", P),
        Acl("topic", "agui.support.gateway-changelog", "literal", "DescribeConfigs", P),
        Acl("topic", "agui.rejections", "literal", "Write", P),
        Acl("topic", "agui.warnings", "literal", "Write", P),
        Acl("topic", "agui.audit", "literal", "Write", P),
        Acl("topic", "agui.interrupts", "literal", "Write", P),
        Acl("topic", "agui.replies.", "prefixed", "Write", P),
        Acl("group", "agui-gateway", "literal", "Read", P),
        Acl("transactional-id", "agui-gateway.support.", "prefixed", "Write", P),
    }
    assert len(acls) == 13  # no duplicates
    assert overlaps(Settings(), "support") == []


def test_create_is_granted_only_when_the_gateway_creates_changelogs() -> None:
    without = gateway_acls(Settings(), "support", P)
    with_create = gateway_acls(Settings(), "support", P, create_changelogs=True)
    assert set(with_create) - set(without) == {
        Acl("topic", "agui.support.gateway-changelog", "literal", "Create", P)
    }


def test_names_follow_the_settings_templates_and_group() -> None:
    settings = Settings(events_topic="x.{agent}.in", group_id="gw", rejections_topic="x.rej")
    names = {(a.name, a.operation) for a in gateway_acls(settings, "a", P)}
    assert ("x.a.in", "Read") in names
    assert ("x.rej", "Write") in names
    assert ("gw", "Read") in names
    assert ("gw.a.", "Write") in names


def test_a_prefix_pattern_with_shared_heads_says_what_it_overgrants() -> None:
    acls = gateway_acls(Settings(), "sup*", P)
    topic_prefixed = {a for a in acls if a.resource_type == "topic" and a.pattern == "prefixed"}
    assert {a.name for a in topic_prefixed} == {"agui.sup"}
    assert Acl("transactional-id", "agui-gateway.sup", "prefixed", "Write", P) in acls
    notes = overlaps(Settings(), "sup*")
    assert len(notes) == 4
    assert notes[0].startswith("the events ACLs on topic prefix agui.sup also cover the requests")


def test_a_prefix_pattern_with_distinct_heads_stays_least_privilege() -> None:
    settings = Settings(
        events_topic="agui.events.{agent}",
        requests_topic="agui.requests.{agent}",
        run_requests_topic="agui.run-requests.{agent}",
        changelog_topic="agui.changelog.{agent}",
    )
    acls = gateway_acls(settings, "sup*", P)
    assert Acl("topic", "agui.events.sup", "prefixed", "Read", P) in acls
    assert Acl("topic", "agui.run-requests.sup", "prefixed", "Write", P) in acls
    assert not any(a.name == "agui.events.sup" and a.operation == "Write" for a in acls)
    assert overlaps(settings, "sup*") == []


def test_commands_group_operations_per_resource() -> None:
    acls = gateway_acls(Settings(), "support", P)
    lines = kafka_acls_commands(acls, "b:9094", "admin.properties")
    parsed = [shlex.split(line) for line in lines]
    assert all(
        p[:7]
        == [
            "kafka-acls",
            "--bootstrap-server",
            "b:9094",
            "--command-config",
            "admin.properties",
            "--add",
            "--allow-principal",
        ]
        for p in parsed
    )
    changelog = next(p for p in parsed if "agui.support.gateway-changelog" in p)
    assert [changelog[i + 1] for i, a in enumerate(changelog) if a == "--operation"] == [
        "DescribeConfigs",
        "Read",
        "Write",
    ]
    txn = next(p for p in parsed if "--transactional-id" in p)
    assert txn[-2:] == ["--resource-pattern-type", "prefixed"]
    assert len(lines) == 10  # one per resource


@pytest.mark.parametrize("pattern", ["a*b", "**", "bad name"])
def test_the_command_rejects_what_is_not_an_agent_or_prefix(pattern, capsys) -> None:
    assert cli.main(["acls", "--agent-pattern", pattern, "--principal", P]) == 2
    assert "neither an agent name nor a name prefix" in capsys.readouterr().err


def test_the_command_prints_the_commands(capsys) -> None:
    assert cli.main(["acls", "--agent-pattern", "support", "--principal", P]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out == kafka_acls_commands(
        gateway_acls(Settings(), "support", P), Settings().bootstrap_servers, "admin.properties"
    )


def test_a_groups_acls_are_those_of_its_shared_topics_and_say_who_may_speak(
    capsys, monkeypatch
) -> None:
    monkeypatch.setenv(
        "AGUI_GATEWAY_GROUPS", '{"team": {"agents": ["a", "b"]}, "ops": {"partitions": 2}}'
    )
    settings = Settings()
    acls = group_acls(settings, "team", P)
    assert {(a.name, a.operation) for a in acls if a.resource_type == "topic"} == {
        ("agui.team.events", "Read"),
        ("agui.team.requests", "Read"),
        ("agui.team.run-requests", "Write"),
        ("agui.team.gateway-changelog", "Read"),
        ("agui.team.gateway-changelog", "Write"),
        ("agui.interrupts", "Write"),
        ("agui.team.gateway-changelog", "DescribeConfigs"),
        ("agui.rejections", "Write"),
        ("agui.warnings", "Write"),
        ("agui.audit", "Write"),
    }
    assert all(a.pattern == "literal" for a in acls if a.resource_type == "topic")
    assert not any("agui.a." in a.name or "agui.b." in a.name for a in acls)  # no agent's own
    with pytest.raises(ValueError, match="no group 'nope'"):
        group_acls(settings, "nope", P)

    assert cli.main(["acls", "--all-groups", "--principal", P]) == 0
    captured = capsys.readouterr()
    expected = sorted(
        set(group_acls(settings, "team", P)) | set(group_acls(settings, "ops", P)),
        key=lambda a: (a.resource_type, a.name, a.pattern, a.operation),
    )
    assert captured.out.splitlines() == kafka_acls_commands(
        expected, settings.bootstrap_servers, "admin.properties"
    )
    assert "speak for every one of its agents" in captured.err
    assert cli.main(["acls", "--group", "nope", "--principal", P]) == 2
    assert "no group 'nope'" in capsys.readouterr().err


# --- the transactional ids: the ACLs against the ids the producers take at run time ---


def covers(acls: list[Acl], transactional_id: str) -> bool:
    """Whether a TransactionalId Write ACL grants `transactional_id`, as Kafka matches."""
    return any(
        a.resource_type == "transactional-id"
        and a.operation == "Write"
        and (
            a.name == transactional_id
            if a.pattern == "literal"
            else transactional_id.startswith(a.name)
        )
        for a in acls
    )


async def runtime_ids(settings: Settings, keys: list[tuple[str, int]], monkeypatch) -> list[str]:
    """The transactional ids the gateway's checkpoint starts its producers with, for the
    pairs `keys` (every producer of the instance, with producer_scope=instance)."""
    from prometheus_client import CollectorRegistry

    from gateway.kafka.exactly_once import checkpoint, instancecheckpoint
    from gateway.observe.metrics import Metrics

    taken: list[str] = []

    async def start(settings: Settings, client_id: str, transactional_id: str) -> object:
        taken.append(transactional_id)
        return object()

    monkeypatch.setattr(checkpoint, "start_transactional", start)
    monkeypatch.setattr(instancecheckpoint, "start_transactional", start)
    metrics = Metrics(CollectorRegistry())
    cp = (
        instancecheckpoint.InstanceCheckpoint(settings, metrics, consumer=None)  # type: ignore[arg-type]
        if settings.producer_scope == "instance"
        else checkpoint.Checkpoint(settings, metrics, consumer=None)  # type: ignore[arg-type]
    )
    for key in keys:
        await cp.open(key)
    return taken


PAIRS = [("support", 0), ("support", 1), ("support", 11), ("sup", 0), ("supporter", 2)]


@pytest.mark.parametrize("group_id", ["agui-gateway", "gw.eu"])
async def test_pair_scope_acls_cover_the_agents_pair_ids_and_no_other_agents(
    group_id: str, monkeypatch
) -> None:
    settings = Settings(group_id=group_id)
    ids = dict(zip(PAIRS, await runtime_ids(settings, PAIRS, monkeypatch), strict=True))
    assert ids[("support", 11)] == f"{group_id}.support.11"
    acls = gateway_acls(settings, "support", P)
    assert [k for k, i in ids.items() if covers(acls, i)] == PAIRS[:3]
    prefixed = gateway_acls(settings, "sup*", P)
    assert all(covers(prefixed, i) for i in ids.values())
    assert not covers(prefixed, f"{group_id}.other.0")


@pytest.mark.parametrize("producers", [1, 3])
async def test_instance_scope_acls_are_exactly_the_instance_producers_ids(
    producers: int, monkeypatch
) -> None:
    settings = Settings(
        producer_scope="instance", instance_name="gw-a", instance_producers=producers
    )
    ids = await runtime_ids(settings, PAIRS, monkeypatch)
    assert len(ids) == producers and ids[0] == "agui-gateway.instance.gw-a"
    acls = gateway_acls(settings, "support", P)
    granted = {a.name for a in acls if a.resource_type == "transactional-id"}
    assert granted == set(ids)
    assert {a.pattern for a in acls if a.resource_type == "transactional-id"} == {"literal"}
    # the pairs' ids are not granted: this gateway never takes them
    assert not covers(acls, "agui-gateway.support.0")
    assert not covers(acls, "agui-gateway.instance.gw-b")


async def test_instance_names_given_replace_the_settings_one_and_a_prefix_covers_all(
    monkeypatch,
) -> None:
    settings = Settings(producer_scope="instance", instance_name="here", instance_producers=2)
    acls = gateway_acls(settings, "support", P, instance_names=["gw-0", "gw-1"])
    for name in ("gw-0", "gw-1"):
        other = Settings(producer_scope="instance", instance_name=name, instance_producers=2)
        assert all(covers(acls, i) for i in await runtime_ids(other, PAIRS[:1], monkeypatch))
    assert not covers(acls, "agui-gateway.instance.here")
    prefixed = gateway_acls(settings, "support", P, instance_names=["gw-*"])
    assert [a for a in prefixed if a.resource_type == "transactional-id"] == [
        Acl("transactional-id", "agui-gateway.instance.gw-", "prefixed", "Write", P)
    ]
    for name in ("gw-0", "gw-17"):
        other = Settings(producer_scope="instance", instance_name=name, instance_producers=2)
        assert all(covers(prefixed, i) for i in await runtime_ids(other, PAIRS[:1], monkeypatch))


def test_the_bridge_acls_cover_its_ids_and_what_it_reads_writes_and_creates() -> None:
    settings = Settings(bridge_group_id="br")
    acls = bridge_acls(settings, "support", P)
    assert all(covers(acls, txnids.bridge_id(settings, "support", p)) for p in (0, 1, 12))
    assert not covers(acls, txnids.bridge_id(settings, "supporter", 0))
    assert not covers(acls, txnids.pair_id(settings, "support", 0))
    assert set(acls) == {
        Acl("topic", "agui.support.run-requests", "literal", "Read", P),
        Acl("topic", "agui.support.events", "literal", "Write", P),
        *(
            Acl("topic", "agui.support.bridge-runs", "literal", op, P)
            for op in ("Read", "Write", "Create", "DescribeConfigs")
        ),
        Acl("group", "br", "literal", "Read", P),
        Acl("transactional-id", "br.support.", "prefixed", "Write", P),
    }


def test_the_bridge_service_takes_its_ids_from_txnids() -> None:
    import inspect

    from gateway.bridge import service

    source = inspect.getsource(service)
    assert "transactional_id=txnids.bridge_id(s, owner, tp.partition)" in source
    assert "bridge_group_id}." not in source


def test_instance_scope_without_names_says_whose_ids_it_prints(capsys, monkeypatch) -> None:
    monkeypatch.setenv("AGUI_GATEWAY_PRODUCER_SCOPE", "instance")
    monkeypatch.setenv("AGUI_GATEWAY_INSTANCE_NAME", "gw-a")
    assert cli.main(["acls", "--agent-pattern", "support", "--principal", P]) == 0
    captured = capsys.readouterr()
    assert "--transactional-id agui-gateway.instance.gw-a" in captured.out
    assert "instance_name 'gw-a'" in captured.err
    assert (
        cli.main(["acls", "--agent-pattern", "support", "--principal", P, "--instance-name", "x"])
        == 0
    )
    assert "instance_name" not in capsys.readouterr().err


@pytest.mark.parametrize(
    ("args", "scope", "error"),
    [
        (["--instance-name", "gw-a"], "pair", "but the settings say producer_scope=pair"),
        (["--instance-name", "a*b"], "instance", "neither an instance name nor a name prefix"),
        (["--instance-name", ""], "instance", "neither an instance name nor a name prefix"),
        (["--role", "bridge", "--reply-topic-prefix", "r."], "pair", "not with --role bridge"),
    ],
)
def test_options_that_do_not_fit_are_refused(args, scope, error, capsys, monkeypatch) -> None:
    monkeypatch.setenv("AGUI_GATEWAY_PRODUCER_SCOPE", scope)
    assert cli.main(["acls", "--agent-pattern", "support", "--principal", P, *args]) == 2
    assert error in capsys.readouterr().err


# --- the audit trail's ACLs ---


def test_the_audit_topic_is_written_by_the_gateway_only_while_the_trail_is_on() -> None:
    on = gateway_acls(Settings(), "support", P)
    off = gateway_acls(Settings(audit_enabled=False), "support", P)
    assert set(on) - set(off) == {Acl("topic", "agui.audit", "literal", "Write", P)}
    own = gateway_acls(Settings(audit_topic="agui.{agent}.audit"), "support", P)
    assert Acl("topic", "agui.support.audit", "literal", "Write", P) in own
    assert not any(a.name == "agui.audit" for a in own)
    assert overlaps(Settings(audit_topic="agui.{agent}.audit"), "sup*")[-1].startswith(
        "the audit ACLs on topic prefix agui.sup also cover"
    )


def test_an_auditor_reads_the_audit_topic_and_nothing_else(capsys) -> None:
    assert auditor_acls(Settings(), "support", "User:audit") == [
        Acl("topic", "agui.audit", "literal", "Read", "User:audit")
    ]
    own = Settings(audit_topic="agui.{agent}.audit")
    assert auditor_acls(own, "sup*", "User:audit") == [
        Acl("topic", "agui.sup", "prefixed", "Read", "User:audit")
    ]
    assert auditor_acls(own, "support", "User:audit") == [
        Acl("topic", "agui.support.audit", "literal", "Read", "User:audit")
    ]
    args = ["acls", "--agent-pattern", "support", "--principal", "User:audit", "--role", "auditor"]
    assert cli.main(args) == 0
    captured = capsys.readouterr()
    assert captured.out.splitlines() == kafka_acls_commands(
        auditor_acls(Settings(), "support", "User:audit"), "127.0.0.1:9092", "admin.properties"
    )
    assert "reads every agent's trail" in captured.err
    assert cli.main([*args, "--create-changelogs"]) == 2
    assert "not with --role auditor" in capsys.readouterr().err


def test_no_auditor_acls_while_the_trail_is_off(capsys, monkeypatch) -> None:
    monkeypatch.setenv("AGUI_GATEWAY_AUDIT_ENABLED", "false")
    args = ["acls", "--agent-pattern", "support", "--principal", "User:audit", "--role", "auditor"]
    assert cli.main(args) == 2
    assert "audit_enabled=false" in capsys.readouterr().err
