"""Judging one incoming run request against its thread's state.

`judge` returns a `Decision` (forward, reject or duplicate, with every reason
and warning found, not just the first) and the thread's new state: a forward
is remembered, so a re-sent request is a duplicate and a different answer to
interrupts already answered is `already_resumed` until the agent moves the
thread on.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from dataclasses import replace
from itertools import compress, repeat
from operator import not_
from typing import Any

from gateway.core.reading import expiry, response_schema
from gateway.core.reading.shape import (
    MAX_MALFORMED,
    Path,
    Request,
    Shape,
    conforms,
    read_input,
    remove_paths,
)
from gateway.core.requests.sweep import answered_ids
from gateway.core.values.approvers import Allowed, ApproverRule, rule_for
from gateway.core.values.codes import Reason, Verdict, Warn
from gateway.core.values.decision import Answer, Caller, Decision, Policy
from gateway.core.values.findings import Finding, clip, pointer, preview
from gateway.core.values.jsontext import to_json
from gateway.core.values.thread import (
    FORWARDS_KEPT,
    ForwardRecord,
    InterruptRecord,
    RunStatus,
    ThreadState,
    bounded_id,
)

_DEFAULT_POLICY = Policy()
_NOBODY = Caller()
# Stripped members are each a warning up to this many; the rest are counted in one more.
MAX_STRIP_WARNINGS = 50
# Reasons or warnings of one code that name one entry each (duplicate and unrecognised
# resume entries) are listed up to this many; the rest are counted in one more finding,
# so a request of 25,000 entries costs no more than one of 50.
MAX_LISTED_PER_CODE = 50


class _Findings:
    def __init__(self) -> None:
        self.reasons: list[Finding] = []
        self.warnings: list[Finding] = []
        self._listed: dict[str, int] = {}
        self._unlisted: dict[tuple[str, bool], int] = {}

    def listed(self, code: Reason | Warn, rejects: bool) -> bool:
        """Whether one more finding of `code` is listed on its own (up to
        MAX_LISTED_PER_CODE); if not, it is counted for one summary finding."""
        seen = self._listed.get(str(code), 0)
        if seen < MAX_LISTED_PER_CODE:
            self._listed[str(code)] = seen + 1
            return True
        key = (str(code), rejects)
        self._unlisted[key] = self._unlisted.get(key, 0) + 1
        return False

    def take(self, code: Reason | Warn, rejects: bool, count: int) -> int:
        """How many of `count` more findings of `code` are listed on their own: as
        `listed` called `count` times (the first ones listed, the rest counted)."""
        seen = self._listed.get(str(code), 0)
        listed = max(0, min(count, MAX_LISTED_PER_CODE - seen))
        if listed:
            self._listed[str(code)] = seen + listed
        if count > listed:
            key = (str(code), rejects)
            self._unlisted[key] = self._unlisted.get(key, 0) + count - listed
        return listed

    def summarise(self) -> None:
        """One finding per code that had more than MAX_LISTED_PER_CODE, counting the rest."""
        for (code, rejects), count in self._unlisted.items():
            into = self.reasons if rejects else self.warnings
            into.append(Finding(code, f"{count:,} more {code} findings (not listed one by one)"))
        self._unlisted = {}

    def reject(self, code: Reason, detail: str, **kw: Any) -> None:
        self.reasons.append(Finding(str(code), detail, **kw))

    def warn(self, code: Warn, detail: str, **kw: Any) -> None:
        self.warnings.append(Finding(str(code), detail, **kw))


def fingerprint(run_id: str, resume: object) -> str:
    """Identity of a request for duplicate detection: its runId and resume entries."""
    body = to_json([run_id, resume], sort_keys=True)
    return hashlib.blake2b(body, digest_size=12).hexdigest()


def judge(
    state: ThreadState | None,
    raw: object,
    now_ms: int,
    policy: Policy = _DEFAULT_POLICY,
    thread_id: str | None = None,
    *,
    caller: Caller | None = None,
) -> tuple[Decision, ThreadState | None]:
    """Judge `raw` (one RunAgentInput, as decoded JSON) at `now_ms` (epoch ms).

    `thread_id` is where the request was addressed (the record key); None
    takes the input's own threadId. `caller` is who sent it and for which agent, as the
    shell verified (None: unattested, for an agent no approver rule names); the
    decision carries its identity.
    """
    caller = caller if caller is not None else _NOBODY
    decision, new = _judge(state, raw, now_ms, policy, thread_id, caller)
    if caller.identity is not None:
        decision = replace(decision, identity=caller.identity)
    return decision, new


def _judge(
    state: ThreadState | None,
    raw: object,
    now_ms: int,
    policy: Policy,
    thread_id: str | None,
    caller: Caller,
) -> tuple[Decision, ThreadState | None]:
    found = _Findings()
    if not isinstance(raw, dict):
        found.reject(Reason.MALFORMED_INPUT, "a RunAgentInput must be a JSON object", path="")
        return _reject(found, thread_id, None), state
    shape = read_input(raw)
    raw_run = raw.get("runId")
    run_id = raw_run if isinstance(raw_run, str) else None
    raw_thread = raw.get("threadId")
    if isinstance(raw_thread, str) and thread_id is not None and raw_thread != thread_id:
        found.reject(
            Reason.THREAD_MISMATCH,
            f"input names thread {preview(raw_thread)} but was addressed to thread "
            f"{preview(thread_id)}",
            path="/threadId",
        )
    thread_id = (
        thread_id
        if thread_id is not None
        else (raw_thread if isinstance(raw_thread, str) else None)
    )
    for where, message in shape.malformed:
        found.reject(Reason.MALFORMED_INPUT, clip(message), path=where)
    if shape.unlisted:
        found.reject(Reason.MALFORMED_INPUT, _unlisted(shape.unlisted))
    if shape.model is None:
        return _reject(found, thread_id, run_id), state

    model = shape.model
    raw_resume = raw.get("resume")
    print_ = fingerprint(model.run_id, raw_resume)
    if (
        state is not None
        and not found.reasons
        and any(f.fingerprint == print_ for f in state.forwards)
    ):
        return Decision(Verdict.DUPLICATE, thread_id=thread_id, run_id=run_id), state
    if caller.unverified is not None:
        found.warn(
            Warn.IDENTITY_UNVERIFIED,
            f"identity headers not believed: {clip(caller.unverified)}; judged as unattested",
        )

    for path, message in shape.stripped_unions[:MAX_STRIP_WARNINGS]:
        where = pointer(*path)
        found.warn(
            Warn.UNKNOWN_MEMBER_STRIPPED,
            f"unrecognised union member stripped at {clip(where)}: {clip(message)}",
            path=where,
        )
    for path in shape.unknown[: max(0, MAX_STRIP_WARNINGS - len(shape.stripped_unions))]:
        where = pointer(*path)
        found.warn(
            Warn.UNKNOWN_MEMBER_STRIPPED, f"unknown member {clip(where)} stripped", path=where
        )
    unlisted = len(shape.stripped_unions) + len(shape.unknown) - MAX_STRIP_WARNINGS
    if unlisted > 0:
        found.warn(
            Warn.UNKNOWN_MEMBER_STRIPPED,
            f"{unlisted:,} more unknown or unrecognised members stripped (not listed one by one)",
        )

    ids = model.ids()  # each resume entry's interrupt id
    for interrupt_id, indexes in _duplicates(ids, len(set(ids))).items():
        if found.listed(Reason.DUPLICATE_ENTRY, rejects=True):
            found.reject(
                Reason.DUPLICATE_ENTRY,
                f"{len(indexes)} resume entries name interrupt {preview(interrupt_id)} "
                f"(entries {clip(', '.join(map(str, indexes)), 100)})",
                interrupt_id=interrupt_id,
                path=pointer("resume", indexes[1]),
            )

    answers: list[Answer] = []
    entries_stripped: list[Path] = []  # resume entries naming no open interrupt
    kept: list[bool] = []  # per resume entry, whether it is kept (stripping it if not)
    known = state is not None and state.status is not RunStatus.UNKNOWN
    if not known:
        if policy.strict:
            found.reject(
                Reason.THREAD_UNKNOWN,
                f"no run seen on thread {preview(thread_id)} (strict mode)",
            )
        else:
            found.warn(
                Warn.THREAD_UNKNOWN,
                f"no run seen on thread {preview(thread_id)}; forwarded unjudged",
            )
    else:
        assert state is not None
        if state.status is RunStatus.ACTIVE:
            found.reject(
                Reason.RUN_ACTIVE,
                f"run {preview(state.run_id)} on thread {preview(thread_id)} is still active; "
                "a new input must wait until it closes",
            )
        else:
            open_ids = {i.id for i in state.interrupts}
            kept = list(map(open_ids.__contains__, ids))  # per entry: names an open interrupt
            first: dict[str, int] = {}  # each open interrupt's first entry
            for index in compress(range(len(ids)), kept):
                first.setdefault(ids[index], index)
            answers = _judge_open(state, model, first, now_ms, found)
            if policy.approvers:
                _judge_approvers(answers, first, policy.approvers, caller, found)
            not_open = list(compress(range(len(ids)), map(not_, kept)))
            if not policy.strict:
                entries_stripped = list(zip(repeat("resume"), not_open))
            code = Reason.UNRECOGNISED_ENTRY if policy.strict else Warn.UNRECOGNISED_ENTRY
            # the first ones (up to MAX_LISTED_PER_CODE) each a finding, the rest counted
            for index in not_open[: found.take(code, policy.strict, len(not_open))]:
                interrupt_id = ids[index]
                detail = (
                    f"resume entry names interrupt {preview(interrupt_id)}, which is not "
                    f"open on thread {preview(thread_id)}" + _not_open_because(state)
                )
                if policy.strict:
                    found.reject(
                        Reason.UNRECOGNISED_ENTRY,
                        detail,
                        interrupt_id=interrupt_id,
                        path=pointer("resume", index),
                    )
                else:
                    found.warn(
                        Warn.UNRECOGNISED_ENTRY,
                        detail + "; stripped",
                        interrupt_id=interrupt_id,
                        path=pointer("resume", index),
                    )

    found.summarise()
    if found.reasons:
        return _reject(found, thread_id, run_id), state
    removed = (*shape.removed, *shape.unknown, *entries_stripped)  # paths in the input received
    # the input less its unknown and unrecognised members (read by the strict validator):
    # its resume list is the input's (a resume entry is never an unrecognised element)
    forward = shape.stripped if shape.stripped is not None else remove_paths(raw, list(removed))
    if entries_stripped:
        forward = dict(forward)
        forward["resume"] = list(compress(forward["resume"], kept))
        # what is forwarded is what the protocol's models read, whatever was stripped
        if not conforms(shape, raw, forward, removed):
            return _malformed_once_stripped(shape, thread_id, run_id), state
    decision = Decision(
        Verdict.FORWARD,
        warnings=tuple(found.warnings),
        input=forward,
        thread_id=thread_id,
        run_id=run_id,
        answers=tuple(answers),
        removed=removed,
    )
    return decision, _remember(state, thread_id, model.run_id, print_, answers, now_ms)


def _unlisted(count: int) -> str:
    return (
        f"{count:,} more of the validator's errors, past the first {MAX_MALFORMED} "
        "locations (not listed one by one)"
    )


def _malformed_once_stripped(shape: Shape, thread_id: str | None, run_id: str | None) -> Decision:
    """The rejection of an input whose forward the protocol's models would not read."""
    found = _Findings()
    for where, message in shape.malformed:
        found.reject(Reason.MALFORMED_INPUT, clip(message), path=where)
    if shape.unlisted:
        found.reject(Reason.MALFORMED_INPUT, _unlisted(shape.unlisted))
    return _reject(found, thread_id, run_id)


