"""The ACLs a gateway principal needs, and no more: as data, as `kafka-acls` commands, applied.

What the gateway does on Kafka, and the permission each needs (WRITE implies
DESCRIBE, READ implies DESCRIBE, in Kafka's own rules):

- consume an agent's events and requests topics: Topic READ
- forward, reject, warn, audit: Topic WRITE on run-requests, rejections, warnings
  and (with `audit_enabled`) the audit topic (the agents' own rejections, warnings
  and audit topics when those settings are templates)
- keep and restore thread state: Topic READ, WRITE on the changelog, and
  DESCRIBE_CONFIGS to check it is compacted (CREATE only if the gateway is to
  create changelogs itself; `topics create` makes them)
- reply: Topic WRITE on the reply topics
- the inbox's interrupts topic: Topic WRITE
- its consumer group: Group READ (joins, fetches and commits offsets in transactions)
- its transactional ids: TransactionalId WRITE. A transactional producer is
  idempotent under that permission: no Cluster IDEMPOTENT_WRITE is needed. Which
  ids depends on `producer_scope` (see `gateway.kafka.wire.txnids`, which builds them
  for the producers and for these ACLs alike): `<group_id>.<agent>.<partition>`
  (prefixed `<group_id>.<agent>.`) per pair, or `<group_id>.instance.<instance_name>`
  and its `.1` ... `.<instance_producers - 1>` per instance (literal, for each
  instance named; prefixed for a name prefix `gw-*`).

An auditor (`agui-gateway audit`, `auditor_acls`) reads the audit topic: Topic READ
on it, without a consumer group (it assigns the partitions itself).
The inbox (`inbox_acls`) reads the interrupts topic, which the gateway writes; its page
writes the requests topics and reads (and creates) its own reply topic.

The bridge (`agui-gateway bridge`, `bridge_acls`) reads run-requests, writes
events and its run markers (a topic it creates and checks is compacted), in its
own group `bridge_group_id` with transactional ids `<bridge_group_id>.<agent>.<partition>`.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import for_code
from aiokafka.protocol.admin import CreateAclsRequest, DeleteAclsRequest

from gateway.kafka.wire import txnids
from gateway.settings import Settings

_AGENT = "{agent}"

# Kafka's protocol codes (org.apache.kafka.common.resource / acl).
RESOURCE_TYPES = {"topic": 2, "group": 3, "cluster": 4, "transactional-id": 5}
PATTERN_TYPES = {"literal": 3, "prefixed": 4}
OPERATIONS = {
    "Read": 3,
    "Write": 4,
    "Create": 5,
    "Describe": 8,
    "DescribeConfigs": 10,
    "IdempotentWrite": 12,
}
ALLOW = 3


@dataclass(frozen=True, order=True)
class Acl:
    resource_type: str  # topic | group | transactional-id | cluster
    name: str
    pattern: str  # literal | prefixed
    operation: str
    principal: str


def _agent_topics(
    settings: Settings, agent_pattern: str, principal: str
) -> Callable[..., list[Acl]]:
    """`topic(template, *operations)`: the ACLs on the topics of `template` for the agents
    `agent_pattern` names (literal for one agent, prefixed for `prefix*`)."""
    prefixed = agent_pattern.endswith("*")
    agent = agent_pattern[:-1] if prefixed else agent_pattern
    pattern = "prefixed" if prefixed else "literal"

    def name(template: str) -> str:
        # A prefixed ACL covers every topic starting with the template's head and
        # the agent prefix: whatever follows {agent} cannot be part of a prefix.
        return template.split(_AGENT)[0] + agent if prefixed else settings.topic(template, agent)

    def topic(template: str, *operations: str) -> list[Acl]:
        return [Acl("topic", name(template), pattern, op, principal) for op in operations]

    return topic


def _agent_part(agent_pattern: str) -> str:
    """The agent part of an id for `agent_pattern`: the name, or the prefix then VARIES."""
    if agent_pattern.endswith("*"):
        return agent_pattern[:-1] + txnids.VARIES
    return agent_pattern


def transactional_ids(
    settings: Settings,
    agent_pattern: str,
    principal: str,
    instance_names: Iterable[str] = (),
) -> list[Acl]:
    """TransactionalId Write on exactly the ids the gateway's producers take, by
    `producer_scope`: every partition of the agents named (pair), or each producer of
    each instance named (instance; default: `instance_name` of the settings), all of
    the instances whose name starts so for `prefix*`."""
    if settings.producer_scope == "pair":
        head = txnids.prefix_of(txnids.pair_id, settings, _agent_part(agent_pattern), txnids.VARIES)
        return [Acl("transactional-id", head, "prefixed", "Write", principal)]
    acls = []
    for name in list(instance_names) or [settings.instance_name]:
        if name.endswith("*"):
            head = txnids.prefix_of(txnids.instance_id, settings, 0, name[:-1] + txnids.VARIES)
            acls.append(Acl("transactional-id", head, "prefixed", "Write", principal))
            continue
        acls += [
            Acl(
                "transactional-id",
                txnids.instance_id(settings, index, name),
                "literal",
                "Write",
                principal,
            )
            for index in range(settings.instance_producers)
        ]
    return acls


def gateway_acls(
    settings: Settings,
    agent_pattern: str,
    principal: str,
    reply_topic_prefixes: Iterable[str] = (),
    create_changelogs: bool = False,
    instance_names: Iterable[str] = (),
) -> list[Acl]:
    """The gateway's ACLs for the agents `agent_pattern` names: one agent, or `prefix*`."""
    topic = _agent_topics(settings, agent_pattern, principal)
    changelog_ops = ["Read", "Write", "DescribeConfigs"] + (["Create"] if create_changelogs else [])
    acls = [
        *topic(settings.events_topic, "Read"),
        *topic(settings.requests_topic, "Read"),
        *topic(settings.run_requests_topic, "Write"),
        *topic(settings.changelog_topic, *changelog_ops),
        *_outputs(settings, topic, principal),
        *_interrupts(settings, "Write", principal),
        *(Acl("topic", p, "prefixed", "Write", principal) for p in reply_topic_prefixes),
        Acl("group", settings.group_id, "literal", "Read", principal),
        *transactional_ids(settings, agent_pattern, principal, instance_names),
    ]
    return _sorted(acls)


