"""Traffic as real agents and clients make it, on a fixed set of threads, through a pair.

Every run has fresh ids (run, messages, tool calls, interrupts, correlation ids), as
real traffic has: a cache keyed by anything a record carries grows with it. Each
cycle runs every thread once through a conversation: an interrupted run (text, a
tool call, RUN_FINISHED with one or two interrupts, some with a `responseSchema`
and an expiry), a resume that leaves one interrupt uncovered (rejected), the
covering resume (forwarded), and the resumed run closing with success; the round
is then committed, as the gateway's transaction would.
"""

from __future__ import annotations

import itertools

import orjson

from gateway.codec.records import InRecord
from gateway.kafka.pairs.pair import PartitionPair

SCHEMA = {
    "type": "object",
    "properties": {"approved": {"type": "boolean"}, "note": {"type": "string"}},
    "required": ["approved"],
}


class Traffic:
    def __init__(self, pair: PartitionPair, threads: int, agent: str = "bot") -> None:
        self.pair = pair
        self.threads = [f"thread-{n}" for n in range(threads)]
        self.agent = agent
        self.offsets = {"events": 0, "requests": 0}
        self.ids = itertools.count()
        self.at = 1_000_000
        self.wall_ms = 1_000_000  # the round's wall time: one per cycle, as one per round
        self.events = 0
        self.requests = 0

    def _id(self, prefix: str) -> str:
        return f"{prefix}-{next(self.ids):x}"

    def _record(self, side: str, thread: str, value: object, headers=()) -> InRecord:
        offset = self.offsets[side]
        self.offsets[side] += 1
        self.at += 1
        if side == "events":
            self.events += 1
        else:
            self.requests += 1
        return InRecord(
            f"agui.{self.agent}.{side}",
            0,
            offset,
            self.at,
            1,
            thread.encode(),
            orjson.dumps(value),
            tuple(headers),
        )

    def _interrupted_run(self, thread: str, n: int) -> tuple[str, list[dict]]:
        run, message, call = self._id("run"), self._id("msg"), self._id("call")
        interrupts = [
            {
                "id": self._id("int"),
                "reason": "tool_call",
                "message": f"Approve transfer {n}?",
                "toolCallId": call,
                "responseSchema": SCHEMA,
            }
        ]
        if n % 2:
            interrupts.append(
                {
                    "id": self._id("int"),
                    "reason": "confirmation",
                    "expiresAt": "2100-01-01T00:00:00.000Z",
                }
            )
        events = [
            {"type": "RUN_STARTED", "threadId": thread, "runId": run},
            {"type": "TEXT_MESSAGE_START", "messageId": message, "role": "assistant"},
            {"type": "TEXT_MESSAGE_CONTENT", "messageId": message, "delta": f"step {n}"},
            {"type": "TEXT_MESSAGE_END", "messageId": message},
            {"type": "TOOL_CALL_START", "toolCallId": call, "toolCallName": "transfer"},
            {"type": "TOOL_CALL_ARGS", "toolCallId": call, "delta": '{"amount": 1}'},
            {"type": "TOOL_CALL_END", "toolCallId": call},
            {
                "type": "RUN_FINISHED",
                "threadId": thread,
                "runId": run,
                "outcome": {"type": "interrupt", "interrupts": interrupts},
            },
        ]
        self.pair.take("events", [self._record("events", thread, e) for e in events])
        return run, interrupts

    def _resume(self, thread: str, run: str, interrupts: list[dict]) -> None:
        def entry(i: dict) -> dict:
            if i["reason"] == "tool_call":
                return {"interruptId": i["id"], "status": "resolved", "payload": {"approved": True}}
            return {"interruptId": i["id"], "status": "cancelled"}

        headers = (("agui-reply-to", b"replies"), ("agui-correlation-id", self._id("c").encode()))
        partial = {
            "threadId": thread,
            "runId": self._id("run"),
            "messages": [],
            "resume": [entry(interrupts[0])] if len(interrupts) > 1 else [],
        }
        whole = {**partial, "runId": self._id("run"), "resume": [entry(i) for i in interrupts]}
        self.pair.take(
            "requests",
            [
                self._record("requests", thread, partial, headers),
                self._record("requests", thread, whole, headers),
            ],
        )
        self._process()
        events = [
            {"type": "RUN_STARTED", "threadId": thread, "runId": whole["runId"]},
            {"type": "RUN_FINISHED", "threadId": thread, "runId": whole["runId"]},
        ]
        self.pair.take("events", [self._record("events", thread, e) for e in events])

    def _process(self) -> None:
        self.pair.set_fence(self.offsets["events"])
        self.pair.process(self.offsets["events"], 0.0, self.wall_ms)

    def cycle(self, n: int) -> None:
        """Every thread through one conversation, then the round committed."""
        self.wall_ms = self.at
        for thread in self.threads:
            run, interrupts = self._interrupted_run(thread, n)
            self._resume(thread, run, interrupts)
        self._process()
        self.pair.committed_round(self.pair.seal(), 0.0)
