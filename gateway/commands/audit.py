"""`agui-gateway audit`: the audit trail read back for an operator, filtered.

It reads the audit topic (read_committed: only what the gateway committed) from the
beginning, or from `--since` by the records' timestamps, up to the end offsets as
of its start, and stops: bounded however busy the topic. It needs Read on the audit
topic and no consumer group (`agui-gateway acls --role auditor`). The newest
`--limit` matching records are printed in decision order, as JSON Lines or a table.
"""

from __future__ import annotations

import asyncio
import heapq
import re
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TextIO

from aiokafka import TopicPartition
from aiokafka.errors import KafkaError

from gateway.codec import jsonio
from gateway.kafka.wire import clients
from gateway.settings import Settings

CONNECT_TIMEOUT_S = 30.0
# Records are stamped when the gateway's producer sends them, a little after their
# decision; --since starts reading this much earlier so that no clock skew between
# the gateway and the broker (LogAppendTime) hides a record from the filter.
SINCE_MARGIN_MS = 10 * 60 * 1000
_AGO = re.compile(r"^(\d+(?:\.\d+)?)\s*([smhd])$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}


class Refusal(Exception):
    """A clear, one-line reason the command cannot run (exit 2)."""


@dataclass(frozen=True, slots=True)
class Filters:
    agent: str | None = None
    thread: str | None = None
    group: str | None = None
    approver: str | None = None
    approver_group: str | None = None
    unattested: bool = False
    verdict: str | None = None
    since_ms: int | None = None
    until_ms: int | None = None

    def match(self, body: Any) -> bool:
        """Whether an audit record passes every filter given."""
        if not isinstance(body, dict):
            return False
        who = body.get("identity")
        who = who if isinstance(who, dict) else {}
        decided = body.get("decidedAtMs")
        checks = (
            (self.agent, lambda: body.get("agent") == self.agent),
            (self.thread, lambda: body.get("threadId") == self.thread),
            (self.group, lambda: body.get("group") == self.group),
            (self.approver, lambda: who.get("subject") == self.approver),
            (self.approver_group, lambda: self.approver_group in (who.get("groups") or ())),
            (self.unattested or None, lambda: body.get("attestation") == "unattested"),
            (self.verdict, lambda: body.get("verdict") == self.verdict),
            (
                self.since_ms,
                lambda: isinstance(decided, int) and decided >= (self.since_ms or 0),
            ),
            (
                self.until_ms,
                lambda: isinstance(decided, int) and decided < (self.until_ms or 0),
            ),
        )
        return all(test() for given, test in checks if given is not None)


def parse_time(text: str, now_s: float) -> int:
    """Epoch ms of an ISO 8601 time (UTC when it names no offset) or of a duration ago
    (`90s`, `15m`, `2h`, `7d`)."""
    ago = _AGO.match(text.strip())
    if ago:
        return int((now_s - float(ago.group(1)) * _UNIT_S[ago.group(2)]) * 1000)
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise Refusal(
            f"{text!r} is neither an ISO 8601 time (2026-12-03T14:00:00Z) nor a duration "
            "ago (90s, 15m, 2h, 7d)"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def audit_topic(settings: Settings, agent: str | None, group: str | None) -> str:
    """The topic to read: the one for all, or (a template) the owner's of --agent or
    --group."""
    if not settings.per_owner(settings.audit_topic):
        return settings.audit_topic
    owner = group if group is not None else (settings.owner_of(agent) if agent else None)
    if owner is None:
        raise Refusal(
            f"audit_topic {settings.audit_topic!r} is one topic per agent or group: name "
            "the --agent or the --group whose trail to read"
        )
    if not re.fullmatch(settings.agent_name_pattern, owner):
        raise Refusal(
            f"{owner!r} is not a valid agent or group name (pattern {settings.agent_name_pattern})"
        )
    return settings.topic(settings.audit_topic, owner)


async def read(
    settings: Settings,
    topic: str,
    since_ms: int | None,
    timeout_s: float,
    take: Callable[[Any], None],
) -> int:
    """Hand `take` each record of `topic` up to its end offsets as of the start (from
    `since_ms`, less a margin, when given); how many records were not JSON."""
    try:
        await clients.preflight(settings)
    except clients.SecurityFailure as exc:
        raise Refusal(str(exc)) from None
    consumer = clients.consumer(
        settings,
        client_id=f"{settings.client_id}-audit",
        group_id=None,
        enable_auto_commit=False,
        isolation_level="read_committed",
        auto_offset_reset="earliest",
    )
    unreadable = 0
    try:
        try:
            await asyncio.wait_for(consumer.start(), timeout=CONNECT_TIMEOUT_S)
            await asyncio.wait_for(clients.know_topics(consumer, [topic]), CONNECT_TIMEOUT_S)
        except clients.AUTHORIZATION_ERRORS as exc:
            raise Refusal(_denied(settings, topic, exc)) from None
        except (KafkaError, TimeoutError, OSError) as exc:
            raise Refusal(f"cannot reach Kafka at {settings.bootstrap_servers}: {exc!r}") from None
        partitions = clients.partitions_for(consumer, topic)
        if not partitions:
            raise Refusal(
                f"audit topic {topic} does not exist, or this principal may not describe it "
                "(grant it Read: agui-gateway acls --role auditor)"
            )
        tps = [TopicPartition(topic, p) for p in sorted(partitions)]
        consumer.assign(tps)
        deadline = time.monotonic() + timeout_s
        try:
            ends = await asyncio.wait_for(consumer.end_offsets(tps), CONNECT_TIMEOUT_S)
            await _seek(consumer, tps, since_ms)
            while True:
                behind = [tp for tp in tps if await consumer.position(tp) < ends[tp]]
                if not behind:
                    return unreadable
                if time.monotonic() > deadline:
                    raise Refusal(f"not read to the end of {topic} in {timeout_s:g} s (--timeout)")
                batch = await consumer.getmany(*behind, timeout_ms=500)
                for tp, records in batch.items():
                    for record in records:
                        if record.offset >= ends[tp]:
                            continue  # committed after the start: not this reading's
                        try:
                            take(jsonio.loads(record.value or b""))
                        except (jsonio.JSONDecodeError, jsonio.TooDeep):
                            unreadable += 1
        except clients.AUTHORIZATION_ERRORS as exc:
            raise Refusal(_denied(settings, topic, exc)) from None
        except (KafkaError, TimeoutError, OSError) as exc:
            raise Refusal(f"reading {topic} failed: {exc!r}") from None
    finally:
        await clients.stop(consumer)


async def _seek(consumer: Any, tps: list[TopicPartition], since_ms: int | None) -> None:
    if since_ms is None:
        await consumer.seek_to_beginning(*tps)
        return
    start = max(0, since_ms - SINCE_MARGIN_MS)
    found = await asyncio.wait_for(
        consumer.offsets_for_times({tp: start for tp in tps}), CONNECT_TIMEOUT_S
    )
    ends = await consumer.end_offsets(tps)
    for tp in tps:
        at = found.get(tp)
        consumer.seek(tp, at.offset if at is not None else ends[tp])


def _denied(settings: Settings, topic: str, exc: Exception) -> str:
    who = (
        f"User:{settings.sasl_plain_username}"
        if settings.security_protocol.startswith("SASL") and settings.sasl_plain_username
        else "this client's principal"
    )
    return (
        f"Kafka refuses {who} Read on {topic} ({type(exc).__name__}): grant it "
        "(agui-gateway acls --role auditor), or run this command as a principal that may"
    )


class Newest:
    """The newest `limit` records offered (by decision time), and how many were offered;
    limit 0 keeps every one."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.seen = 0
        self._heap: list[tuple[int, int, Any]] = []

    def offer(self, body: Any) -> None:
        self.seen += 1
        decided = body.get("decidedAtMs")
        item = (decided if isinstance(decided, int) else 0, self.seen, body)
        if not self.limit or len(self._heap) < self.limit:
            heapq.heappush(self._heap, item)
        elif item[:2] > self._heap[0][:2]:
            heapq.heapreplace(self._heap, item)

    def sorted(self) -> list[Any]:
        return [body for _, _, body in sorted(self._heap, key=lambda i: i[:2])]


COLUMNS = ("decided at", "verdict", "agent", "thread", "run", "approver", "interrupts", "reasons")
CELL_CHARS = 40


def row(body: dict[str, Any]) -> list[str]:
    who = body.get("identity")
    approver = who.get("subject", "?") if isinstance(who, dict) else "unattested"
    interrupts = ", ".join(
        f"{i.get('interruptId')}:{i.get('status')}" for i in body.get("interrupts") or ()
    )
    if body.get("interruptsOmitted"):
        interrupts += f" (+{body['interruptsOmitted']})"
    reasons = ", ".join(str(r.get("code")) for r in body.get("reasons") or ())
    agent = str(body.get("agent"))
    if body.get("group"):
        agent += f" ({body['group']})"
    return [
        str(body.get("decidedAt")),
        str(body.get("verdict")),
        agent,
        str(body.get("threadId")),
        str(body.get("runId")),
        approver,
        interrupts or "-",
        reasons or "-",
    ]


def table(bodies: Iterable[dict[str, Any]], out: TextIO) -> None:
    """The records as aligned columns, each cell cut to CELL_CHARS."""

    def cut(text: str) -> str:
        text = text.replace("\n", " ")
        return text if len(text) <= CELL_CHARS else text[: CELL_CHARS - 3] + "..."

    rows = [[cut(cell) for cell in row(body)] for body in bodies]
    widths = [max([len(c)] + [len(r[i]) for r in rows]) for i, c in enumerate(COLUMNS)]
    for cells in (list(COLUMNS), *rows):
        print("  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip(), file=out)


def main(
    settings: Settings,
    filters: Filters,
    output: str,
    limit: int,
    timeout_s: float,
    out: TextIO = sys.stdout,
) -> int:
    if limit < 0 or timeout_s <= 0:
        print("agui-gateway audit: --limit must be >= 0 and --timeout > 0", file=sys.stderr)
        return 2
    if not settings.audit_enabled:
        print(
            "agui-gateway audit: note: the settings turn the audit trail off "
            "(audit_enabled=false); reading what the topic holds",
            file=sys.stderr,
        )
    newest = Newest(limit)

    def take(body: Any) -> None:
        if filters.match(body):
            newest.offer(body)

    try:
        topic = audit_topic(settings, filters.agent, filters.group)
        unreadable = asyncio.run(read(settings, topic, filters.since_ms, timeout_s, take))
    except Refusal as exc:
        print(f"agui-gateway audit: {exc}", file=sys.stderr)
        return 2
    found = newest.sorted()
    if output == "json":
        for body in found:
            out.write(jsonio.dumps(body).decode() + "\n")
    elif found:
        table(found, out)
    if unreadable:
        print(f"agui-gateway audit: {unreadable} records of {topic} were not JSON", file=sys.stderr)
    if newest.seen > len(found):
        print(
            f"agui-gateway audit: {newest.seen} records match; the newest {len(found)} shown "
            "(--limit)",
            file=sys.stderr,
        )
    elif not found:
        print(f"agui-gateway audit: no record of {topic} matches", file=sys.stderr)
    return 0
