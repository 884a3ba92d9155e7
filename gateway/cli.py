"""The `agui-gateway` command. Composes the rest; nothing imports it."""

from __future__ import annotations

import argparse
import sys


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
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "check":
        from gateway import check

        return check.main(args.events, args.input, args.now, args.strict)
    raise AssertionError(f"unhandled command {args.command}")  # pragma: no cover


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
