"""`agui-gateway acls`: the least-privilege ACLs of a gateway principal, printed or applied."""

from __future__ import annotations

import asyncio
import sys

from aiokafka.errors import KafkaError

from gateway.kafka import clients
from gateway.kafka.acls import apply, gateway_acls, group_acls, kafka_acls_commands, overlaps
from gateway.settings import Settings


def main(
    settings: Settings,
    agent_pattern: str,
    principal: str,
    reply_topic_prefixes: list[str],
    create_changelogs: bool,
    command_config: str,
    action: str | None,
) -> int:
    agent = agent_pattern.removesuffix("*")
    if agent_pattern.count("*") > int(agent_pattern.endswith("*")) or (
        agent
        and not settings.topic_regex(settings.events_topic).match(
            settings.topic(settings.events_topic, agent)
        )
    ):
        print(
            f"agui-gateway acls: {agent_pattern!r} is neither an agent name nor a name prefix "
            f"ending in * (pattern {settings.agent_name_pattern})",
            file=sys.stderr,
        )
        return 2
    if not principal.startswith("User:") or principal == "User:":
        print("agui-gateway acls: --principal must look like User:<name>", file=sys.stderr)
        return 2
    acls = gateway_acls(settings, agent_pattern, principal, reply_topic_prefixes, create_changelogs)
    for note in overlaps(settings, agent_pattern):
        print(f"agui-gateway acls: note: {note}", file=sys.stderr)
    if action is None:
        for line in kafka_acls_commands(acls, settings.bootstrap_servers, command_config):
            print(line)
        return 0
    try:
        asyncio.run(_apply(settings, acls, delete=action == "remove"))
    except clients.SecurityFailure as exc:
        print(f"agui-gateway acls: {exc}", file=sys.stderr)
        return 2
    except (KafkaError, TimeoutError, OSError) as exc:
        print(f"agui-gateway acls: could not {action} the ACLs: {exc!r}", file=sys.stderr)
        return 2
    print(f"{'removed' if action == 'remove' else 'created'} {len(acls)} ACLs for {principal}")
    return 0


async def _apply(settings: Settings, acls: list, *, delete: bool) -> None:
    await clients.preflight(settings)
    admin = clients.admin(settings, client_id=f"{settings.client_id}-acls")
    try:
        await asyncio.wait_for(admin.start(), timeout=30)
        await asyncio.wait_for(apply(admin, acls, delete=delete), timeout=60)
    finally:
        await admin.close()


def groups_main(
    settings: Settings,
    groups: list[str],
    principal: str,
    reply_topic_prefixes: list[str],
    create_changelogs: bool,
    command_config: str,
    action: str | None,
) -> int:
    """`acls --group NAME` / `--all-groups`: the ACLs of groups of the settings."""
    unknown = [g for g in groups if g not in settings.groups]
    if unknown or not groups:
        print(
            f"agui-gateway acls: no group {', '.join(map(repr, unknown)) or 'named'} in the "
            f"settings (groups: {', '.join(settings.groups) or 'none'})",
            file=sys.stderr,
        )
        return 2
    if not principal.startswith("User:") or principal == "User:":
        print("agui-gateway acls: --principal must look like User:<name>", file=sys.stderr)
        return 2
    found = {
        acl
        for group in groups
        for acl in group_acls(settings, group, principal, reply_topic_prefixes, create_changelogs)
    }
    acls = sorted(found, key=lambda a: (a.resource_type, a.name, a.pattern, a.operation))
    for group in groups:
        print(
            f"agui-gateway acls: note: group {group!r}: Kafka authorizes topics, not agents; "
            "any principal allowed to write the group's events or requests topic can speak "
            "for every one of its agents",
            file=sys.stderr,
        )
    if action is None:
        for line in kafka_acls_commands(acls, settings.bootstrap_servers, command_config):
            print(line)
        return 0
    try:
        asyncio.run(_apply(settings, acls, delete=action == "remove"))
    except clients.SecurityFailure as exc:
        print(f"agui-gateway acls: {exc}", file=sys.stderr)
        return 2
    except (KafkaError, TimeoutError, OSError) as exc:
        print(f"agui-gateway acls: could not {action} the ACLs: {exc!r}", file=sys.stderr)
        return 2
    print(f"{'removed' if action == 'remove' else 'created'} {len(acls)} ACLs for {principal}")
    return 0
