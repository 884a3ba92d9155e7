"""The active run's tool calls: their names, remembered for its interrupts.

An AG-UI interrupt names a tool call by `toolCallId` only; the tool's name is on the
run's `TOOL_CALL_START` (`toolCallName`). While a run is active the state keeps the
pairs of its most recent MAX_TOOL_CALLS_PER_RUN calls (an id or a name over its bound
is not kept), and its interrupting RUN_FINISHED gives each interrupt the name its
`toolCallId` has there (`interrupts.record`); the run's close drops the pairs.

Only these two members are read: the event is not validated further (a streaming
event never was), so a TOOL_CALL_START without both as text is simply not
remembered, and an interrupt naming it has no tool name. It is never a warning.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TypeGuard

from gateway.core.events.step import Step
from gateway.core.values.thread import MAX_ID_BYTES, MAX_TOOL_CALLS_PER_RUN, MAX_TOOL_NAME_BYTES


def _fits(text: object, most: int) -> TypeGuard[str]:
    if type(text) is not str:
        return False
    return len(text) * 4 <= most or len(text.encode("utf-8", "surrogatepass")) <= most


def started(step: Step) -> None:
    """Remember a TOOL_CALL_START's name (its id's earlier name, if any, is replaced)."""
    call_id = step.event.get("toolCallId")
    name = step.event.get("toolCallName")
    if not (_fits(call_id, MAX_ID_BYTES) and _fits(name, MAX_TOOL_NAME_BYTES)):
        return
    calls = step.state.tool_calls
    if any(known == call_id for known, _ in calls):
        calls = tuple(call for call in calls if call[0] != call_id)
    calls = (*calls[max(0, len(calls) - MAX_TOOL_CALLS_PER_RUN + 1) :], (call_id, name))
    # not `step.set`: a tool call is not a change of the run's status, nor activity
    # the thread's idle time counts
    step.state = replace(step.state, tool_calls=calls)