def _outputs(settings: Settings, topic: Callable[..., list[Acl]], principal: str) -> list[Acl]:
    """Write on the rejections, warnings and (with audit_enabled) audit topics: the one for
    all, or (a template) the agents' own, as their other topics."""
    names = [settings.rejections_topic, settings.warnings_topic]
    if settings.audit_enabled:
        names.append(settings.audit_topic)
    acls: list[Acl] = []
    for name in names:
        acls += _shared_or_own(settings, topic, principal, name, "Write")
    return acls


def _shared_or_own(
    settings: Settings,
    topic: Callable[..., list[Acl]],
    principal: str,
    name: str,
    operation: str,
) -> list[Acl]:
    """`operation` on a topic setting that is either one topic for all or a template."""
    if settings.per_owner(name):
        return topic(name, operation)
    return [Acl("topic", name, "literal", operation, principal)]


def auditor_acls(settings: Settings, agent_pattern: str, principal: str) -> list[Acl]:
    """An auditor's ACLs (`agui-gateway audit`): Read on the audit topic of the agents
    `agent_pattern` names. With one audit topic for all agents that is every agent's
    trail; with a template (`agui.{agent}.audit`) the named agents' (or groups') only."""
    topic = _agent_topics(settings, agent_pattern, principal)
    return _sorted(_shared_or_own(settings, topic, principal, settings.audit_topic, "Read"))


def _interrupts(settings: Settings, operation: str, principal: str) -> list[Acl]:
    """`operation` on the inbox's interrupts topic (none when it is off)."""
    if not settings.interrupts_topic:
        return []
    return [Acl("topic", settings.interrupts_topic, "literal", operation, principal)]


def inbox_acls(settings: Settings, principal: str, agent_pattern: str = "*") -> list[Acl]:
    """The inbox's ACLs (`agui-gateway inbox`, or a gateway with inbox_enabled).

    Its reader: Read on the interrupts topic, on the rejections and warnings topics
    its summary counts from, and (with audit_enabled) on the audit topic its threads'
    verdicts come from (the ones for all, or, when those settings are templates, the
    topics of the agents `agent_pattern` names); it joins no consumer group. Its
    page sends answers as any client does: Write on the requests topics of the agents
    (or groups) `agent_pattern` names, and Read and Create on `inbox_page_reply_topic`,
    where the verdicts come back (read without a consumer group). Nothing else: no
    run-requests topic, so an answer can only reach an agent through the gateway."""
    topic = _agent_topics(settings, agent_pattern, principal)
    acls = _interrupts(settings, "Read", principal)
    names = [settings.rejections_topic, settings.warnings_topic]
    if settings.audit_enabled:
        names.append(settings.audit_topic)
    for name in names:
        acls += _shared_or_own(settings, topic, principal, name, "Read")
    acls += topic(settings.requests_topic, "Write")
    acls += [
        Acl("topic", settings.inbox_page_reply_topic, "literal", operation, principal)
        for operation in ("Read", "Create")
    ]
    return _sorted(acls)


