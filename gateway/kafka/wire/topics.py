"""Topic naming, discovery and creation: the gateway's Kafka binding."""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass
from typing import Any

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.errors import (
    ClusterAuthorizationFailedError,
    KafkaError,
    TopicAlreadyExistsError,
    TopicAuthorizationFailedError,
    for_code,
)

from gateway.settings import Settings

# Kafka's own rule for topic names.
LEGAL_TOPIC = re.compile(r"^[A-Za-z0-9._-]{1,249}$")


@dataclass(frozen=True, slots=True)
class AgentTopics:
    agent: str
    events: str
    requests: str
    run_requests: str
    changelog: str
    rejections: str  # the owner's, or with no {agent} in the setting the one for all
    warnings: str
    audit: str | None = None  # as rejections; None with audit_enabled off
    interrupts: str | None = None  # the inbox's, one for all; None with interrupts_topic ""


class TopicNames:
    """Maps agents to topic names and back, from the settings' templates."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._events = settings.topic_regex(settings.events_topic)
        self._requests = settings.topic_regex(settings.requests_topic)

    def for_agent(self, agent: str) -> AgentTopics:
        s = self._settings
        return AgentTopics(
            agent=agent,
            events=s.topic(s.events_topic, agent),
            requests=s.topic(s.requests_topic, agent),
            run_requests=s.topic(s.run_requests_topic, agent),
            changelog=s.topic(s.changelog_topic, agent),
            rejections=s.topic(s.rejections_topic, agent),
            warnings=s.topic(s.warnings_topic, agent),
            audit=s.topic(s.audit_topic, agent) if s.audit_enabled else None,
            interrupts=s.interrupts_topic or None,
        )

    def owner_of_topic(self, topic: str) -> str | None:
        """The agent (or group) whose events or requests topic this is, else None."""
        found = self.classify(topic)
        return found[0] if found is not None else None

    def classify(self, topic: str) -> tuple[str, str] | None:
        """(agent, "events"|"requests") for a consumed topic, else None."""
        match = self._events.match(topic)
        if match:
            return match.group("agent"), "events"
        match = self._requests.match(topic)
        if match:
            return match.group("agent"), "requests"
        return None


@dataclass(frozen=True, slots=True)
class TopicReport:
    topic: str
    action: str  # created | exists | mismatch | refused (Kafka refused the principal)
    detail: str = ""


# What CreateTopics answers, per topic, to a principal without the Create ACL: on the
# topic (or the cluster) in current brokers, on the cluster in some older ones.
CREATE_REFUSALS = (TopicAuthorizationFailedError, ClusterAuthorizationFailedError)


async def _describe_partitions(
    admin: AIOKafkaAdminClient, names: list[str], hidden: set[str] | None = None
) -> dict[str, int]:
    """Each topic's partition count; topics Kafka hides from the principal (no Describe
    ACL) are added to `hidden`."""
    found: dict[str, int] = {}
    if not names:
        return found
    for topic in await admin.describe_topics(names):
        code = topic.get("error_code", 0)
        if code == 0:
            found[topic["topic"]] = len(topic.get("partitions") or [])
        elif code == TopicAuthorizationFailedError.errno and hidden is not None:
            hidden.add(topic["topic"])
    return found


async def _wait_visible(
    admin: AIOKafkaAdminClient,
    names: list[str],
    created: list[str],
    timeout_s: float = 15.0,
    hidden: set[str] | None = None,
) -> dict[str, int]:
    """Partition counts once the created topics show in metadata, or are hidden from
    the principal (bounded wait)."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while True:
        if hidden is not None:
            hidden.clear()
        existing = await _describe_partitions(admin, names, hidden)
        if all(name in existing or name in (hidden or ()) for name in created):
            return existing
        if asyncio.get_running_loop().time() >= deadline:
            return existing
        await asyncio.sleep(0.1)


async def _describe_cleanups(admin: AIOKafkaAdminClient, topics: list[str]) -> dict[str, str]:
    """Each topic's cleanup.policy, in one DescribeConfigs request for all of them."""
    if not topics:
        return {}
    responses = await admin.describe_configs(
        [ConfigResource(ConfigResourceType.TOPIC, t, {"cleanup.policy": None}) for t in topics]
    )
    found: dict[str, str] = {}
    for response in responses:
        for resource in response.to_object()["resources"]:
            if resource["error_code"]:  # e.g. no DescribeConfigs ACL: never skip the check
                raise for_code(resource["error_code"])(resource["resource_name"])
            for entry in resource["config_entries"]:
                if entry["config_names"] == "cleanup.policy":
                    found[resource["resource_name"]] = str(entry["config_value"])
    return found


