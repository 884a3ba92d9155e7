"""Reading one partition up to an offset found before, without waiting out a marker.

Under `read_committed` a fetch that brings only a transaction's commit or abort
marker gives no records, and aiokafka's `getmany` then waits its whole timeout
for more, although its position has already moved past the marker. The last
records of a changelog or a markers topic are nearly always followed by such a
marker: a read to the end that waited a second each time it came to one cost a
second to every takeover whose standby replica stood just before it (measured:
one pair ready 1.00 s after the others of its rebalance, having read 0 records).
`read_to` waits in short steps and looks at the position after each.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from aiokafka import AIOKafkaConsumer, ConsumerRecord, TopicPartition

STEP_MS = 50  # the longest wait for records before the position is looked at again


async def read_to(
    reader: AIOKafkaConsumer, tp: TopicPartition, end: int
) -> AsyncIterator[list[ConsumerRecord[bytes, bytes]]]:
    """Yield the records of `tp` from the reader's position until it reaches `end`."""
    while await reader.position(tp) < end:
        records = (await reader.getmany(tp, timeout_ms=STEP_MS)).get(tp)
        if records:
            yield records
