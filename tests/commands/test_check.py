"""`agui-gateway check`, run as the real command on temporary files.

Exit status: 0 forward, 1 reject, 2 unreadable files. stdout carries exactly
one JSON object (and nothing at all on exit 2, when stderr says why).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

SCRIPT = Path(sys.executable).parent / "agui-gateway"
COMMAND = [str(SCRIPT)] if SCRIPT.exists() else [sys.executable, "-m", "gateway"]

THREAD = "thread-cli"
NOW = "2025-06-01T12:00:00Z"


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*COMMAND, *args], capture_output=True, text=True, timeout=60, check=False
    )


def write_events(path: Path, events: list[Any], blank_lines: bool = False) -> Path:
    lines = [json.dumps(e) for e in events]
    if blank_lines:
        lines = ["", *[x for line in lines for x in (line, "   ", "")], "\t"]
    path.write_text("\n".join(lines) + ("\n" if lines else ""))
    return path


def interrupted_run(*interrupts: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {"type": "RUN_STARTED", "threadId": THREAD, "runId": "run-1"},
        {"type": "TEXT_MESSAGE_START", "messageId": "m", "role": "assistant"},
        {"type": "TEXT_MESSAGE_END", "messageId": "m"},
        {
            "type": "RUN_FINISHED",
            "threadId": THREAD,
            "runId": "run-1",
            "outcome": {"type": "interrupt", "interrupts": list(interrupts)},
        },
    ]


def resume_input(*entries: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "threadId": THREAD,
        "runId": "run-2",
        "messages": [{"id": "u-1", "role": "user", "content": "ok"}],
        "resume": list(entries),
        **extra,
    }


APPROVAL = {"id": "int-1", "reason": "tool_call", "toolCallId": "call-1"}


@pytest.fixture
def files(tmp_path: Path):
    def make(events: list[Any], raw: Any, *, blank_lines: bool = False) -> tuple[str, str]:
        events_path = write_events(tmp_path / "events.jsonl", events, blank_lines)
        input_path = tmp_path / "input.json"
        input_path.write_text(json.dumps(raw))
        return str(events_path), str(input_path)

    return make


def check(events: str, raw: str, *extra: str) -> subprocess.CompletedProcess[str]:
    return run("check", "--events", events, "--input", raw, *extra)


def document(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    parsed = json.loads(done.stdout)  # the whole of stdout is one JSON document
    assert isinstance(parsed, dict)
    return parsed


# --- forward and reject ----------------------------------------------------------------------


def test_forward_exits_0_with_one_json_object(files):
    raw = resume_input(
        {"interruptId": "int-1", "status": "resolved", "payload": {"approved": True}},
        forwardedProps={"keep": {"me": [1, None]}},
    )
    done = check(*files(interrupted_run(APPROVAL), raw), "--now", NOW)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    out = document(done)
    assert set(out) == {"verdict", "reasons", "warnings", "input"}
    assert out["verdict"] == "forward"
    assert out["reasons"] == [] and out["warnings"] == []
    assert out["input"] == raw


def test_reject_exits_1_without_an_input(files):
    second = {"id": "int-2", "reason": "input_required"}
    raw = resume_input({"interruptId": "int-1", "status": "cancelled"})
    done = check(*files(interrupted_run(APPROVAL, second), raw), "--now", NOW)
    assert done.returncode == 1, done.stderr
    out = document(done)
    assert set(out) == {"verdict", "reasons", "warnings"}
    assert out["verdict"] == "reject"
    assert [(r["code"], r["interruptId"]) for r in out["reasons"]] == [
        ("uncovered_interrupt", "int-2")
    ]
    assert all(r["detail"] for r in out["reasons"])


def test_a_json_input_that_is_not_an_object_is_a_reject_not_an_error(files):
    done = check(*files(interrupted_run(APPROVAL), [1, 2]), "--now", NOW)
    assert done.returncode == 1
    out = document(done)
    assert [r["code"] for r in out["reasons"]] == ["malformed_input"]


def test_event_warnings_are_reported_at_their_event(files):
    events = [*interrupted_run(APPROVAL), {"type": "TEXT_MESSAGE_START", "messageId": "late"}]
    raw = resume_input({"interruptId": "int-1", "status": "cancelled"})
    done = check(*files(events, raw), "--now", NOW)
    assert done.returncode == 0
    [warning] = document(done)["warnings"]
    assert (warning["code"], warning["rule"]) == ("protocol_violation", "event_after_close")
    assert warning["path"] == "/events/4"
    assert warning["detail"].startswith("event 4:")


def test_a_forwarded_input_nested_deeper_than_orjson_writes_is_still_printed(files):
    deep: Any = []
    for _ in range(300):
        deep = [deep]
    raw = resume_input({"interruptId": "int-1", "status": "resolved", "payload": deep})
    done = check(*files(interrupted_run(APPROVAL), raw), "--now", NOW)
    assert done.returncode == 0, done.stderr
    assert document(done)["input"] == raw


# --- --now, --strict -------------------------------------------------------------------------


def test_now_is_honoured(files):
    expiring = {**APPROVAL, "expiresAt": NOW}
    raw = resume_input({"interruptId": "int-1", "status": "resolved"})
    paths = files(interrupted_run(expiring), raw)
    before = check(*paths, "--now", "2025-06-01T11:59:59.999Z")
    assert before.returncode == 0
    at = check(*paths, "--now", NOW)
    assert at.returncode == 1
    assert [r["code"] for r in document(at)["reasons"]] == ["expired_interrupt"]
    offset = check(*paths, "--now", "2025-06-01T14:00:00+02:00")  # the same instant
    assert offset.returncode == 1


def test_without_now_the_real_clock_is_used(files):
    raw = resume_input({"interruptId": "int-1", "status": "resolved"})
    past = {**APPROVAL, "expiresAt": "2001-01-01T00:00:00Z"}
    future = {**APPROVAL, "expiresAt": "2999-01-01T00:00:00Z"}
    assert check(*files(interrupted_run(past), raw)).returncode == 1
    assert check(*files(interrupted_run(future), raw)).returncode == 0


def test_strict_is_honoured(files):
    raw = resume_input(
        {"interruptId": "int-1", "status": "cancelled"},
        {"interruptId": "int-ghost", "status": "resolved"},
    )
    paths = files(interrupted_run(APPROVAL), raw)
    lenient = check(*paths, "--now", NOW)
    assert lenient.returncode == 0
    out = document(lenient)
    assert [w["code"] for w in out["warnings"]] == ["unrecognised_entry"]
    assert [e["interruptId"] for e in out["input"]["resume"]] == ["int-1"]
    strict = check(*paths, "--now", NOW, "--strict")
    assert strict.returncode == 1
    assert [(r["code"], r["path"]) for r in document(strict)["reasons"]] == [
        ("unrecognised_entry", "/resume/1")
    ]


# --- the events file -------------------------------------------------------------------------


def test_an_empty_events_file_is_an_unknown_thread(files):
    raw = resume_input({"interruptId": "anything", "status": "resolved", "payload": 1})
    paths = files([], raw)
    assert Path(paths[0]).read_text() == ""
    lenient = check(*paths, "--now", NOW)
    assert lenient.returncode == 0
    out = document(lenient)
    assert [w["code"] for w in out["warnings"]] == ["thread_unknown"]
    assert out["input"] == raw
    strict = check(*paths, "--now", NOW, "--strict")
    assert strict.returncode == 1
    assert [r["code"] for r in document(strict)["reasons"]] == ["thread_unknown"]


def test_blank_lines_in_events_are_ignored(files):
    raw = resume_input({"interruptId": "int-2", "status": "cancelled"})
    second = {"id": "int-2", "reason": "input_required"}
    plain = check(*files(interrupted_run(APPROVAL, second), raw), "--now", NOW)
    spaced = check(*files(interrupted_run(APPROVAL, second), raw, blank_lines=True), "--now", NOW)
    assert plain.returncode == spaced.returncode == 1
    assert document(spaced) == document(plain)
    assert [r["interruptId"] for r in document(spaced)["reasons"]] == ["int-1"]


# --- exit 2: the files cannot be read ----------------------------------------------------------


def assert_unreadable(done: subprocess.CompletedProcess[str], *mentions: str) -> None:
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.startswith("agui-gateway check: ")
    assert "Traceback" not in done.stderr
    for text in mentions:
        assert text in done.stderr


def test_a_missing_events_file(tmp_path, files):
    _, raw = files([], resume_input())
    missing = tmp_path / "nope.jsonl"
    assert_unreadable(check(str(missing), raw, "--now", NOW), str(missing))


def test_a_missing_input_file(tmp_path, files):
    events, _ = files([], resume_input())
    missing = tmp_path / "nope.json"
    assert_unreadable(check(events, str(missing), "--now", NOW), str(missing))


def test_a_directory_is_not_readable_as_a_file(tmp_path, files):
    events, raw = files([], resume_input())
    assert_unreadable(check(str(tmp_path), raw, "--now", NOW), str(tmp_path))
    assert_unreadable(check(events, str(tmp_path), "--now", NOW), str(tmp_path))


def test_a_non_json_events_line_names_the_line(tmp_path, files):
    events, raw = files(interrupted_run(APPROVAL), resume_input())
    lines = Path(events).read_text().splitlines()
    lines.insert(2, '{"type": "TEXT_MESSAGE_CONTENT", broken')
    Path(events).write_text("\n".join(lines) + "\n")
    assert_unreadable(check(events, raw, "--now", NOW), f"{events}:3")


@pytest.mark.parametrize("body", ["", "{not json", '{"threadId": "t"} trailing', "\xff\xfe"])
def test_an_input_file_that_is_not_json(tmp_path, files, body):
    events, raw = files([], resume_input())
    Path(raw).write_bytes(body.encode("latin-1"))
    assert_unreadable(check(events, raw, "--now", NOW), raw)


def test_an_unreadable_now(files):
    assert_unreadable(check(*files([], resume_input()), "--now", "half past noon"), "--now")


# --- the command itself ----------------------------------------------------------------------


def test_help_lists_check():
    done = run("--help")
    assert done.returncode == 0
    assert "check" in done.stdout
    sub = run("check", "--help")
    assert sub.returncode == 0
    for option in ("--events", "--input", "--now", "--strict"):
        assert option in sub.stdout


def test_missing_arguments_are_a_usage_error():
    done = run("check", "--events", "x.jsonl")
    assert done.returncode == 2
    assert done.stdout == ""
    assert "--input" in done.stderr


def test_the_module_entry_point_is_the_same_command(files):
    raw = resume_input({"interruptId": "int-1", "status": "cancelled"})
    events, input_path = files(interrupted_run(APPROVAL), raw)
    args = ["check", "--events", events, "--input", input_path, "--now", NOW]
    via_module = subprocess.run(
        [sys.executable, "-m", "gateway", *args], capture_output=True, text=True, timeout=60
    )
    assert via_module.returncode == 0, via_module.stderr
    assert json.loads(via_module.stdout) == document(run(*args))


# --- the contract for every input: one JSON object on stdout, or exit 2 and one line ---------
# In process (gateway.commands.check.main), so that stderr is the check's own, nothing else's.


def deep_text(depth: int, leaf: str = '"x"') -> str:
    return "[" * depth + leaf + "]" * depth


def run_main(tmp_path: Path, events: list[str], raw: str, capfd) -> tuple[int, str, str]:
    from gateway.commands import check as check_module

    events_path = tmp_path / "events.jsonl"
    events_path.write_text("\n".join(events) + "\n")
    input_path = tmp_path / "input.json"
    input_path.write_text(raw)
    capfd.readouterr()
    status = check_module.main(str(events_path), str(input_path), NOW, False)
    out, err = capfd.readouterr()
    return status, out, err


def holds_the_contract(status: int, out: str, err: str) -> None:
    if status == 2:
        assert out == "" and err.count("\n") == 1 and err.startswith("agui-gateway check: ")
    else:
        assert status in (0, 1) and err == ""
        limit = sys.getrecursionlimit()
        sys.setrecursionlimit(10_000)  # the standard parser recurses per level
        try:
            parsed = json.loads(out)  # the whole of stdout is one JSON document
        finally:
            sys.setrecursionlimit(limit)
        assert isinstance(parsed, dict) and parsed["verdict"] in ("forward", "reject")


DEEP = deep_text(1_000)
STARTED = json.dumps({"type": "RUN_STARTED", "threadId": THREAD, "runId": "run-1"})
PLAIN_INPUT = json.dumps({"threadId": THREAD, "runId": "run-2", "messages": []})


def test_a_nested_run_started_with_a_run_id_nested_1000_deep(tmp_path, capfd):
    """Issue reproduction: a traceback and exit 1 with nothing on stdout."""
    # 998 levels in all: as deep as a record may be read (jsonio.MAX_DEPTH)
    nested = f'{{"type": "RUN_STARTED", "threadId": "{THREAD}", "runId": {deep_text(997)}}}'
    status, out, err = run_main(tmp_path, [STARTED, nested], PLAIN_INPUT, capfd)
    holds_the_contract(status, out, err)
    assert status == 1  # the run is still active
    [warning] = json.loads(out)["warnings"]
    assert warning["rule"] == "nested_run_started" and len(warning["detail"]) < 400


@pytest.mark.parametrize("event_type", ["RUN_FINISHED", "SUBAGENT_FINISHED"])
def test_an_outcome_type_nested_1000_deep_prints_nothing_on_stderr(tmp_path, capfd, event_type):
    finished = (
        json.dumps(
            {"type": event_type, "threadId": THREAD, "runId": "run-1", "subagentRunId": "s"}
        )[:-1]
        + f', "outcome": {{"type": {deep_text(997)}}}}}'
    )  # 999 levels in all: as deep as a record may be read (jsonio.MAX_DEPTH)
    status, out, err = run_main(tmp_path, [STARTED, finished], PLAIN_INPUT, capfd)
    holds_the_contract(status, out, err)
    rules = [w.get("rule") for w in json.loads(out)["warnings"]]
    assert "malformed_event" in rules


@pytest.mark.parametrize(
    "raw",
    [
        # a message role, a content part type nested 1,000 deep
        PLAIN_INPUT[:-15] + f'"messages": [{{"id": "m", "role": {DEEP}, "content": "x"}}]}}',
        PLAIN_INPUT[:-15]
        + f'"messages": [{{"id": "m", "role": "user", "content": [{{"type": {DEEP}}}]}}]}}',
        # a payload nested 1,000 deep, an input nested 1,024 deep
        PLAIN_INPUT[:-1]
        + f', "resume": [{{"interruptId": "a", "status": "resolved", "payload": {DEEP}}}]}}',
        deep_text(1_023, PLAIN_INPUT),
    ],
    ids=["role", "content_type", "payload", "input_1024"],
)
def test_deeply_nested_inputs_hold_the_contract(tmp_path, capfd, raw):
    interrupted = json.dumps(
        {
            "type": "RUN_FINISHED",
            "threadId": THREAD,
            "runId": "run-1",
            "outcome": {"type": "interrupt", "interrupts": [{"id": "a", "reason": "x"}]},
        }
    )
    status, out, err = run_main(tmp_path, [STARTED, interrupted], raw, capfd)
    holds_the_contract(status, out, err)


def test_a_failure_of_the_gateway_itself_is_exit_2_with_one_line(tmp_path, capfd, monkeypatch):
    """No known input fails the judge any more; this stands in for the next defect."""
    from gateway.commands import check as check_module

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RecursionError("maximum recursion depth exceeded\nwhile judging")

    monkeypatch.setattr(check_module, "judge", broken)
    status, out, err = run_main(tmp_path, [STARTED], PLAIN_INPUT, capfd)
    assert status == 2 and out == ""
    assert err == (
        "agui-gateway check: the gateway failed while judging: RecursionError: maximum "
        "recursion depth exceeded while judging (a defect)\n"
    )


# --- the forwarded input is the input's own bytes, as the service forwards them ----------

EXACT_NUMBERS = {
    "upper_exponent": "1E9",
    "negative_zero": "-0",
    "underflow": "1e-400",
    "twenty_digits": "1.00000000000000000001",
    "beyond_a_double": "1" + "0" * 309,
    "negative_beyond": "-1" + "0" * 400,
}


def exact_input(stripped: bool) -> str:
    numbers = ", ".join(f'"{name}": {token}' for name, token in EXACT_NUMBERS.items())
    entry = '{"interruptId": "int-1", "status": "resolved", "payload": {"n": [1E9, -0]}}'
    unknown = ', "notAField": {"x": 1e-400}' if stripped else ""
    return (
        f'{{"threadId": "{THREAD}", "runId": "run-2", "messages": [], '
        f'"resume": [{entry}], "forwardedProps": {{{numbers}}}{unknown}}}'
    )


@pytest.mark.parametrize("stripped", [False, True], ids=["as_received", "member_stripped"])
def test_the_forwarded_input_keeps_every_number_token(tmp_path, capfd, stripped):
    import orjson

    from gateway.codec import jsonio

    events = [json.dumps(e) for e in interrupted_run(APPROVAL)]
    status, out, err = run_main(tmp_path, events, exact_input(stripped), capfd)
    assert status == 0 and err == ""
    # the numbers as tokens: a reader that keeps them shows exactly what was written
    document = json.loads(
        out, parse_float=lambda t: ("number", t), parse_int=lambda t: ("number", t)
    )
    forwarded = document["input"]
    assert forwarded["forwardedProps"] == {k: ("number", t) for k, t in EXACT_NUMBERS.items()}
    assert forwarded["resume"][0]["payload"] == {"n": [("number", "1E9"), ("number", "-0")]}
    assert "notAField" not in forwarded
    codes = [w["code"] for w in document["warnings"]]
    assert codes == (["unknown_member_stripped"] if stripped else [])
    # readable by the gateway's own reader, and by orjson once no integer is beyond a double
    assert jsonio.loads(out.encode())["verdict"] == "forward"
    assert orjson.loads(out.replace("1" + "0" * 309, "1").replace("-1" + "0" * 400, "1"))


# --- the service's record limit: a forward over it is rejected input_too_large ----------


def test_a_forward_over_the_record_limit_is_rejected_input_too_large(tmp_path, capfd):
    from gateway.codec.records import MAX_RECORD_BYTES

    events = [json.dumps(e) for e in interrupted_run(APPROVAL)]
    entry = {"interruptId": "int-1", "status": "cancelled"}
    raw = resume_input(entry, forwardedProps={"big": "x" * MAX_RECORD_BYTES})
    status, out, err = run_main(tmp_path, events, json.dumps(raw), capfd)
    holds_the_contract(status, out, err)
    assert status == 1
    document = json.loads(out)
    assert [r["code"] for r in document["reasons"]] == ["input_too_large"]
    assert "input" not in document


def test_an_input_over_the_limit_whose_forward_fits_is_forwarded(tmp_path, capfd):
    """The limit is on what would be written, as in the service: stripping counts."""
    from gateway.codec.records import MAX_RECORD_BYTES

    events = [json.dumps(e) for e in interrupted_run(APPROVAL)]
    entry = {"interruptId": "int-1", "status": "cancelled"}
    raw = resume_input(entry, notAField="x" * MAX_RECORD_BYTES)
    status, out, err = run_main(tmp_path, events, json.dumps(raw), capfd)
    holds_the_contract(status, out, err)
    assert status == 0
    document = json.loads(out)
    assert [w["code"] for w in document["warnings"]] == ["unknown_member_stripped"]
    assert "notAField" not in document["input"]


def test_a_failure_while_reading_is_exit_2_with_one_line(tmp_path, capfd, monkeypatch):
    """Not only judging: reading the files holds the contract too (e.g. out of memory)."""
    from gateway.commands import check as check_module

    def exhausted(*args: Any, **kwargs: Any) -> Any:
        raise MemoryError

    monkeypatch.setattr(check_module.jsonio, "loads", exhausted)
    status, out, err = run_main(tmp_path, [STARTED], PLAIN_INPUT, capfd)
    assert status == 2 and out == ""
    assert err == "agui-gateway check: the gateway failed while judging: MemoryError (a defect)\n"


# --- every hostile record of the corpus holds the contract ---------------------------------


def _hostile_requests() -> list[str]:
    from tests.core.hostile import REQUESTS

    return list(REQUESTS)


@pytest.mark.parametrize("name", _hostile_requests())
def test_every_hostile_request_holds_the_contract(tmp_path, capfd, name):
    from tests.core.hostile import REQUESTS
    from tests.core.hostile import THREAD as HOSTILE_THREAD

    schema, build = REQUESTS[name]
    started = {"type": "RUN_STARTED", "threadId": HOSTILE_THREAD, "runId": "r1"}
    interrupt = {"id": "a", "reason": "approval", "responseSchema": schema}
    finished = {
        "type": "RUN_FINISHED",
        "threadId": HOSTILE_THREAD,
        "runId": "r1",
        "outcome": {"type": "interrupt", "interrupts": [interrupt]},
    }
    events = [json.dumps(started), json.dumps(finished)]
    status, out, err = run_main(tmp_path, events, build().decode(), capfd)
    holds_the_contract(status, out, err)


def test_an_input_whose_stripping_would_remove_a_required_member_is_rejected(files):
    """An image part's source of a type the protocol does not define (s3): the part
    without its source is not an input the protocol's models read, so nothing is
    forwarded (it was, as `[{"type":"image"}]`)."""
    part = {"type": "image", "source": {"type": "s3", "value": "v"}}
    raw = {
        "threadId": THREAD,
        "runId": "run-2",
        "messages": [{"id": "m", "role": "user", "content": [part]}],
    }
    done = check(*files([], raw), "--now", NOW)
    assert done.returncode == 1, done.stderr
    out = document(done)
    assert [(r["code"], r["path"]) for r in out["reasons"]] == [
        ("malformed_input", "/messages/0/content/0/source")
    ]
    assert out["warnings"] == []


def run_with(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    import os

    return subprocess.run(
        [*COMMAND, *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, **env},
    )


def test_with_policy_it_judges_who_answers_as_the_settings_rules_say(tmp_path: Path) -> None:
    """`--policy` reads the approver rules from the settings, `--as` names the sender
    (taken as verified, offline) and `--agent` picks the rule, as the service does."""
    config = tmp_path / "gateway.toml"
    config.write_text(
        '[[approvers]]\nagent = "billing"\nreason = "payment"\nanswer_groups = ["payments"]\n'
    )
    events = write_events(
        tmp_path / "e.jsonl", interrupted_run({"id": "int-1", "reason": "payment"})
    )
    answer = tmp_path / "in.json"
    answer.write_text(json.dumps(resume_input({"interruptId": "int-1", "status": "resolved"})))
    env = {"AGUI_GATEWAY_CONFIG_FILE": str(config)}
    common = ["check", "--events", str(events), "--input", str(answer), "--now", NOW]

    def codes(result: subprocess.CompletedProcess[str]) -> list[str]:
        return [r["code"] for r in json.loads(result.stdout)["reasons"]]

    allowed = run_with(
        env,
        *common,
        "--policy",
        "--agent",
        "billing",
        "--as",
        "alice",
        "--as-groups",
        "payments,ops",
    )
    assert allowed.returncode == 0, allowed.stderr
    refused = run_with(env, *common, "--policy", "--agent", "billing", "--as", "bob")
    assert refused.returncode == 1 and codes(refused) == ["approver_not_allowed"]
    unattested = run_with(env, *common, "--policy", "--agent", "billing")
    assert unattested.returncode == 1 and codes(unattested) == ["approver_unverified"]
    other_agent = run_with(env, *common, "--policy", "--agent", "support", "--as", "bob")
    assert other_agent.returncode == 0, other_agent.stdout
    without_policy = run_with(env, *common, "--agent", "billing", "--as", "bob")
    assert without_policy.returncode == 0  # no --policy: anyone, as before


def test_with_policy_settings_it_cannot_read_exit_2_saying_so(tmp_path: Path) -> None:
    config = tmp_path / "gateway.toml"
    config.write_text('[[approvers]]\nagent = "billing"\nnot_a_field = 1\n')
    events = write_events(tmp_path / "e.jsonl", [])
    answer = tmp_path / "in.json"
    answer.write_text(json.dumps(resume_input()))
    result = run_with(
        {"AGUI_GATEWAY_CONFIG_FILE": str(config)},
        "check",
        "--events",
        str(events),
        "--input",
        str(answer),
        "--policy",
    )
    assert result.returncode == 2 and result.stdout == ""
    assert "approvers" in result.stderr and "not_a_field" in result.stderr
