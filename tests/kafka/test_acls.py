"""The gateway principal's ACLs: exactly what it needs, printed as kafka-acls commands."""

from __future__ import annotations

import shlex

import pytest

from gateway import cli
from gateway.kafka.acls import Acl, gateway_acls, group_acls, kafka_acls_commands, overlaps
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
        Acl("topic", "agui.replies.", "prefixed", "Write", P),
        Acl("group", "agui-gateway", "literal", "Read", P),
        Acl("transactional-id", "agui-gateway.support.", "prefixed", "Write", P),
    }
    assert len(acls) == 11  # no duplicates
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
    assert len(lines) == 8  # one per resource


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
        ("agui.team.gateway-changelog", "DescribeConfigs"),
        ("agui.rejections", "Write"),
        ("agui.warnings", "Write"),
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
