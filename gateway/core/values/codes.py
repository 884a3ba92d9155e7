"""Reason and warning codes: the gateway's public contract (see README, "Verdicts, reasons and warnings").

Values are stable strings; they appear in rejection and warning records, in
reply messages, in metrics labels and in `agui-gateway check` output.
"""

from __future__ import annotations

from enum import StrEnum


class Verdict(StrEnum):
    """What the gateway does with one incoming run request."""

    FORWARD = "forward"
    REJECT = "reject"
    DUPLICATE = "duplicate"


class Reason(StrEnum):
    """Why a request was rejected. One reason per offending interrupt or location."""

    MALFORMED_INPUT = "malformed_input"
    THREAD_MISMATCH = "thread_mismatch"
    RUN_ACTIVE = "run_active"
    UNCOVERED_INTERRUPT = "uncovered_interrupt"
    EXPIRED_INTERRUPT = "expired_interrupt"
    DUPLICATE_ENTRY = "duplicate_entry"
    PAYLOAD_SCHEMA_MISMATCH = "payload_schema_mismatch"
    UNRECOGNISED_ENTRY = "unrecognised_entry"  # strict mode only
    THREAD_UNKNOWN = "thread_unknown"  # strict mode only
    ALREADY_RESUMED = "already_resumed"
    INPUT_TOO_LARGE = "input_too_large"  # the forward would not fit a Kafka record
    INTERNAL_ERROR = "internal_error"  # the gateway failed on this request: a defect
    EVENTS_LAGGING = "events_lagging"  # events side not read up to it in time: retryable
    # The agent a request is for (the agui-agent header), on a group's shared topics:
    AGENT_MISSING = "agent_missing"  # no agui-agent header on a group's record
    AGENT_NAME_ILLEGAL = "agent_name_illegal"  # not UTF-8, or not matching agent_name_pattern
    AGENT_NOT_ALLOWED = "agent_not_allowed"  # not one of the group's (or not the topic's) agent
    # Who answered, under the approver policy (one per offending interrupt):
    APPROVER_NOT_ALLOWED = "approver_not_allowed"  # verified, but not one the policy names
    APPROVER_UNVERIFIED = "approver_unverified"  # no verified identity where one is wanted


class Warn(StrEnum):
    """What the gateway noticed without rejecting anything."""

    UNRECOGNISED_ENTRY = "unrecognised_entry"
    THREAD_UNKNOWN = "thread_unknown"
    EXPIRY_UNREADABLE = "expiry_unreadable"
    UNKNOWN_MEMBER_STRIPPED = "unknown_member_stripped"
    RESPONSE_SCHEMA_UNUSABLE = "response_schema_unusable"
    PROTOCOL_VIOLATION = "protocol_violation"
    UNKNOWN_EVENT_TYPE = "unknown_event_type"
    LATE_RUN_ERROR = "late_run_error"
    INTERRUPT_EXPIRED = "interrupt_expired"
    REPLY_TOPIC_UNKNOWN = "reply_topic_unknown"
    INTERNAL_ERROR = "internal_error"  # the gateway failed on this event: a defect
    # An event whose agent is not usable (as the Reason codes of the same names): dropped.
    AGENT_MISSING = "agent_missing"
    AGENT_NAME_ILLEGAL = "agent_name_illegal"
    AGENT_NOT_ALLOWED = "agent_not_allowed"
    # A request's identity headers not believed (forged, tampered, an unknown key): the
    # request is judged as unattested, and told so
    IDENTITY_UNVERIFIED = "identity_unverified"


class Rule(StrEnum):
    """The lifecycle rule a `protocol_violation` warning names."""

    FIRST_EVENT = "first_event"
    NESTED_RUN_STARTED = "nested_run_started"
    EVENT_AFTER_CLOSE = "event_after_close"
    RUN_ID_MISMATCH = "run_id_mismatch"
    THREAD_ID_MISMATCH = "thread_id_mismatch"
    EMPTY_INTERRUPT_OUTCOME = "empty_interrupt_outcome"
    DUPLICATE_INTERRUPT_ID = "duplicate_interrupt_id"
    MALFORMED_EVENT = "malformed_event"
    SUBAGENT_NOT_STARTED = "subagent_not_started"
    SUBAGENT_ALREADY_STARTED = "subagent_already_started"
    MISSING_KEY = "missing_key"
    # Bounds on what one thread accumulates (README, "Limits"): state that could not
    # be written to the changelog is never kept, so every verdict survives a restart.
    ID_TOO_LONG = "id_too_long"
    TOO_MANY_INTERRUPTS = "too_many_interrupts"
    INTERRUPT_CONTENT_TOO_LARGE = "interrupt_content_too_large"
    TOO_MANY_SUBAGENTS = "too_many_subagents"
    TOO_MANY_SUSPENDED = "too_many_suspended"
    SUSPENSION_TOO_LARGE = "suspension_too_large"