def _duplicates(ids: list[str], distinct: int) -> dict[str, list[int]]:
    """The entries (indexes) of each interrupt id named more than once, in the order the
    ids first occur; `distinct` is how many different ids there are."""
    if distinct == len(ids):
        return {}
    twice = {i for i, n in Counter(ids).items() if n > 1}
    by_id: dict[str, list[int]] = {}
    for index, interrupt_id in enumerate(ids):
        if interrupt_id in twice:
            by_id.setdefault(interrupt_id, []).append(index)
    return by_id


def _judge_open(
    state: ThreadState,
    model: Request,
    first: dict[str, int],
    now_ms: int,
    found: _Findings,
) -> list[Answer]:
    answered_before = answered_ids(state)
    answers: list[Answer] = []
    for interrupt in state.interrupts:
        index = first.get(interrupt.id)
        if index is None:
            found.reject(
                Reason.UNCOVERED_INTERRUPT,
                f"interrupt {preview(interrupt.id)} ({preview(interrupt.reason)}"
                f"{_attribution(interrupt)}) of run {preview(state.interrupts_run_id)} has no "
                "resume entry; answer it or abandon it with status 'cancelled'",
                interrupt_id=interrupt.id,
            )
            continue
        entry = model.entry(index)
        if interrupt.id in answered_before:
            found.reject(
                Reason.ALREADY_RESUMED,
                f"interrupt {preview(interrupt.id)} was already answered by a forwarded request; "
                "wait for the agent's next run",
                interrupt_id=interrupt.id,
                path=pointer("resume", index),
            )
        answers.append(
            Answer(
                interrupt.id,
                interrupt.reason,
                entry.status,
                state.interrupts_closed_at_ms,
                interrupt.subagent_run_id,
                interrupt.tool_name,
            )
        )
        judged = expiry.judge(interrupt.expires_at, now_ms)
        if judged is expiry.Expiry.UNREADABLE:
            found.warn(
                Warn.EXPIRY_UNREADABLE,
                f"expiresAt {preview(interrupt.expires_at)} of interrupt {preview(interrupt.id)} "
                "is not an "
                "ISO 8601 time; judged not expired",
                interrupt_id=interrupt.id,
            )
        if entry.status != "resolved":
            continue
        if judged is expiry.Expiry.EXPIRED:
            found.reject(
                Reason.EXPIRED_INTERRUPT,
                f"interrupt {preview(interrupt.id)} expired at {preview(interrupt.expires_at)}; "
                "it can only be "
                "abandoned (status 'cancelled')",
                interrupt_id=interrupt.id,
                path=pointer("resume", index, "status"),
            )
        if interrupt.response_schema is not None or interrupt.response_schema_unusable:
            _check_payload(interrupt, entry.payload, index, found)
    return answers


