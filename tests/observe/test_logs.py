"""Logs an operator can read: aiokafka's storms collapsed, expected retries quiet, and
nothing but JSON Lines on stderr."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import textwrap

import pytest
from aiokafka import errors
from aiokafka.client import AIOKafkaClient

from gateway.observe.logs import KafkaLogFilter


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Capture(logging.Handler):
    def __init__(self, flt: KafkaLogFilter) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []
        self.addFilter(flt)
        flt.emit = self.handle

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def lines(self) -> list[tuple[str, str]]:
        return [(r.levelname, r.getMessage()) for r in self.records]


@pytest.fixture
def captured():
    clock = Clock()
    flt = KafkaLogFilter(summary_s=30, quiet_s=10, clock=clock)
    handler = Capture(flt)
    kafka = logging.getLogger("aiokafka")
    old_level, root_level = kafka.level, logging.getLogger().level
    kafka.addHandler(handler)
    kafka.setLevel(logging.WARNING)
    logging.getLogger().setLevel(logging.INFO)  # as the gateway runs by default
    yield clock, flt, handler
    kafka.removeHandler(handler)
    kafka.setLevel(old_level)
    logging.getLogger().setLevel(root_level)


async def test_aiokafkas_own_connection_errors_collapse_into_lost_summary_and_back(captured):
    clock, flt, handler = captured
    for _ in range(13):  # aiokafka's real records: a broker that refuses connections
        client = AIOKafkaClient(bootstrap_servers="127.0.0.1:1", request_timeout_ms=1000)
        with pytest.raises(errors.KafkaConnectionError):
            await client.bootstrap()
        await client.close()
        clock.now += 5
    lines = handler.lines()
    assert lines[0][0] == "ERROR"
    assert lines[0][1].startswith('kafka connection lost: Unable connect to "127.0.0.1:1"')
    summaries = [m for _, m in lines[1:]]
    assert summaries == ["kafka connection still lost for 30 s"] * 1 + [
        "kafka connection still lost for 60 s"
    ]
    assert all(r.suppressed == 5 for r in handler.records[1:])
    flt.tick()  # errors came 5 s ago: still lost
    assert len(handler.records) == 3
    clock.now += 10
    flt.tick()
    flt.tick()
    assert handler.lines()[3:] == [("INFO", "kafka connection back: no connection error for 10 s")]
    assert handler.records[3].errors == 13
    # lost again later: one line again
    logging.getLogger("aiokafka.client").error("Unable connect to node with id %s: %s", 1, "x")
    assert handler.lines()[4] == (
        "ERROR",
        "kafka connection lost: Unable connect to node with id 1: x",
    )


def test_not_enough_replicas_retries_are_counted_and_debug(captured):
    _, flt, handler = captured
    counted: list[str] = []
    flt.on_retry = counted.append
    sender = logging.getLogger("aiokafka.producer.sender")
    root = logging.getLogger()
    old = root.level
    try:
        root.setLevel(logging.INFO)
        for _ in range(3):
            sender.warning(
                "Got error produce response on topic-partition %s, retrying. Error: %s",
                "TopicPartition(topic='agui.bot.run-requests', partition=0)",
                errors.NotEnoughReplicasError,
            )
        assert handler.records == []  # at INFO they are not logged at all
        root.setLevel(logging.DEBUG)
        sender.warning(
            "Got error produce response on topic-partition %s, retrying. Error: %s",
            "tp",
            errors.NotEnoughReplicasError,
        )
    finally:
        root.setLevel(old)
    assert [r.levelname for r in handler.records] == ["DEBUG"]
    assert counted == ["NOT_ENOUGH_REPLICAS"] * 4


def test_group_coordinator_not_available_at_start_is_not_an_error(captured):
    _, _, handler = captured
    root = logging.getLogger()
    old = root.level
    root.setLevel(logging.INFO)
    try:
        logging.getLogger("aiokafka.consumer.group_coordinator").error(
            "Group Coordinator Request failed: %s", errors.GroupCoordinatorNotAvailableError()
        )
    finally:
        root.setLevel(old)
    assert handler.lines() == [
        ("INFO", "Group Coordinator Request failed: [Error 15] GroupCoordinatorNotAvailableError")
    ]


def test_everything_on_stderr_is_json_lines():
    script = textwrap.dedent(
        """
        import gc, threading, warnings
        from gateway.observe import logs
        logs.configure("INFO")

        class Leaky:
            def __del__(self):
                raise RuntimeError("raised in __del__")

        Leaky()
        gc.collect()
        warnings.warn("a library's warning", DeprecationWarning, stacklevel=1)
        warnings.warn("a user warning")
        t = threading.Thread(target=lambda: 1 / 0, name="worker")
        t.start()
        t.join()
        raise SystemError("uncaught at the top")
        """
    )
    result = subprocess.run(
        [sys.executable, "-W", "always", "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    records = [json.loads(line) for line in result.stderr.splitlines()]  # every line is JSON
    messages = " | ".join(r["msg"] for r in records)
    assert (
        "Exception ignored" in messages and "RuntimeError: raised in __del__" in records[0]["exc"]
    )
    assert "a library's warning" in messages and "a user warning" in messages
    assert any("uncaught exception in thread worker" in r["msg"] for r in records)
    assert records[-1]["level"] == "critical" and "SystemError" in records[-1]["exc"]


def _record(name: str, level: int, msg: str, *args: object) -> logging.LogRecord:
    return logging.getLogger(name).makeRecord(name, level, __file__, 0, msg, args, None)


def test_while_kafka_is_lost_repeated_messages_are_bounded_and_summarised(captured):
    clock, flt, handler = captured
    retry = "could not prepare pair %s; retrying"  # one template, a message per pair
    for partition in range(10):  # connected: every line is kept
        handler.handle(_record("gateway.runner", logging.ERROR, retry, partition))
    assert len(handler.records) == 10
    handler.records.clear()
    lost = "Unable connect to node with id 1: [Errno 111] Connect call failed"
    handler.handle(_record("aiokafka.client", logging.ERROR, lost))
    for _second in range(29):  # 2,000 pairs retrying, the coordinator marked dead each second
        clock.now += 1
        for partition in range(2000 // 29):
            handler.handle(_record("gateway.runner", logging.ERROR, retry, partition))
        handler.handle(
            _record(
                "aiokafka.consumer.group_coordinator",
                logging.WARNING,
                "Marking the coordinator dead (node %s)for group %s.",
                1,
                "g",
            )
        )
        handler.handle(_record("aiokafka.client", logging.ERROR, lost))
    handler.handle(_record("gateway.kafka.broker", logging.ERROR, "kafka broker unreachable"))
    clock.now += 1
    handler.handle(_record("aiokafka.client", logging.ERROR, lost))
    lines = handler.lines()
    assert lines[0][1].startswith("kafka connection lost: Unable connect")
    assert sum(m.startswith("could not prepare pair") for _, m in lines) == 3
    assert sum(m.startswith("Marking the coordinator dead") for _, m in lines) == 3
    assert ("ERROR", "kafka broker unreachable") in lines  # a message of its own passes
    assert lines[-1] == ("ERROR", "kafka connection still lost for 30 s")
    assert handler.records[-1].suppressed_messages == {
        retry: 29 * (2000 // 29) - 3,
        "Marking the coordinator dead (node %s)for group %s.": 26,
    }
    assert len(lines) == 9
    # the next window: each message again, a few times
    clock.now += 1
    for partition in range(100):
        handler.handle(_record("gateway.runner", logging.ERROR, retry, partition))
    assert sum(m.startswith("could not prepare pair") for _, m in handler.lines()) == 6
    # back: nothing is held back any more
    clock.now += 10
    flt.tick()
    assert handler.records[-1].suppressed_messages == {retry: 97}
    handler.records.clear()
    for partition in range(10):
        handler.handle(_record("gateway.runner", logging.ERROR, retry, partition))
    assert len(handler.records) == 10
