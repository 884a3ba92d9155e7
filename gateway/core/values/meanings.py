"""What each public code means, for people: the documentation of the contract in
`codes.py`. The reference pages of the docs site are generated from these mappings,
and a test fails when a code has no meaning here (or a meaning names no code)."""

from __future__ import annotations

from collections.abc import Mapping

from gateway.core.values.codes import Reason, Rule, Verdict, Warn

VERDICTS: Mapping[Verdict, str] = {
    Verdict.FORWARD: "sent to `agui.<agent>.run-requests` (possibly with material stripped)",
    Verdict.REJECT: "not sent; a rejection record says why",
    Verdict.DUPLICATE: "equal to a request already forwarded; acknowledged, not sent again",
}

REASONS: Mapping[Reason, str] = {
    Reason.MALFORMED_INPUT: "not JSON (a duplicate member name, nesting over 1,000 levels "
    "included), not an object, not UTF-8, or a known field the schema rejects (`path` says "
    "where)",
    Reason.THREAD_MISMATCH: "the input's `threadId` differs from the record key, or the record "
    "has no (UTF-8) key, or a key over 8 KiB",
    Reason.RUN_ACTIVE: "the thread's latest run has started and not closed",
    Reason.UNCOVERED_INTERRUPT: "an open interrupt has no resume entry",
    Reason.EXPIRED_INTERRUPT: "an entry resolves an interrupt judged expired",
    Reason.DUPLICATE_ENTRY: "two or more entries name one interrupt (read from the input "
    "alone: on any thread, known or not)",
    Reason.PAYLOAD_SCHEMA_MISMATCH: "a resolved payload breaks the interrupt's "
    "`responseSchema`, or cannot be checked against it within the limits",
    Reason.UNRECOGNISED_ENTRY: "strict mode only: an entry names no open interrupt",
    Reason.THREAD_UNKNOWN: "strict mode only: no run was ever seen on the thread",
    Reason.ALREADY_RESUMED: "the interrupt was already answered by a forwarded request",
    Reason.INPUT_TOO_LARGE: "the input to forward would be a record over 1,000,000 bytes, "
    "which Kafka's default limits refuse",
    Reason.INTERNAL_ERROR: "the gateway itself failed on this request (a defect, logged with "
    "its traceback); rejected rather than forwarded unjudged, the input carried as received "
    "(`inputText`/`inputBase64`), and the partition moves on",
    Reason.EVENTS_LAGGING: "retryable: the gateway had not read the thread's events up to "
    "this request after waiting `merge_max_wait_ms` (overload, or an events side far "
    "behind), so it did not judge it; send it again. Never a verdict on missing state "
    "(`thread_unknown` is only said with the events side caught up)",
    Reason.AGENT_MISSING: "a request on a group's topics names no agent (no `agui-agent` "
    "header, or an empty one); it is not judged, and its rejection names the group",
    Reason.AGENT_NAME_ILLEGAL: "its `agui-agent` header is not UTF-8, is over 249 characters, "
    "or does not match `agent_name_pattern`",
    Reason.AGENT_NOT_ALLOWED: "its `agui-agent` header names an agent the group does not "
    "admit (another group's, or one with topics of its own); on an agent's own topics, a "
    "header naming another agent",
    Reason.APPROVER_NOT_ALLOWED: "an entry answers (or abandons) an interrupt whose approver "
    "policy does not name the request's verified identity (its subject, or one of its groups) "
    "for that status; one per such interrupt",
    Reason.APPROVER_UNVERIFIED: "an entry answers (or abandons) an interrupt whose approver "
    "policy wants a verified identity, and the request carries none the gateway could verify "
    "(no identity headers, an unknown key id, a bad signature: the detail says which)",
}

