"""The `agui-gateway` command. Composes the rest; nothing imports it."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pydantic import ValidationError


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="agui-gateway",
        description="Enforce AG-UI 1.0 interrupt/resume rules between agents and their "
        "callers on Kafka.",
    )
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

    commands.add_parser(
        "run",
        help="run the gateway (settings from AGUI_GATEWAY_* variables and the config file)",
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

    commands.add_parser(
        "edge",
        help="serve AG-UI over HTTP (POST /agents/{agent}) through the gateway on Kafka "
        "(AGUI_GATEWAY_EDGE_* settings)",
    )

    topics = commands.add_parser("topics", help="manage an agent's topics")
    topic_commands = topics.add_subparsers(dest="topics_command", metavar="ACTION", required=True)
    create = topic_commands.add_parser(
        "create", help="create an agent's topic set (idempotent; reports what it cannot fix)"
    )
    create.add_argument("--agent", required=True, help="the agent's name")
    create.add_argument(
        "--partitions", type=int, default=3, help="partitions of the agent's topics (default 3)"
    )
    create.add_argument(
        "--shared-partitions",
        type=int,
        default=3,
        help="partitions of agui.rejections and agui.warnings if created (default 3)",
    )
    return parser


def _settings_errors(exc: ValidationError) -> list[str]:
    """One line per invalid setting, named as its environment variable."""
    lines = []
    for error in exc.errors(include_url=False):
        name = ".".join(str(part) for part in error["loc"])
        where = f"{name} (env AGUI_GATEWAY_{name.upper()})" if name else "(settings)"
        got = f" (got {error['input']!r})" if error["type"] != "missing" else ""
        lines.append(f"{where}: {error['msg']}{got}")
    return lines


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "check":
        from gateway import check

        return check.main(args.events, args.input, args.now, args.strict)
    from pydantic import ValidationError

    from gateway.settings import Settings

    try:
        settings = Settings()
    except ValidationError as exc:
        for line in _settings_errors(exc):
            print(f"agui-gateway: invalid setting {line}", file=sys.stderr)
        return 2
    except (ValueError, FileNotFoundError) as exc:
        print(f"agui-gateway: invalid settings: {exc}", file=sys.stderr)
        return 2
    if args.command == "run":
        from gateway import service

        return service.main(settings)
    if args.command == "demo":
        from gateway.demo import main as demo_main

        return demo_main(settings, args.agent, args.partitions, args.rate, args.duration)
    if args.command == "edge":
        from gateway import edge

        return edge.main(settings)
    if args.command == "topics":
        from gateway import topics_cli

        if args.partitions < 1 or args.shared_partitions < 1:
            print("agui-gateway topics: partitions must be at least 1", file=sys.stderr)
            return 2
        return topics_cli.main(settings, args.agent, args.partitions, args.shared_partitions)
    raise AssertionError(f"unhandled command {args.command}")  # pragma: no cover


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
