"""Whose a record is: the agent a record on a pair's topics is for, and how a pair keys
the threads it holds.

Two layouts, side by side in one gateway (the `groups` setting chooses):

- An agent's own topics (`agui.<agent>.events`, ...): the topic names the agent. The
  `agui-agent` header is optional; present, it must name that agent. Threads are keyed
  by their threadId alone, as the changelog's keys always were.
- A group's topics (`agui.<group>.events`, ...): many agents share them, and every
  record names its agent in the `agui-agent` header. Threads are keyed by (agent,
  threadId) (`changelog.group_key`), so two agents' threads of one id never meet.

A record whose agent is not usable is `Unusable`, with the code (a `Reason` for a
request, a `Warn` for an event, of the same value) and a sentence saying why.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from gateway.codec import changelog
from gateway.codec.records import HEADER_AGENT
from gateway.core.codes import Reason
from gateway.settings import Settings

# Longer than a topic name may be, a name could never have topics of its own (and an
# agent may move between the layouts): illegal.
MAX_AGENT_CHARS = 249
# Agent names (header values) whose verdict a group keeps: its live agents, bounded.
MAX_KNOWN = 65_536


@dataclass(frozen=True, slots=True)
class Unusable:
    """Why a record's agent cannot be used: `code` is a Reason/Warn value."""

    code: str
    detail: str


def agent_header(record: Any) -> bytes | None:
    """The first `agui-agent` header's value exactly as received, or None (an aiokafka
    ConsumerRecord or an InRecord: both have `headers` as (name, bytes) pairs)."""
    for name, value in record.headers or ():
        if name == HEADER_AGENT:
            return None if value is None else bytes(value)
    return None


def _shown(raw: bytes) -> str:
    text = raw[:200].decode("utf-8", "replace")
    return repr(text) + (f" ({len(raw):,} bytes)" if len(raw) > 200 else "")


class OwnTopics:
    """An agent's own topics: the pair's agent is the topic's."""

    group: str | None = None

    def __init__(self, agent: str) -> None:
        self.agent = agent
        self._raw = agent.encode()

    def identify(self, record: Any) -> str | Unusable:
        raw = agent_header(record)
        if raw is None or raw == self._raw:
            return self.agent
        return Unusable(
            str(Reason.AGENT_NOT_ALLOWED),
            f"the agui-agent header names {_shown(raw)}, but this is agent {self.agent!r}'s "
            "own topic; on an agent's own topics the header may only name that agent",
        )

    def key(self, agent: str, thread_id: str) -> str:
        return thread_id

    def split(self, key: str) -> tuple[str, str]:
        """(agent, threadId) of a stored key."""
        return self.agent, key

    def thread_of(self, key: str) -> str | None:
        return key

    def active_key(self, record: Any) -> bytes | None:
        """The key the pair's set of active threads holds for a record's thread (None:
        the record cannot belong to one)."""
        if record.headers and isinstance(self.identify(record), Unusable):
            return None
        return record.key  # type: ignore[no-any-return]


class GroupTopics:
    """A group's topics: each record names one of the group's agents."""

    def __init__(self, group: str, settings: Settings) -> None:
        self.group = group
        self.agent = group  # the pair's owner: what metrics are labelled with
        self._settings = settings
        self._legal = re.compile(settings.agent_name_pattern)
        self._known: dict[bytes, str | Unusable] = {}

    def identify(self, record: Any) -> str | Unusable:
        raw = agent_header(record)
        if raw is None or raw == b"":
            return Unusable(
                str(Reason.AGENT_MISSING),
                f"a record on group {self.group!r}'s topics must name its agent in the "
                f"{HEADER_AGENT} header; it has none",
            )
        found = self._known.get(raw)
        if found is None:
            found = self._judge(raw)
            if len(self._known) >= MAX_KNOWN:
                self._known.clear()
            self._known[raw] = found
        return found

    def _judge(self, raw: bytes) -> str | Unusable:
        try:
            name = raw.decode("utf-8")
        except UnicodeDecodeError:
            return Unusable(
                str(Reason.AGENT_NAME_ILLEGAL),
                f"the {HEADER_AGENT} header {_shown(raw)} is not UTF-8",
            )
        if len(name) > MAX_AGENT_CHARS or not self._legal.fullmatch(name):
            return Unusable(
                str(Reason.AGENT_NAME_ILLEGAL),
                f"the {HEADER_AGENT} header {_shown(raw)} is not a legal agent name (at most "
                f"{MAX_AGENT_CHARS} characters matching agent_name_pattern "
                f"{self._settings.agent_name_pattern!r})",
            )
        s = self._settings
        if not s.group_allows(self.group, name) or s.owner_of(name) != self.group:
            owner = s.owner_of(name)
            where = (
                f"its topics are group {owner!r}'s"
                if owner in s.groups
                else "it has topics of its own"
            )
            return Unusable(
                str(Reason.AGENT_NOT_ALLOWED),
                f"agent {name!r} is not one of group {self.group!r}'s agents ({where})",
            )
        return name

    def key(self, agent: str, thread_id: str) -> str:
        return changelog.group_key(agent, thread_id)

    def split(self, key: str) -> tuple[str, str]:
        found = changelog.split_group_key(key)
        return found if found is not None else (self.group, key)

    def thread_of(self, key: str) -> str | None:
        found = changelog.split_group_key(key)
        return None if found is None else found[1]

    def active_key(self, record: Any) -> bytes | None:
        if not record.key:
            return None
        agent = self.identify(record)
        if isinstance(agent, Unusable):
            return None
        return b"%d:%s:%s" % (len(agent), agent.encode(), record.key)


Layout = OwnTopics | GroupTopics


def layout_for(owner: str, settings: Settings) -> Layout:
    """The layout of the topics `owner` (a topic's `{agent}`) names."""
    if owner in settings.groups:
        return GroupTopics(owner, settings)
    return OwnTopics(owner)