WARNINGS: Mapping[Warn, str] = {
    Warn.UNRECOGNISED_ENTRY: "an entry names no open interrupt; stripped",
    Warn.THREAD_UNKNOWN: "forwarded unjudged: no run seen on the thread",
    Warn.EXPIRY_UNREADABLE: "an open interrupt's `expiresAt` is not ISO 8601; judged not expired",
    Warn.UNKNOWN_MEMBER_STRIPPED: "an unknown member or unrecognised union member was "
    "stripped from a request, or ignored in a lifecycle event (`path`)",
    Warn.RESPONSE_SCHEMA_UNUSABLE: "an interrupt's `responseSchema` cannot be used; payload "
    "not checked",
    Warn.PROTOCOL_VIOLATION: "an event stream broke a lifecycle rule (`rule`, below)",
    Warn.UNKNOWN_EVENT_TYPE: "an event of a type the protocol does not define; dropped",
    Warn.LATE_RUN_ERROR: "`RUN_ERROR` after `RUN_FINISHED`: the run is failed; its "
    "interrupts stay open",
    Warn.INTERRUPT_EXPIRED: "an open interrupt passed its `expiresAt` unanswered (announced once)",
    Warn.REPLY_TOPIC_UNKNOWN: "`agui-reply-to` names a topic that does not exist or is one of "
    "the gateway's own topics; no reply sent",
    Warn.INTERNAL_ERROR: "the gateway itself failed on this event (a defect, logged with its "
    "traceback); the thread's state is left as it was and the partition moves on",
    Warn.AGENT_MISSING: "an event on a group's topics names no agent (no `agui-agent` "
    "header); it is dropped, no thread's state changes",
    Warn.AGENT_NAME_ILLEGAL: "an event's `agui-agent` header is not UTF-8, is over 249 "
    "characters, or does not match `agent_name_pattern`; the event is dropped",
    Warn.AGENT_NOT_ALLOWED: "an event names an agent the group does not admit (or, on an "
    "agent's own topics, another agent); the event is dropped",
    Warn.IDENTITY_UNVERIFIED: "a request carried identity headers the gateway did not believe "
    "(signed with a key it does not trust, a bad signature, a record changed since it was "
    "signed: the detail says which); it was judged as unattested, and where the approver "
    "policy wants a verified identity it is also rejected `approver_unverified`",
}

RULES: Mapping[Rule, str] = {
    Rule.FIRST_EVENT: "did not open with `RUN_STARTED` or `RUN_ERROR`",
    Rule.NESTED_RUN_STARTED: "had `RUN_STARTED` while a run was active (ignored)",
    Rule.EVENT_AFTER_CLOSE: "had an event after the run closed, other than `RUN_STARTED` or "
    "one late `RUN_ERROR` (ignored); a `RUN_ERROR` after a failed run is read as a new "
    "attempt that never started, not as this",
    Rule.RUN_ID_MISMATCH: "closed a run with another run's id (the active run is closed)",
    Rule.THREAD_ID_MISMATCH: "carried a `threadId` other than its record key (the key wins)",
    Rule.EMPTY_INTERRUPT_OUTCOME: "ended with the interrupt outcome and no interrupts (the "
    "run fails)",
    Rule.DUPLICATE_INTERRUPT_ID: "repeated an interrupt id within one run (the first is kept)",
    Rule.MALFORMED_EVENT: "had a lifecycle event with a malformed known field, an event "
    "without a string `type`, or a record that is not a JSON object (or not JSON the gateway "
    "reads: a duplicate member name, nesting over 1,000 levels)",
    Rule.SUBAGENT_NOT_STARTED: "finished or failed a subagent invocation that never started",
    Rule.SUBAGENT_ALREADY_STARTED: "started an invocation that was already open",
    Rule.MISSING_KEY: "an event record had no (UTF-8) key, or one over 8 KiB, so no thread "
    "(dropped)",
    Rule.ID_TOO_LONG: "carried an id over 256 UTF-8 bytes: an interrupt's `id`, "
    "`subagentRunId` or `toolCallId` fails the run; a run or subagent-invocation id (or a "
    "suspension's interrupt id) is kept as a fixed-size stand-in (its start and a 128-bit "
    "digest), so it is still told apart",
    Rule.TOO_MANY_INTERRUPTS: "ended a run with more than 32 interrupts (the run fails)",
    Rule.INTERRUPT_CONTENT_TOO_LARGE: "ended a run whose interrupts' `reason`, `message`, "
    "`expiresAt`, `responseSchema` and `metadata` (as JSON) total over 600,000 bytes: their "
    "schemas and metadata are dropped (those payloads are then not checked), then their "
    "messages; if still over, the run fails",
    Rule.TOO_MANY_SUBAGENTS: "started a subagent invocation while 32 were open in the run "
    "(not tracked)",
    Rule.TOO_MANY_SUSPENDED: "suspended a 17th invocation on the thread (the oldest is forgotten)",
    Rule.SUSPENSION_TOO_LARGE: "suspended an invocation naming more than 32 interrupt ids "
    "(the first 32 are kept; they are recorded, never judged)",
}
