"""`agui-gateway check`: the offline judge.

Replays one thread's events through the core, then judges one input, exactly
as the service would (minus Kafka). Prints one JSON object; on a forward its
`input` is what the service would forward: the input file's own bytes less the
stripped members, every value as written (`1E9` stays `1E9`).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from gateway.codec import jsonio
from gateway.codec.records import forward_bytes
from gateway.core import Caller, Policy, ThreadState, Verdict, apply_event, judge
from gateway.core.reading.expiry import iso_micros
from gateway.core.values.approvers import ApproverRule
from gateway.core.values.findings import Finding


class CheckInputError(Exception):
    """The files themselves cannot be read (exit status 2)."""


@dataclass(frozen=True)
class CheckResult:
    verdict: Verdict
    document: dict[str, Any]


def parse_now(text: str | None) -> int:
    if text is None:
        return int(datetime.now(UTC).timestamp() * 1000)
    at = iso_micros(text)
    if at is None:
        raise CheckInputError(f"--now {text!r} is not an ISO 8601 time")
    return at // 1000


def read_events(path: Path) -> list[Any]:
    try:
        lines = path.read_bytes().splitlines()
    except OSError as exc:
        raise CheckInputError(f"cannot read events file {path}: {exc.strerror}") from None
    events = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            events.append(jsonio.loads(line))
        except (jsonio.JSONDecodeError, jsonio.TooDeep) as exc:
            raise CheckInputError(f"{path}:{number}: not JSON: {exc}") from None
    return events


def read_input(path: Path) -> tuple[bytes, Any]:
    """The input file's bytes and their JSON value."""
    try:
        body = path.read_bytes()
    except OSError as exc:
        raise CheckInputError(f"cannot read input file {path}: {exc.strerror}") from None
    try:
        return body, jsonio.loads(body)
    except (jsonio.JSONDecodeError, jsonio.TooDeep) as exc:
        raise CheckInputError(f"{path}: not JSON: {exc}") from None


def _thread_of(events: list[Any], raw_input: Any) -> str:
    for event in events:
        if isinstance(event, dict) and isinstance(event.get("threadId"), str):
            return event["threadId"]
    if isinstance(raw_input, dict) and isinstance(raw_input.get("threadId"), str):
        return raw_input["threadId"]
    return ""


def run_check(
    events: list[Any],
    raw_input: Any,
    now_ms: int,
    policy: Policy,
    body: bytes | None = None,
    caller: Caller | None = None,
) -> CheckResult:
    """Judge `raw_input` after `events`. `body` is the bytes `raw_input` was read from
    (None: `raw_input` written as JSON); a forward's `input` is those bytes as the
    service forwards them, and a forward over the service's record limit is rejected
    `input_too_large` as the service rejects it. `caller`: who sent it, for the policy's
    approver rules (None: unattested)."""
    thread_id = _thread_of(events, raw_input)
    state: ThreadState | None = None
    event_warnings: list[Finding] = []
    for index, event in enumerate(events):
        outcome = apply_event(state, thread_id, event, at_ms=now_ms)
        state = outcome.state
        for warning in outcome.warnings:
            where = f"/events/{index}" + (warning.path or "")
            event_warnings.append(
                Finding(
                    warning.code,
                    f"event {index}: {warning.detail}",
                    warning.interrupt_id,
                    where,
                    warning.rule,
                )
            )
    decision, _ = judge(
        state, raw_input, now_ms, policy, thread_id=thread_id or None, caller=caller
    )
    # as the service: the bytes received less what was stripped, and a forward over the
    # record limit rejected `input_too_large`
    received = body if body is not None else jsonio.dumps(raw_input)
    decision, forward = forward_bytes(decision, received)
    document = decision.to_json()
    if forward is not None:
        # whitespace around the value is left out so that it sits in the document like
        # any member
        document["input"] = jsonio.verbatim(forward.strip(b" \t\n\r"))
    document["warnings"] = [w.to_json() for w in event_warnings] + document["warnings"]
    return CheckResult(decision.verdict, document)


def main(
    events_path: str,
    input_path: str,
    now: str | None,
    strict: bool,
    caller: Caller | None = None,
    approvers: tuple[ApproverRule, ...] = (),
) -> int:
    # The contract holds for every input: one JSON object on stdout, or exit 2 with
    # one line on stderr. A failure while reading or judging that is not the files' fault
    # is a defect of the gateway; it is reported so rather than as a traceback, and an
    # exception a library could only print ("Exception ignored ...") is counted instead
    # of reaching stderr.
    ignored: list[str] = []
    previous_hook = sys.unraisablehook
    sys.unraisablehook = lambda unraisable: ignored.append(type(unraisable.exc_value).__name__)
    try:
        now_ms = parse_now(now)
        events = read_events(Path(events_path))
        body, raw_input = read_input(Path(input_path))
        policy = Policy(strict=strict, approvers=approvers)
        result = run_check(events, raw_input, now_ms, policy, body, caller)
        try:
            out = orjson.dumps(result.document, option=orjson.OPT_INDENT_2)
        except orjson.JSONEncodeError:  # big integers or deep nesting: compact, but exact
            out = jsonio.dumps(result.document)
    except CheckInputError as exc:
        print(f"agui-gateway check: {_one_line(str(exc))}", file=sys.stderr)
        return 2
    except Exception as exc:  # noqa: BLE001 - the one-line contract, whatever failed
        print(f"agui-gateway check: {_failure(exc)}", file=sys.stderr)
        return 2
    finally:
        sys.unraisablehook = previous_hook
    sys.stdout.buffer.write(out + b"\n")
    sys.stdout.flush()
    return 0 if result.verdict is Verdict.FORWARD else 1


def _one_line(text: str) -> str:
    """`text` on one line (a file name or a parser's message may hold line breaks)."""
    return " ".join(text.split())


def _failure(exc: BaseException) -> str:
    """One line naming a failure of the gateway itself, never a traceback."""
    try:
        text = " ".join(str(exc)[:200].split())
    except Exception:  # noqa: BLE001 - an exception whose text cannot be made
        text = ""
    name = type(exc).__name__
    return f"the gateway failed while judging: {name}{': ' + text if text else ''} (a defect)"