def _judge_approvers(
    answers: list[Answer],
    first: dict[str, int],
    rules: tuple[ApproverRule, ...],
    caller: Caller,
    found: _Findings,
) -> None:
    """One reason per answered or abandoned interrupt whose rule does not allow the caller."""
    for answer in answers:
        rule = rule_for(rules, caller.agent, caller.group, answer.reason, answer.tool_name)
        if rule is None:
            continue
        allowed = rule.allows(caller.identity, answer.status)
        if allowed is Allowed.YES:
            continue
        doing = "answer" if answer.status == "resolved" else "abandon"
        where = pointer("resume", first[answer.interrupt_id])
        what = f"interrupt {preview(answer.interrupt_id)} ({preview(answer.reason)}"
        what += f", tool {preview(answer.tool_name)})" if answer.tool_name is not None else ")"
        if allowed is Allowed.UNVERIFIED:
            why = caller.unverified or "the request carries no identity"
            found.reject(
                Reason.APPROVER_UNVERIFIED,
                f"{what} may only be {doing}ed by a verified approver, and {clip(why)}",
                interrupt_id=answer.interrupt_id,
                path=where,
            )
        else:
            assert caller.identity is not None
            found.reject(
                Reason.APPROVER_NOT_ALLOWED,
                f"{preview(caller.identity.subject)} may not {doing} {what}: the approver "
                f"policy names {_named(rule, answer.status)}",
                interrupt_id=answer.interrupt_id,
                path=where,
            )


