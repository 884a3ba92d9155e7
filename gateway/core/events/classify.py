"""Cheap classification of events by their `type`, before any model is built.

Most records on an event topic are streaming deltas that cannot change a
thread's state. Only lifecycle (`RUN_*`) and subagent (`SUBAGENT_*`) events
are ever turned into `ag-ui-protocol` models; `TOOL_CALL_START` is stateful too
(the active run remembers its tool calls' names, for the approver policy), but
only its `toolCallId` and `toolCallName` are read, never a model built.
"""

from __future__ import annotations

from enum import Enum

from ag_ui.core import EventType


class EventKind(Enum):
    RUN_STARTED = "RUN_STARTED"
    RUN_FINISHED = "RUN_FINISHED"
    RUN_ERROR = "RUN_ERROR"
    SUBAGENT_STARTED = "SUBAGENT_STARTED"
    SUBAGENT_FINISHED = "SUBAGENT_FINISHED"
    SUBAGENT_ERROR = "SUBAGENT_ERROR"
    TOOL_CALL_START = "TOOL_CALL_START"  # names a tool call of the active run
    STREAM = "stream"  # any other known type: no effect on thread state
    UNKNOWN = "unknown"  # a type the protocol does not define
    UNTYPED = "untyped"  # no string `type` at all


_STATEFUL = {
    kind.value: kind
    for kind in (
        EventKind.RUN_STARTED,
        EventKind.RUN_FINISHED,
        EventKind.RUN_ERROR,
        EventKind.SUBAGENT_STARTED,
        EventKind.SUBAGENT_FINISHED,
        EventKind.SUBAGENT_ERROR,
        EventKind.TOOL_CALL_START,
    )
}
KNOWN_TYPES: frozenset[str] = frozenset(t.value for t in EventType)


def classify(event_type: object) -> EventKind:
    """The kind of an event, from its raw `type` member alone."""
    if not isinstance(event_type, str):
        return EventKind.UNTYPED
    kind = _STATEFUL.get(event_type)
    if kind is not None:
        return kind
    return EventKind.STREAM if event_type in KNOWN_TYPES else EventKind.UNKNOWN


def is_stateful(kind: EventKind) -> bool:
    return kind.value in _STATEFUL
