"""`agui-gateway acls`: the least-privilege ACLs of a gateway principal, printed or applied."""

from __future__ import annotations

import asyncio
import sys

from aiokafka.errors import KafkaError

from gateway.kafka.wire import clients
from gateway.kafka.wire.acls import (
    Acl,
    apply,
    auditor_acls,
    bridge_acls,
    gateway_acls,
    group_acls,
    inbox_acls,
    kafka_acls_commands,
    overlaps,
)
from gateway.settings import Settings


def main(
    settings: Settings,
    agent_pattern: str,
    principal: str,
    reply_topic_prefixes: list[str],
    create_changelogs: bool,
    command_config: str,
    action: str | None,
    instance_names: list[str] | None = None,
    role: str = "gateway",
) -> int:
    instance_names = instance_names or []
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
    if not _principal_ok(principal):
        return 2
    problem = _misplaced(settings, role, reply_topic_prefixes, create_changelogs, instance_names)
    if problem:
        print(f"agui-gateway acls: {problem}", file=sys.stderr)
        return 2
    if role == "bridge":
        acls = bridge_acls(settings, agent_pattern, principal)
    elif role == "auditor":
        acls = auditor_acls(settings, agent_pattern, principal)
        if not settings.per_owner(settings.audit_topic):
            print(
                f"agui-gateway acls: note: audit_topic {settings.audit_topic!r} is one topic "
                "for all agents: Read on it reads every agent's trail; with a template "
                "(agui.{agent}.audit) an auditor can be given one agent's (or group's) only",
                file=sys.stderr,
            )
    elif role == "inbox":
        acls = inbox_acls(settings, principal, agent_pattern)
    else:
        acls = gateway_acls(
            settings,
            agent_pattern,
            principal,
            reply_topic_prefixes,
            create_changelogs,
            instance_names,
        )
        if settings.producer_scope == "instance" and not instance_names:
            print(
                "agui-gateway acls: note: producer_scope=instance: the transactional ids are "
                f"those of instance_name {settings.instance_name!r} (this host's name unless "
                "set); name each gateway instance with --instance-name, or all of them with a "
                "name prefix ending in *",
                file=sys.stderr,
            )
    for note in overlaps(settings, agent_pattern, role) if role in ("gateway", "bridge") else ():
        print(f"agui-gateway acls: note: {note}", file=sys.stderr)
    if role == "inbox":  # the page writes requests topics only: say when a prefix reaches more
        for note in overlaps(settings, agent_pattern):
            if note.startswith("the requests ACLs"):
                print(f"agui-gateway acls: note: {note}", file=sys.stderr)
    return _emit(settings, acls, action, command_config, principal)


def _misplaced(
    settings: Settings,
    role: str,
    reply_topic_prefixes: list[str],
    create_changelogs: bool,
    instance_names: list[str],
) -> str | None:
    """Why options given do not fit the role and settings, or None."""
    if role != "gateway" and (reply_topic_prefixes or create_changelogs or instance_names):
        return (
            "--reply-topic-prefix, --create-changelogs and --instance-name are the gateway's: "
            f"not with --role {role}"
        )
    if role == "auditor" and not settings.audit_enabled:
        return "--role auditor: the settings turn the audit trail off (audit_enabled=false)"
    if instance_names and settings.producer_scope != "instance":
        return (
            "--instance-name names the ids of producer_scope=instance, but the settings say "
            f"producer_scope={settings.producer_scope}"
        )
    for name in instance_names:
        if not name or "*" in name.removesuffix("*") or any(c.isspace() for c in name):
            return f"{name!r} is neither an instance name nor a name prefix ending in *"
    return None


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
    if not _principal_ok(principal):
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
    return _emit(settings, acls, action, command_config, principal)


def _principal_ok(principal: str) -> bool:
    """Whether `principal` names a user as Kafka's ACLs do; if not, says so."""
    if principal.startswith("User:") and principal != "User:":
        return True
    print("agui-gateway acls: --principal must look like User:<name>", file=sys.stderr)
    return False


def _emit(
    settings: Settings,
    acls: list[Acl],
    action: str | None,
    command_config: str,
    principal: str,
) -> int:
    """Print the ACLs as kafka-acls commands, or create or remove them (`action`)."""
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