def bridge_acls(settings: Settings, agent_pattern: str, principal: str) -> list[Acl]:
    """The bridge's ACLs for the agents `agent_pattern` names: it consumes run-requests
    in its group, writes events and its run markers in transactions, and creates the
    markers' topic (and checks that it is compacted)."""
    topic = _agent_topics(settings, agent_pattern, principal)
    part = _agent_part(agent_pattern)
    head = txnids.prefix_of(txnids.bridge_id, settings, part, txnids.VARIES)
    return _sorted(
        [
            *topic(settings.run_requests_topic, "Read"),
            *topic(settings.events_topic, "Write"),
            *topic(settings.bridge_runs_topic, "Read", "Write", "Create", "DescribeConfigs"),
            Acl("group", settings.bridge_group_id, "literal", "Read", principal),
            Acl("transactional-id", head, "prefixed", "Write", principal),
        ]
    )


def _sorted(acls: Iterable[Acl]) -> list[Acl]:
    return sorted(set(acls), key=lambda a: (a.resource_type, a.name, a.pattern, a.operation))


def overlaps(settings: Settings, agent_pattern: str, role: str = "gateway") -> list[str]:
    """For `prefix*`: the prefixed topic ACLs that also reach another kind of topic.

    With the default templates (`agui.{agent}.events`, ...) every per-agent topic
    of `prefix*` agents starts with the same `agui.<prefix>`: the prefixed ACLs
    then grant Read and Write on events and requests alike. Exact agent names, or
    templates with distinct heads (`agui.events.{agent}`), keep them apart.
    """
    if not agent_pattern.endswith("*"):
        return []
    agent = agent_pattern[:-1]
    templates = (
        (
            ("run-requests", settings.run_requests_topic),
            ("events", settings.events_topic),
            ("bridge-runs", settings.bridge_runs_topic),
        )
        if role == "bridge"
        else (
            ("events", settings.events_topic),
            ("requests", settings.requests_topic),
            ("run-requests", settings.run_requests_topic),
            ("changelog", settings.changelog_topic),
            *(
                (kind, template)
                for kind, template in (
                    ("rejections", settings.rejections_topic),
                    ("warnings", settings.warnings_topic),
                    *((("audit", settings.audit_topic),) if settings.audit_enabled else ()),
                )
                if settings.per_owner(template)
            ),
        )
    )
    heads = {kind: template.split(_AGENT)[0] + agent for kind, template in templates}
    notes = []
    for kind, head in heads.items():
        others = [k for k, h in heads.items() if k != kind and h.startswith(head)]
        if others:
            notes.append(
                f"the {kind} ACLs on topic prefix {head} also cover the {', '.join(others)} "
                "topics; name one agent at a time, or use topic templates with distinct "
                "heads, for least privilege"
            )
    return notes


def kafka_acls_commands(acls: list[Acl], bootstrap: str, command_config: str) -> list[str]:
    """One `kafka-acls --add` command per resource, with its operations."""
    grouped: dict[tuple[str, str, str, str], list[str]] = {}
    for acl in acls:
        key = (acl.principal, acl.resource_type, acl.pattern, acl.name)
        grouped.setdefault(key, []).append(acl.operation)
    lines = []
    for (principal, resource_type, pattern, name), operations in grouped.items():
        args = [
            "kafka-acls",
            "--bootstrap-server",
            bootstrap,
            "--command-config",
            command_config,
            "--add",
            "--allow-principal",
            principal,
        ]
        for op in operations:
            args += ["--operation", op]
        if resource_type == "cluster":
            args.append("--cluster")
        else:
            args += [f"--{resource_type}", name]
        if pattern != "literal":
            args += ["--resource-pattern-type", pattern]
        lines.append(shlex.join(args))
    return lines


async def apply(admin: AIOKafkaAdminClient, acls: list[Acl], *, delete: bool = False) -> None:
    """Create (or delete) each ACL through an admin client; raise on the first refusal."""
    for acl in acls:
        fields = (
            RESOURCE_TYPES[acl.resource_type],
            "kafka-cluster" if acl.resource_type == "cluster" else acl.name,
            PATTERN_TYPES[acl.pattern],
            acl.principal,
            "*",
            OPERATIONS[acl.operation],
            ALLOW,
        )
        request = DeleteAclsRequest(*fields) if delete else CreateAclsRequest(*fields)
        response = await admin._send_request(request)
        entries = response.filter_responses if delete else response.creation_responses
        for entry in entries:
            if entry[0] != 0:
                raise for_code(entry[0])(f"{acl}: {entry[1]}")


def group_acls(
    settings: Settings,
    group: str,
    principal: str,
    reply_topic_prefixes: Iterable[str] = (),
    create_changelogs: bool = False,
) -> list[Acl]:
    """The gateway's ACLs for one group of the settings: its topics are the templates
    with {agent} = the group's name, so they are the ACLs of that one name, literal.

    Kafka authorizes topics, not the agents a record names: any principal allowed to
    Write a group's events or requests topic can speak for every agent of the group."""
    if group not in settings.groups:
        raise ValueError(f"no group {group!r} in the settings")
    return gateway_acls(settings, group, principal, reply_topic_prefixes, create_changelogs)
