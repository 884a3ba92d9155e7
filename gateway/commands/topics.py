"""`agui-gateway topics create`: an agent's topic set, made correctly and idempotently.

`--group NAME` (repeatable) or `--all-groups` makes the topic sets of groups of the
settings instead, each with its group's `partitions`."""

from __future__ import annotations

import asyncio
import sys

from aiokafka.errors import KafkaError

from gateway.kafka import clients
from gateway.kafka.topics import agent_topic_layout, ensure_topics
from gateway.settings import Settings


async def create(
    settings: Settings,
    agent: str | None,
    partitions: int,
    shared: int,
    groups: list[str] | None = None,
) -> int:
    """Make one agent's topic set, or (with `groups`) each named group's."""
    owners: dict[str, int] = {}
    if groups:
        unknown = [g for g in groups if g not in settings.groups]
        if unknown:
            print(
                f"agui-gateway topics: no group {', '.join(map(repr, unknown))} in the settings "
                f"(groups: {', '.join(settings.groups) or 'none'})",
                file=sys.stderr,
            )
            return 2
        owners = {g: settings.groups[g].partitions for g in groups}
    elif agent is not None:
        if not settings.topic_regex(settings.events_topic).match(
            settings.topic(settings.events_topic, agent)
        ):
            print(
                f"agui-gateway topics: {agent!r} is not a valid agent name "
                f"(pattern {settings.agent_name_pattern})",
                file=sys.stderr,
            )
            return 2
        owners = {agent: partitions}
    else:
        print("agui-gateway topics: name an --agent, a --group or --all-groups", file=sys.stderr)
        return 2
    wanted: dict[str, tuple[int, dict[str, str]]] = {}
    for owner, count in owners.items():
        wanted.update(agent_topic_layout(settings, owner, count, shared))
    try:
        await clients.preflight(settings)
    except clients.SecurityFailure as exc:
        print(f"agui-gateway topics: {exc}", file=sys.stderr)
        return 2
    admin = clients.admin(settings, client_id=f"{settings.client_id}-topics")
    try:
        await asyncio.wait_for(admin.start(), timeout=30)
        reports = await ensure_topics(admin, wanted)
    except (KafkaError, TimeoutError, OSError) as exc:
        print(
            f"agui-gateway topics: cannot reach Kafka at {settings.bootstrap_servers}: {exc!r}",
            file=sys.stderr,
        )
        return 2
    finally:
        await admin.close()
    status = 0
    for report in reports:
        line = f"{report.action:8} {report.topic}" + (
            f"  ({report.detail})" if report.detail else ""
        )
        print(line)
        if report.action == "mismatch":
            status = 1
    if status:
        print(
            "agui-gateway topics: some topics exist with a layout this command cannot fix; "
            "recreate them or choose other names",
            file=sys.stderr,
        )
    return status


def main(
    settings: Settings,
    agent: str | None,
    partitions: int,
    shared: int,
    groups: list[str] | None = None,
) -> int:
    return asyncio.run(create(settings, agent, partitions, shared, groups))
