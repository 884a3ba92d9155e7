"""From a submitted answer form to the next `RunAgentInput` of the thread (pure).

A resume must cover every open interrupt of the run being continued (the spec's
coverage rule): the form holds one part per interrupt the view lists open for the
thread, each answered (`resolved`, with the payload its widget reads back) or
abandoned (`cancelled`, no payload), and they go in ONE request. The page refuses
to send a form that leaves an open interrupt out or names one the view no longer
holds (the person answers what is open now); everything else is the gateway's to
judge, as for any other request.

Form fields, per interrupt `n` (0, 1, ...): `n.id` its interrupt id, `n.status`
`resolved` or `cancelled`, `n:<pointer>` its widget's inputs (`form.py`).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gateway.core.reading import response_schema
from gateway.inbox.page import form

RESOLVED = "resolved"
CANCELLED = "cancelled"
MAX_PARTS = 100  # interrupts one form may answer (the gateway bounds a run's interrupts)


@dataclass(frozen=True, slots=True)
class Issue:
    """Why the page does not send yet: `interrupt` ("" for the whole form), where in
    the payload (`path`, a JSON Pointer; "" the payload itself), and what."""

    interrupt: str
    path: str
    message: str
    schema: bool = False  # the payload breaks the responseSchema (the gateway would reject)

    def as_json(self) -> dict[str, Any]:
        return {
            "interruptId": self.interrupt,
            "path": self.path,
            "message": self.message,
            "schema": self.schema,
        }


@dataclass(frozen=True, slots=True)
class Plan:
    """What the form says: one resume entry per interrupt, and the issues found."""

    entries: tuple[dict[str, Any], ...]
    issues: tuple[Issue, ...]

    @property
    def readable(self) -> bool:
        """Every part could be read into an entry (schema issues may remain)."""
        return not any(not issue.schema for issue in self.issues)


def expired(item: Mapping[str, Any], now_ms: int) -> bool:
    """The gateway's reading: now or earlier is expired (no expiry: never)."""
    expires = item.get("expiresAtMs")
    return isinstance(expires, int) and expires <= now_ms


def parts(fields: Mapping[str, str]) -> dict[str, tuple[str, dict[str, str]]]:
    """interrupt id -> (status, its widget's fields) from a submitted form (at most
    MAX_PARTS parts, in the order of their numbers)."""
    numbers = sorted(int(key[:-3]) for key in fields if key.endswith(".id") and key[:-3].isdigit())[
        :MAX_PARTS
    ]
    found: dict[str, tuple[str, dict[str, str]]] = {}
    for n in numbers:
        prefix = f"{n}:"
        own = {k[len(prefix) :]: v for k, v in fields.items() if k.startswith(prefix)}
        found[fields[f"{n}.id"]] = (fields.get(f"{n}.status", ""), own)
    return found


def plan(open_items: Sequence[Mapping[str, Any]], fields: Mapping[str, str], now_ms: int) -> Plan:
    """The resume entries the form gives for the thread's open interrupts (`open_items`,
    as the view lists them), in the view's order, and what stands in the way."""
    submitted = parts(fields)
    entries: list[dict[str, Any]] = []
    issues: list[Issue] = []
    listed = {str(item.get("interrupt")) for item in open_items}
    for interrupt in submitted:
        if interrupt not in listed:
            issues.append(Issue(interrupt, "", "no longer open: reload the thread"))
    for item in open_items:
        interrupt = str(item.get("interrupt"))
        if interrupt not in submitted:
            issues.append(Issue(interrupt, "", "open but not in the form: reload the thread"))
            continue
        status, own = submitted[interrupt]
        if status == CANCELLED:
            entries.append({"interruptId": interrupt, "status": CANCELLED})
            continue
        if status != RESOLVED:
            issues.append(Issue(interrupt, "", "answer it or abandon it"))
            continue
        if expired(item, now_ms):
            issues.append(Issue(interrupt, "", "expired: it can only be abandoned"))
            continue
        schema = item.get("responseSchema")
        value, problems = form.payload(form.widget(schema), own)
        issues += [Issue(interrupt, p.path, p.message) for p in problems]
        if problems:
            continue
        entry: dict[str, Any] = {"interruptId": interrupt, "status": RESOLVED}
        if value is not form.ABSENT:
            entry["payload"] = value
        entries.append(entry)
        if schema is not None:
            issues += schema_issues(interrupt, schema, entry.get("payload"))
    return Plan(tuple(entries), tuple(issues))


def schema_issues(interrupt: str, schema: Any, payload: Any) -> list[Issue]:
    """Where `payload` breaks `schema`, by the gateway's own check (an absent payload is
    checked as null, as the gateway checks it); none when the schema is unusable (the
    gateway then only warns)."""
    checked = response_schema.check(schema, payload)
    if checked.ok or not checked.usable:
        return []
    if checked.could_not_check:
        return [Issue(interrupt, "", checked.detail, schema=True)]
    return [Issue(interrupt, where, message, schema=True) for where, message in checked.problems]


def new_run_id() -> str:
    """The run the answer asks for: a fresh id, so that a second answer is a new request."""
    return f"inbox-{uuid.uuid4().hex}"


def run_input(thread: str, run_id: str, entries: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The next `RunAgentInput` of `thread` (wire form), answering with `entries`.

    It carries no messages, state, tools or context: the page has none of the thread's,
    and the resume list is the answer (agents that need the client to replay the
    conversation cannot be answered from the page)."""
    return {
        "threadId": thread,
        "runId": run_id,
        "messages": [],
        "resume": [dict(entry) for entry in entries],
    }