def _named(rule: ApproverRule, status: str) -> str:
    subjects, groups = rule.who(status)
    parts = [f"subjects {', '.join(map(preview, subjects[:5]))}"] if subjects else []
    if groups:
        parts.append(f"groups {', '.join(map(preview, groups[:5]))}")
    return clip(" and ".join(parts) or "nobody", 200)


def _check_payload(interrupt: InterruptRecord, payload: Any, index: int, found: _Findings) -> None:
    if interrupt.response_schema is None:  # judged unusable when the interrupt was recorded
        result = response_schema.SchemaCheck(
            ok=True, usable=False, detail=interrupt.response_schema_unusable or ""
        )
    else:
        result = response_schema.check(interrupt.response_schema, payload)
    if not result.usable:
        found.warn(
            Warn.RESPONSE_SCHEMA_UNUSABLE,
            f"responseSchema of interrupt {preview(interrupt.id)} cannot be used "
            f"({clip(result.detail)}); "
            "payload not checked",
            interrupt_id=interrupt.id,
        )
    elif result.could_not_check:
        found.reject(
            Reason.PAYLOAD_SCHEMA_MISMATCH,
            f"payload for interrupt {preview(interrupt.id)}: {clip(result.detail)}",
            interrupt_id=interrupt.id,
            path=pointer("resume", index, "payload"),
        )
    elif not result.ok:
        for where, message in result.problems:
            found.reject(
                Reason.PAYLOAD_SCHEMA_MISMATCH,
                f"payload for interrupt {preview(interrupt.id)} breaks its responseSchema at "
                f"{clip(where or '/')}: {clip(message)}",
                interrupt_id=interrupt.id,
                path=pointer("resume", index, "payload") + where,
            )


def _attribution(interrupt: InterruptRecord) -> str:
    if not interrupt.subagent_run_id:
        return ""
    return f", subagent {preview(interrupt.subagent_run_id)}"


def _not_open_because(state: ThreadState) -> str:
    if state.interrupts:
        return ""
    return f" (its latest run {preview(state.run_id)} is {state.status}, not interrupted)"


def _reject(found: _Findings, thread_id: str | None, run_id: str | None) -> Decision:
    return Decision(
        Verdict.REJECT,
        reasons=tuple(found.reasons),
        warnings=tuple(found.warnings),
        thread_id=thread_id,
        run_id=run_id,
    )


def _remember(
    state: ThreadState | None,
    thread_id: str | None,
    run_id: str,
    print_: str,
    answers: list[Answer],
    now_ms: int,
) -> ThreadState | None:
    if thread_id is None:
        return state
    base = state if state is not None else ThreadState(thread_id)
    record = ForwardRecord(
        run_id=bounded_id(run_id),
        fingerprint=print_,
        answered_run_id=base.interrupts_run_id if answers else None,
        interrupt_ids=tuple(a.interrupt_id for a in answers),
    )
    return replace(base, forwards=(*base.forwards, record)[-FORWARDS_KEPT:], updated_ms=now_ms)
