"""A thread's verdicts as the inbox keeps them: an audit record read into a small one.

`read` takes one audit topic record's value (schemas/audit.schema.json) and gives the
thread it is about and the verdict as the thread answer shows it: the verdict, its
reason codes (each once, in order), the correlation id, who answered (the verified
subject, or unattested), the interrupts the request answered or abandoned, the run it
started when it was forwarded, and when it was decided. The verdict is kept as its
JSON bytes (decoded only for an answer), bounded: at most `MAX_CODES` codes and
`MAX_ENTRIES` resume entries (the rest counted), every string as the audit record
bounds it (ids and subjects at most about 1,000 characters).

`TrailStatus` is what the view knows of the audit trail's reading: off, starting,
which topics it reads, from when, and whether it has read them to their end; for an
agent whose topic it does not read, why its verdicts are not known.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson

from gateway.core.values.jsontext import fitted
from gateway.inbox.items import iso

AUDIT_VERSION = 1
VERDICTS = ("forward", "reject", "duplicate")
MAX_CODES = 20  # reason codes kept per verdict (each code once)
MAX_ENTRIES = 20  # resume entries kept per verdict
UNATTESTED = "unattested"

# why a thread's verdicts are not known (`verdictsUnknownReason`)
AUDIT_DISABLED = "audit_disabled"
STARTING = "starting"
TOPIC_MISSING = "topic_missing"


class UnreadableAudit(ValueError):
    """A record that is not an audit record this inbox reads."""


@dataclass(frozen=True, slots=True)
class Verdict:
    agent: str
    thread: str
    decided_at_ms: int
    forwarded_run: str | None  # the run the forward started; None unless forwarded
    value: bytes  # the answer's verdict object, as JSON


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def read(value: bytes | None) -> Verdict | None:
    """The verdict an audit record holds; None for one about no thread (an agent or a
    thread the request did not name usably); UnreadableAudit when it is not one."""
    try:
        body = orjson.loads(value or b"")
    except orjson.JSONDecodeError as exc:
        raise UnreadableAudit("not JSON") from exc
    if not isinstance(body, dict) or body.get("auditVersion") != AUDIT_VERSION:
        raise UnreadableAudit("not an audit record of a known version")
    verdict = body.get("verdict")
    decided = body.get("decidedAtMs")
    if verdict not in VERDICTS or not isinstance(decided, int) or isinstance(decided, bool):
        raise UnreadableAudit("no verdict or decision time")
    agent, thread = _text(body.get("agent")), _text(body.get("threadId"))
    if agent is None or thread is None:
        return None
    codes: list[str] = []
    reasons = body.get("reasons")
    for reason in reasons if isinstance(reasons, list) else ():
        code = _text(reason.get("code")) if isinstance(reason, dict) else None
        if code is not None and code not in codes:
            codes.append(code)
    codes_omitted = max(0, len(codes) - MAX_CODES) + _count(body.get("reasonsOmitted"))
    entries = body.get("interrupts")
    entries = entries if isinstance(entries, list) else []
    kept = [
        {
            "interrupt": _text(e.get("interruptId")),
            "status": _text(e.get("status")),
            "forwarded": e.get("forwarded") is True,
        }
        for e in entries[:MAX_ENTRIES]
        if isinstance(e, dict)
    ]
    entries_omitted = max(0, len(entries) - MAX_ENTRIES) + _count(body.get("interruptsOmitted"))
    who = body.get("identity")
    subject = _text(who.get("subject")) if isinstance(who, dict) else None
    run = _text(body.get("runId"))
    forwarded_run = run if verdict == "forward" else None
    answer = {
        "verdict": verdict,
        "reasons": codes[:MAX_CODES],
        "reasonsOmitted": codes_omitted,
        "correlationId": _text(body.get("correlationId")),
        "attestation": "verified" if subject is not None else UNATTESTED,
        "subject": subject,
        "interrupts": kept,
        "interruptsOmitted": entries_omitted,
        "run": run,
        "forwardedRun": forwarded_run,
        "atMs": decided,
        "at": iso(decided),
    }
    return Verdict(agent, thread, decided, forwarded_run, fitted(orjson.dumps(answer)))


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


class TrailStatus:
    """What the view knows of its audit trail reader (set by the reader)."""

    def __init__(self) -> None:
        self.state = STARTING  # AUDIT_DISABLED, STARTING, or "reading"
        self.since_ms: int | None = None  # decisions before it are not read (None: all)
        self.caught_up = False
        self._topics: frozenset[str] = frozenset()
        self._topic_of: Callable[[str], str] = lambda agent: ""

    def off(self) -> None:
        self.state = AUDIT_DISABLED

    def reading(
        self, topics: frozenset[str], topic_of: Callable[[str], str], since_ms: int | None
    ) -> None:
        """The reader reads `topics` (maybe none yet), from `since_ms`; `topic_of` names
        an agent's audit topic."""
        self.state = "reading"
        self._topics = topics
        self._topic_of = topic_of
        self.since_ms = since_ms

    def unknown(self, agent: str) -> str | None:
        """Why `agent`'s verdicts are not known; None when its audit topic is read."""
        if self.state != "reading":
            return self.state
        return None if self._topic_of(agent) in self._topics else TOPIC_MISSING