async def ensure_topics(
    admin: AIOKafkaAdminClient,
    wanted: dict[str, tuple[int, dict[str, str]]],
) -> list[TopicReport]:
    """Create each missing topic; report existing ones whose layout differs, and ones
    Kafka refused to create for want of an ACL (`refused`).

    `wanted` maps a topic to (partitions, configs). Idempotent. However many topics,
    it asks Kafka a bounded number of times: one Metadata request for what exists,
    one CreateTopics for what is missing, one DescribeConfigs for the existing
    topics' cleanup policies (and Metadata again while created topics appear).
    """
    existing = await _describe_partitions(admin, list(wanted))
    missing = [name for name in wanted if name not in existing]
    reports: list[TopicReport] = []
    failed: dict[str, tuple[type[KafkaError], str]] = {}
    hidden: set[str] = set()  # topics Kafka hides from this principal (no Describe)
    if missing:
        new = [
            NewTopic(name, wanted[name][0], 1, topic_configs=wanted[name][1]) for name in missing
        ]
        try:
            failed = create_errors(await admin.create_topics(new))
        except TopicAlreadyExistsError:
            pass  # created concurrently: checked below like any existing topic
        creating = [name for name in missing if name not in failed]
        existing = await _wait_visible(admin, list(wanted), creating, hidden=hidden)
        reports.extend(TopicReport(name, "created") for name in creating if name in existing)
    policies = await _describe_cleanups(
        admin,
        [
            name
            for name, (_, configs) in wanted.items()
            if configs.get("cleanup.policy") and name in existing and name not in missing
        ],
    )
    for name, (partitions, configs) in wanted.items():
        if name in failed:
            error, message = failed[name]
            if issubclass(error, CREATE_REFUSALS):
                reports.append(TopicReport(name, "refused", f"{error.message}: may not create it"))
            else:
                why = f"{error.message}" + (f": {message}" if message else "")
                reports.append(TopicReport(name, "mismatch", f"could not be created ({why})"))
            continue
        if name in missing and name in existing:
            continue
        if name in hidden:
            reports.append(
                TopicReport(name, "created", "Kafka hides it from this principal (no Describe ACL)")
            )
            continue
        if name not in existing:
            reports.append(TopicReport(name, "mismatch", "could not be created"))
            continue
        problems = []
        if existing[name] != partitions:
            problems.append(f"has {existing[name]} partitions, expected {partitions}")
        if configs.get("cleanup.policy"):
            policy = policies.get(name)
            if policy is not None and policy != configs["cleanup.policy"]:
                problems.append(f"cleanup.policy is {policy}, expected {configs['cleanup.policy']}")
        if problems:
            reports.append(TopicReport(name, "mismatch", "; ".join(problems)))
        else:
            reports.append(TopicReport(name, "exists"))
    return reports


def create_errors(response: Any) -> dict[str, tuple[type[KafkaError], str]]:
    """The topics a CreateTopics response did not create: Kafka's error and message for
    each. One that exists already is not among them (it is checked as existing)."""
    failed: dict[str, tuple[type[KafkaError], str]] = {}
    for entry in response.topic_errors:
        name, code = entry[0], entry[1]
        if code in (0, TopicAlreadyExistsError.errno):
            continue
        message = entry[2] if len(entry) > 2 and entry[2] else ""
        failed[name] = (for_code(code), message)
    return failed


def agent_topic_layout(
    settings: Settings, agent: str, partitions: int, shared_partitions: int
) -> dict[str, tuple[int, dict[str, str]]]:
    """What `topics create` makes for one agent (or group), plus its rejections, warnings
    and (with audit_enabled) audit topics: the shared ones, or its own when those
    settings are templates (with the shared ones' partitions and configs either way), and
    the inbox's compacted interrupts topic (one for all, with the shared partitions)
    unless it is off."""
    names = TopicNames(settings).for_agent(agent)
    log_append = {"message.timestamp.type": "LogAppendTime"}
    inbox: dict[str, tuple[int, dict[str, str]]] = {}
    if settings.interrupts_topic:
        inbox[settings.interrupts_topic] = (shared_partitions, interrupts_configs())
    layout = {
        names.events: (partitions, dict(log_append)),
        names.requests: (partitions, dict(log_append)),
        names.run_requests: (partitions, {}),
        names.changelog: (partitions, changelog_configs()),
        names.rejections: (shared_partitions, {}),
        names.warnings: (shared_partitions, {}),
        **inbox,
    }
    if names.audit is not None:
        layout[names.audit] = (shared_partitions, audit_configs(settings))
    return layout


def audit_configs(settings: Settings) -> dict[str, str]:
    """The audit topic's: deleted (never compacted: every record is kept, not the last
    of each key) after `audit_retention_days`, or never (-1)."""
    days = settings.audit_retention_days
    retention = "-1" if days < 0 else str(days * 24 * 3600 * 1000)
    return {"cleanup.policy": "delete", "retention.ms": retention}


def interrupts_configs() -> dict[str, str]:
    """The interrupts topic's: compacted as a changelog (the latest record per interrupt,
    tombstones removed a day after compaction), so a reader starting from the beginning
    reads about as many records as there are open interrupts."""
    return changelog_configs()


def changelog_configs() -> dict[str, str]:
    return {"cleanup.policy": "compact", "min.compaction.lag.ms": "0", "segment.ms": "3600000"}
