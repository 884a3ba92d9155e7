"""The `agui-gateway` command line: its arguments, the settings, and the dispatch to
`gateway.commands` (one module per command). Nothing imports it."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from gateway import __version__

if TYPE_CHECKING:
    from gateway.core import Caller


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="agui-gateway",
        description="Enforce AG-UI 1.0 interrupt/resume rules between agents and their "
        "callers on Kafka.",
    )
    parser.add_argument("--version", action="version", version=f"agui-gateway {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    check = commands.add_parser(
        "check",
        help="judge one RunAgentInput against one thread's events, offline",
        description="Replay a thread's AG-UI events and judge one RunAgentInput against them. "
        "Prints one JSON object; exit 0 forward, 1 reject, 2 unreadable files.",
    )
    check.add_argument(
        "--events",
        required=True,
        metavar="EVENTS.jsonl",
        help="one AG-UI event per line, one thread, in order (may be empty)",
    )
    check.add_argument(
        "--input",
        required=True,
        metavar="INPUT.json",
        help="one RunAgentInput JSON document (wire format)",
    )
    check.add_argument("--now", metavar="ISO8601", help="the judging time (default: now)")
    check.add_argument(
        "--strict",
        action="store_true",
        help="unrecognised entries and unknown threads reject instead of warn",
    )
    check.add_argument(
        "--policy",
        action="store_true",
        help="judge with the approver policy of the settings (AGUI_GATEWAY_* variables and "
        "the config file, as `run` reads them); without it, anyone may answer",
    )
    check.add_argument(
        "--agent", metavar="NAME", help="the agent the input is for (picks the policy's rule)"
    )
    check.add_argument(
        "--group", metavar="NAME", help="the group whose topics carry it (picks the policy's rule)"
    )
    check.add_argument(
        "--as",
        dest="subject",
        metavar="SUBJECT",
        help="judge as if this verified identity sent the input (default: unattested)",
    )
    check.add_argument(
        "--as-groups",
        metavar="G1,G2",
        default="",
        help="the groups or roles of the --as identity, comma-separated",
    )

    commands.add_parser(
        "run",
        help="run the gateway (settings from AGUI_GATEWAY_* variables and the config file)",
        description="Run the gateway until SIGTERM or SIGINT (exit 0). Everything it writes "
        "to stderr is JSON Lines, fatal errors included (exit 2: settings, HTTP address, "
        "Kafka at start; exit 1: an unexpected failure).",
        epilog=settings_help(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )

    demo = commands.add_parser(
        "demo",
        help="run the gateway with simulated agents and clients and a live summary (Ctrl-C stops)",
    )
    demo.add_argument("--agent", default="demo", help="the demo agent's name (default demo)")
    demo.add_argument("--partitions", type=int, default=3, help="partitions (default 3)")
    demo.add_argument(
        "--rate", type=float, default=5.0, help="new conversations per second (default 5)"
    )
    demo.add_argument(
        "--duration",
        type=float,
        default=None,
        help="stop after this many seconds (default: run until Ctrl-C)",
    )
    demo.add_argument(
        "--group-agents",
        type=int,
        default=0,
        metavar="N",
        help="run the simulated agents as N agents (<agent>-1 .. <agent>-N) of one group "
        "named <agent>, sharing the group's topics (default 0: one agent on its own topics)",
    )
    demo.add_argument(
        "--real-agent",
        action="store_true",
        help="also run a real offline pydantic-ai agent (<agent>-payments) behind the bridge, "
        "driven through the gateway (needs the demo extra)",
    )

    commands.add_parser(
        "bridge",
        help="put HTTP AG-UI agents behind the gateway: run-requests -> agent -> events",
    )

    commands.add_parser(
        "edge",
        help="serve AG-UI over HTTP (POST /agents/{agent}) through the gateway on Kafka "
        "(AGUI_GATEWAY_EDGE_* settings)",
    )

    commands.add_parser(
        "inbox",
        help="serve the inbox's JSON API (GET /interrupts, ...) from the interrupts topic, on "
        "inbox_port (AGUI_GATEWAY_INBOX_* settings)",
    )

    topics = commands.add_parser("topics", help="manage an agent's topics")
    topic_commands = topics.add_subparsers(dest="topics_command", metavar="ACTION", required=True)
    create = topic_commands.add_parser(
        "create", help="create an agent's topic set (idempotent; reports what it cannot fix)"
    )
    create_what = create.add_mutually_exclusive_group(required=True)
    create_what.add_argument("--agent", help="the agent's name")
    create_what.add_argument(
        "--group",
        action="append",
        default=None,
        help="a group of the settings (repeatable): its four topics, with the group's "
        "partitions (--partitions is not used)",
    )
    create_what.add_argument(
        "--all-groups", action="store_true", help="every group of the settings, as --group"
    )
    create.add_argument(
        "--partitions", type=int, default=3, help="partitions of the agent's topics (default 3)"
    )
    create.add_argument(
        "--shared-partitions",
        type=int,
        default=3,
        help="partitions of the rejections, warnings and audit topics if created: the shared "
        "ones, or the agent's (group's) own when those settings are templates (default 3)",
    )
    # --- acls (least privilege on a secured Kafka) ---
    acls = commands.add_parser(
        "acls",
        help="print (or create) the ACLs a gateway principal needs, and no more",
        description="Print the kafka-acls commands granting a gateway (or bridge) principal "
        "exactly what it needs for the agents named, with the settings the gateway runs with "
        "(topic templates, group_id, producer_scope, instance_name, instance_producers, "
        "bridge_group_id); --apply creates them (--remove deletes them) with an admin client "
        "from the settings, which must then name an admin principal.",
    )
    acls_for = acls.add_mutually_exclusive_group(required=True)
    acls_for.add_argument("--agent-pattern", help="an agent name, or a name prefix ending in *")
    acls_for.add_argument(
        "--group",
        action="append",
        default=None,
        help="a group of the settings (repeatable): the ACLs of its shared topics",
    )
    acls_for.add_argument(
        "--all-groups", action="store_true", help="every group of the settings, as --group"
    )
    acls.add_argument("--principal", required=True, help="the gateway's principal, User:<name>")
    acls.add_argument(
        "--reply-topic-prefix",
        action="append",
        default=[],
        help="a prefix of topics the gateway may reply to (repeatable)",
    )
    acls.add_argument(
        "--create-changelogs",
        action="store_true",
        help="also let the gateway create changelog topics (not needed after topics create)",
    )
    acls.add_argument(
        "--instance-name",
        action="append",
        default=[],
        metavar="NAME|PREFIX*",
        help="with producer_scope=instance: a gateway instance's instance_name (repeatable), "
        "or a name prefix ending in * for all instances so named (default: instance_name of "
        "the settings)",
    )
    acls.add_argument(
        "--role",
        choices=("gateway", "bridge", "auditor", "inbox"),
        default="gateway",
        help="whose ACLs: the gateway's (default), the bridge's (agui-gateway bridge), an "
        "auditor's (agui-gateway audit: Read on the audit topic) or the inbox's "
        "(agui-gateway inbox: Read on interrupts_topic, on the rejections and warnings "
        "topics and, with audit_enabled, on the audit topic, the agent pattern naming "
        "whose when those are templates; for its page, "
        "Write on the named agents' requests topics and Read, Create on "
        "inbox_page_reply_topic)",
    )
    acls.add_argument(
        "--command-config",
        default="admin.properties",
        help="the admin client config file named in the printed commands",
    )
    acls_action = acls.add_mutually_exclusive_group()
    acls_action.add_argument(
        "--apply",
        action="store_const",
        const="apply",
        dest="action",
        help="create the ACLs through an admin client (the settings name an admin principal)",
    )
    acls_action.add_argument(
        "--remove",
        action="store_const",
        const="remove",
        dest="action",
        help="delete the ACLs through an admin client (the settings name an admin principal)",
    )
    # --- audit (the trail read back) ---
    audit = commands.add_parser(
        "audit",
        help="read the audit trail back: who answered which interrupts, and the verdicts",
        description="Read the audit topic (read_committed) up to its end as of the start, and "
        "print the records that match every filter given, the newest --limit of them in "
        "decision order. Exit 0 (matches or none), 2 on a bad option or a Kafka failure.",
    )
    audit.add_argument("--agent", help="the agent the requests were for")
    audit.add_argument("--thread", help="one thread (threadId)")
    audit.add_argument("--group", help="the agent group whose shared topics carried them")
    audit.add_argument("--approver", metavar="SUBJECT", help="the verified subject who sent them")
    audit.add_argument(
        "--approver-group", metavar="GROUP", help="a group or role the verified sender held"
    )
    audit.add_argument(
        "--unattested", action="store_true", help="only requests no verified identity sent"
    )
    audit.add_argument(
        "--verdict", choices=("forward", "reject", "duplicate"), help="only this verdict"
    )
    audit.add_argument(
        "--since",
        metavar="TIME",
        help="decided at or after: ISO 8601 (UTC unless it names an offset) or a duration "
        "ago (90s, 15m, 2h, 7d)",
    )
    audit.add_argument("--until", metavar="TIME", help="decided before: as --since")
    audit.add_argument(
        "--output",
        choices=("table", "json"),
        default="table",
        help="a table (default) or "
        "JSON Lines, one audit record a line as written (schemas/audit.schema.json)",
    )
    audit.add_argument(
        "--limit",
        type=int,
        default=1000,
        help="print the newest N matching records (default 1000; 0: all)",
    )
    audit.add_argument(
        "--timeout",
        type=float,
        default=300.0,
        help="longest time to read the topic to its end, in seconds (default 300)",
    )
    # --- keys (signing keys for verified approvers) ---
    keys = commands.add_parser(
        "keys",
        help="make a signing key for attesting identities (docs: verified approvers)",
        description="Write a new Ed25519 private key (PEM, PKCS#8, readable by its owner only) "
        "for the edge or a service to sign identities with (attest_key_id, "
        "attest_private_key_file), and print the line that makes the gateway trust its "
        "public key (attest_trusted_keys).",
    )
    keys.add_argument("--key-id", required=True, help="the key's id, e.g. edge-2026-01")
    keys.add_argument(
        "--out", required=True, help="the private key file to write (never overwritten)"
    )
    return parser


def settings_help() -> str:
    """Every setting with its environment variable, default and meaning, from the model."""
    from gateway.settings import CONFIG_FILE_ENV, setting_fields

    lines = [
        "settings (environment variables; the same names in lower case, without the prefix,",
        f"in the TOML file named by {CONFIG_FILE_ENV}; the environment wins):",
    ]
    for _, env, default, description in setting_fields():
        shown = "none" if default is None else str(default)
        lines.append(f"  {env} (default: {shown})")
        lines.append(f"      {description}")
    return "\n".join(lines)


def _fatal(command: str, lines: list[str]) -> None:
    """A fatal error before the command ran: JSON log records for `run` (whose stderr is
    JSON Lines only), one plain line each for the interactive commands."""
    if command == "run":
        import logging

        from gateway.observe import logs

        logs.configure("INFO")
        for line in lines:
            logging.getLogger("gateway.cli").error(f"agui-gateway: {line}")
        return
    for line in lines:
        print(f"agui-gateway: {line}", file=sys.stderr)


def check_caller(args: argparse.Namespace) -> Caller:
    """Who `check` judges the input as sent by: `--as` taken as verified (offline)."""
    from gateway.core import Caller, Identity

    groups = tuple(g.strip() for g in args.as_groups.split(",") if g.strip())
    identity = None if args.subject is None else Identity(args.subject, groups, "check")
    return Caller(identity, agent=args.agent, group=args.group)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "check" and not args.policy:
        from gateway.commands import check

        return check.main(args.events, args.input, args.now, args.strict, check_caller(args))
    if args.command == "keys":
        from gateway.commands import keys

        return keys.main(args.key_id, args.out)
    from pydantic import ValidationError

    from gateway.settings import Settings, SettingsSourceError, error_lines

    try:
        settings = Settings()
    except ValidationError as exc:
        _fatal(args.command, [f"invalid setting {line}" for line in error_lines(exc)])
        return 2
    except SettingsSourceError as exc:
        _fatal(args.command, [f"invalid settings: {line}" for line in exc.lines])
        return 2
    except (ValueError, FileNotFoundError) as exc:
        _fatal(args.command, [f"invalid settings: {exc}"])
        return 2
    if args.command == "check":
        from gateway.commands import check

        rules = tuple(rule.rule() for rule in settings.approvers)
        strict = args.strict or settings.strict
        return check.main(args.events, args.input, args.now, strict, check_caller(args), rules)
    if args.command == "run":
        from gateway.commands import run

        return run.main(settings)
    if args.command == "demo":
        from gateway.commands import demo

        return demo.main(
            settings,
            args.agent,
            args.partitions,
            args.rate,
            args.duration,
            args.real_agent,
            args.group_agents,
        )
    if args.command == "bridge":
        from gateway.commands import bridge

        return bridge.main(settings)
    if args.command == "edge":
        from gateway.commands import edge

        return edge.main(settings)
    if args.command == "inbox":
        from gateway.commands import inbox

        return inbox.main(settings)
    if args.command == "topics":
        from gateway.commands import topics

        if args.partitions < 1 or args.shared_partitions < 1:
            print("agui-gateway topics: partitions must be at least 1", file=sys.stderr)
            return 2
        groups = list(settings.groups) if args.all_groups else args.group
        if args.all_groups and not groups:
            print("agui-gateway topics: the settings name no groups", file=sys.stderr)
            return 2
        return topics.main(settings, args.agent, args.partitions, args.shared_partitions, groups)
    if args.command == "acls":
        from gateway.commands import acls

        if args.group or args.all_groups:
            return acls.groups_main(
                settings,
                list(settings.groups) if args.all_groups else args.group,
                args.principal,
                args.reply_topic_prefix,
                args.create_changelogs,
                args.command_config,
                args.action,
            )
        return acls.main(
            settings,
            args.agent_pattern,
            args.principal,
            args.reply_topic_prefix,
            args.create_changelogs,
            args.command_config,
            args.action,
            args.instance_name,
            args.role,
        )
    if args.command == "audit":
        return _audit(settings, args)
    raise AssertionError(f"unhandled command {args.command}")  # pragma: no cover


def _audit(settings: Any, args: argparse.Namespace) -> int:
    import time

    from gateway.commands import audit

    now = time.time()
    try:
        since = audit.parse_time(args.since, now) if args.since else None
        until = audit.parse_time(args.until, now) if args.until else None
    except audit.Refusal as exc:
        print(f"agui-gateway audit: {exc}", file=sys.stderr)
        return 2
    filters = audit.Filters(
        agent=args.agent,
        thread=args.thread,
        group=args.group,
        approver=args.approver,
        approver_group=args.approver_group,
        unattested=args.unattested,
        verdict=args.verdict,
        since_ms=since,
        until_ms=until,
    )
    return audit.main(settings, filters, args.output, args.limit, args.timeout)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
