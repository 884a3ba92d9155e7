"""How soon a transaction's first write is asked again while the last one's markers are written.

Right after a commit the transaction coordinator is still writing the previous
transaction's markers, and answers the next transaction's AddPartitionsToTxn with
CONCURRENT_TRANSACTIONS (KAFKA-5477). aiokafka asks again after a fixed 20 ms
(`BACKOFF_OVERRIDE` in its sender), whatever `retry_backoff_ms` says, while the
markers take one to three milliseconds on a local broker. So every transaction that
follows the last at once (a busy pair's next round, the bridge's next run, any hop of
a conversation) waited some 20 ms more than it had to: one record and its offsets, in
transaction after transaction, took 28 ms each (p50), and 6 ms with 2 ms between tries.

`install` sets that wait for the process (aiokafka reads it at each retry). A retry
is one small request to the coordinator; at 2 ms a transaction asks two or three
times at most where it asked once.
"""

from __future__ import annotations

from aiokafka.producer import sender

RETRY_S = 0.002


def install() -> None:
    """Ask again after RETRY_S (idempotent; the producers built by `clients` call it)."""
    if hasattr(sender, "BACKOFF_OVERRIDE"):
        sender.BACKOFF_OVERRIDE = RETRY_S
