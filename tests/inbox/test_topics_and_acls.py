"""The interrupts topic in `topics create`'s layout and in the ACLs: the gateway writes it,
the inbox reads it, and neither is there when the setting is empty."""

from __future__ import annotations

import shlex

from gateway import cli
from gateway.kafka.wire.acls import Acl, gateway_acls, inbox_acls
from gateway.kafka.wire.topics import agent_topic_layout
from gateway.settings import Settings

P = "User:inbox"


def test_the_layout_has_the_compacted_topic_with_the_shared_partitions() -> None:
    layout = agent_topic_layout(Settings(interrupts_topic="x.interrupts"), "bot", 6, 3)
    partitions, configs = layout["x.interrupts"]
    assert partitions == 3 and configs["cleanup.policy"] == "compact"
    off = agent_topic_layout(Settings(interrupts_topic=""), "bot", 6, 3)
    assert not any("interrupts" in topic for topic in off)


def test_the_gateway_writes_and_the_inbox_reads_nothing_more() -> None:
    settings = Settings(interrupts_topic="x.interrupts")
    assert Acl("topic", "x.interrupts", "literal", "Write", P) in gateway_acls(settings, "bot", P)
    assert inbox_acls(settings, P) == [
        Acl("topic", "agui.rejections", "literal", "Read", P),
        Acl("topic", "agui.warnings", "literal", "Read", P),
        Acl("topic", "x.interrupts", "literal", "Read", P),
    ]
    owners = Settings(warnings_topic="agui.{agent}.warnings", interrupts_topic="")
    assert inbox_acls(owners, P, "support") == [
        Acl("topic", "agui.rejections", "literal", "Read", P),
        Acl("topic", "agui.support.warnings", "literal", "Read", P),
    ]
    off = Settings(interrupts_topic="")
    assert not any(a.name == "x.interrupts" for a in gateway_acls(off, "bot", P))


def test_the_command_prints_the_inbox_readers_acls(capsys) -> None:
    assert cli.main(["acls", "--agent-pattern", "*", "--principal", P, "--role", "inbox"]) == 0
    lines = [shlex.split(line) for line in capsys.readouterr().out.splitlines()]
    assert {args[args.index("--topic") + 1] for args in lines} == {
        "agui.interrupts",
        "agui.rejections",
        "agui.warnings",
    }
    assert {args[args.index("--operation") + 1] for args in lines} == {"Read"}
    assert all(args.count("--operation") == 1 for args in lines)


def test_gateway_options_do_not_fit_the_inbox_role(capsys) -> None:
    argv = ["acls", "--agent-pattern", "*", "--principal", P, "--role", "inbox"]
    assert cli.main([*argv, "--create-changelogs"]) == 2
    assert "not with --role inbox" in capsys.readouterr().err
