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
    """The inbox's reader reads; its page writes requests (never run-requests) and reads
    and creates its reply topic."""
    settings = Settings(interrupts_topic="x.interrupts")
    assert Acl("topic", "x.interrupts", "literal", "Write", P) in gateway_acls(settings, "bot", P)
    assert inbox_acls(settings, P, "bot") == [
        Acl("topic", "agui.audit", "literal", "Read", P),
        Acl("topic", "agui.bot.requests", "literal", "Write", P),
        Acl("topic", "agui.inbox-replies", "literal", "Create", P),
        Acl("topic", "agui.inbox-replies", "literal", "Read", P),
        Acl("topic", "agui.rejections", "literal", "Read", P),
        Acl("topic", "agui.warnings", "literal", "Read", P),
        Acl("topic", "x.interrupts", "literal", "Read", P),
    ]
    owners = Settings(
        warnings_topic="agui.{agent}.warnings",
        audit_topic="agui.{agent}.audit",
        interrupts_topic="",
        inbox_page_reply_topic="ops.inbox-replies",
    )
    assert inbox_acls(owners, P, "support") == [
        Acl("topic", "agui.rejections", "literal", "Read", P),
        Acl("topic", "agui.support.audit", "literal", "Read", P),
        Acl("topic", "agui.support.requests", "literal", "Write", P),
        Acl("topic", "agui.support.warnings", "literal", "Read", P),
        Acl("topic", "ops.inbox-replies", "literal", "Create", P),
        Acl("topic", "ops.inbox-replies", "literal", "Read", P),
    ]
    heads = Settings(requests_topic="agui.requests.{agent}")
    assert Acl("topic", "agui.requests.sup", "prefixed", "Write", P) in inbox_acls(heads, P, "sup*")
    for acls in (inbox_acls(settings, P, "bot"), inbox_acls(heads, P, "sup*")):
        assert not any(a.operation == "Write" and "run-requests" in a.name for a in acls)
    off = Settings(interrupts_topic="")
    assert not any(a.name == "x.interrupts" for a in gateway_acls(off, "bot", P))
    no_trail = Settings(audit_enabled=False)
    assert not any("audit" in a.name for a in inbox_acls(no_trail, P, "bot"))


def test_the_command_prints_the_inbox_readers_acls(capsys) -> None:
    assert cli.main(["acls", "--agent-pattern", "bot", "--principal", P, "--role", "inbox"]) == 0
    out, err = capsys.readouterr()
    lines = [shlex.split(line) for line in out.splitlines()]
    operations = {
        args[args.index("--topic") + 1]: [
            args[i + 1] for i, a in enumerate(args) if a == "--operation"
        ]
        for args in lines
    }
    assert operations == {
        "agui.audit": ["Read"],
        "agui.interrupts": ["Read"],
        "agui.rejections": ["Read"],
        "agui.warnings": ["Read"],
        "agui.bot.requests": ["Write"],
        "agui.inbox-replies": ["Create", "Read"],
    }
    assert err == ""


def test_the_command_says_when_a_prefix_lets_the_page_write_more_than_requests(capsys) -> None:
    argv = ["acls", "--agent-pattern", "sup*", "--principal", P, "--role", "inbox"]
    assert cli.main(argv) == 0
    err = capsys.readouterr().err
    assert "the requests ACLs on topic prefix agui.sup also cover" in err
    assert "run-requests" in err


def test_gateway_options_do_not_fit_the_inbox_role(capsys) -> None:
    argv = ["acls", "--agent-pattern", "*", "--principal", P, "--role", "inbox"]
    assert cli.main([*argv, "--create-changelogs"]) == 2
    assert "not with --role inbox" in capsys.readouterr().err
