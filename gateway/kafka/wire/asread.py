"""Records as the fetch read them, for readers that only apply them: no `ConsumerRecord`.

aiokafka turns every fetched record into a `ConsumerRecord` (eleven fields, the
headers copied into a tuple): about half a microsecond a record, as much as the
replica's whole apply of a changelog record. A restore or a standby reads a
changelog partition from its beginning and needs only each record's offset, key,
value and headers, which the record aiokafka decoded from the batch already holds.

A consumer built with `key_deserializer=as_read` gets those decoded records
themselves from `getmany` (`AsRead`: offset, timestamp, key, value, headers, the
headers a list). Everything else about the fetch is aiokafka's own and unchanged:
the batches' CRC checks, `read_committed`'s skipping of aborted transactions and of
control batches, positions. Without `install` (or with an aiokafka whose fetcher
lacks the hook) such a consumer gets ordinary `ConsumerRecord`s with their keys
unchanged: `as_read` is the identity, and every reader uses only the fields both
kinds share.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from aiokafka.consumer import fetcher


class AsRead(Protocol):
    """What a record read `as_read` has (a `ConsumerRecord` has it too)."""

    @property
    def offset(self) -> int: ...
    @property
    def key(self) -> bytes | None: ...
    @property
    def value(self) -> bytes | None: ...
    @property
    def headers(self) -> Sequence[tuple[str, bytes]]: ...


def as_read(key: bytes | None) -> bytes | None:
    """The key deserializer that marks a consumer's records as read as they are."""
    return key


def _itself(tp: Any, record: Any) -> Any:
    return record


_Base: Any = getattr(fetcher, "PartitionRecords", None)


def install() -> None:
    """Let consumers built with `as_read` read records as they are (idempotent)."""
    if (
        _Base is None
        or not hasattr(_Base, "_consumer_record")
        or getattr(fetcher.PartitionRecords, "as_read", False)
    ):
        return

    class PartitionRecords(_Base):  # type: ignore[misc,valid-type]
        as_read = True

        def __init__(
            self, tp: Any, records: Any, aborted: Any, offset: Any, key: Any, *args: Any
        ) -> None:
            super().__init__(tp, records, aborted, offset, key, *args)
            if key is as_read:
                self._key_deserializer = None
                self._consumer_record = _itself  # read by `_unpack_records` per record

    fetcher.PartitionRecords = PartitionRecords
