"""Pairs Kafka refuses an operation for want of an ACL: what was refused, and the backoff.

A refused pair waits, paused and undecided, and retries with backoff until the
ACL is granted; /readyz and the `permission_denied` gauge show it meanwhile.
"""

from __future__ import annotations

import logging
import time

from aiokafka.errors import GroupAuthorizationFailedError

from gateway.kafka.wire import clients

log = logging.getLogger("gateway.runner")

PairKey = tuple[str, int]
RETRY_S = 0.5  # first backoff before preparing failed pairs again
RETRY_MAX_S = 30.0


class Denials:
    def __init__(self) -> None:
        self.denied: dict[PairKey, tuple[str, str]] = {}  # (operation, resource)
        self._attempts: dict[PairKey, int] = {}
        self._preparing: set[PairKey] = set()  # refused while prepared, not committed

    def note(
        self, key: PairKey, exc: BaseException, topic_op: str = "Write", preparing: bool = False
    ) -> bool:
        """Record (and log) that Kafka refused this pair an operation; False if `exc` is
        no refusal."""
        found = clients.describe_denial(exc, topic_op)
        if found is None:
            return False
        self.denied[key] = found
        if preparing:
            self._preparing.add(key)
        else:
            self._preparing.discard(key)
        self._attempts[key] = self._attempts.get(key, 0) + 1
        log.error(
            "permission denied: %s on %s; the pair waits, nothing decided, and retries",
            *found,
            extra={"agent": key[0], "partition": key[1], "operation": found[0]},
        )
        return True

    def granted(self, key: PairKey, preparing: bool = False) -> bool:
        """What Kafka refused the pair now succeeded (a commit; or preparing, if refused
        there). True if a refusal was cleared."""
        if key not in self.denied or (preparing and key not in self._preparing):
            return False
        self.forget(key)
        log.info(
            "permission granted: the pair resumes", extra={"agent": key[0], "partition": key[1]}
        )
        return True

    def forget(self, key: PairKey) -> None:
        self.denied.pop(key, None)
        self._preparing.discard(key)
        self._attempts.pop(key, None)

    def backoff(self, keys: list[PairKey]) -> float:
        """How long to wait before trying these pairs again (0 if none was refused)."""
        attempts = max((self._attempts.get(k, 0) for k in keys), default=0)
        if not attempts:
            return 0.0
        return float(min(RETRY_S * 2 ** (attempts - 1), RETRY_MAX_S))


class ConsumerDenial:
    """The gateway's group consumer refused for want of an ACL: what was refused, and
    the backoff.

    Read on its group (revoked while it runs, or never granted): aiokafka's consumer
    raises the refusal from `getmany` (its heartbeat, join or coordinator look-up
    failed in the background) and keeps raising it until it can join again.
    Meanwhile the pairs keep what they hold and decide nothing they could commit
    (their transactions' offsets need the group too): the runner waits with backoff,
    asks the consumer to rejoin, and clears the refusal once the group's coordinator
    answers it again.

    Read on a topic it consumes, refused at a fetch (before the metadata hides the
    topic and the rebalance takes it away): `getmany` raises it for that partition
    only, the others' records stay for the next call. It is reported and polled past
    without a wait, and cleared once no fetch was refused for `TOPIC_QUIET_S`.
    """

    def __init__(self) -> None:
        self.denied: tuple[str, str] | None = None  # (operation, resource)
        self.group = False  # the refusal is the group's (else a topic's, at a fetch)
        self.since = 0.0  # monotonic time of the last refusal
        self._attempts = 0

    def note(self, exc: BaseException) -> bool:
        """Record (and log, once per refusal) that Kafka refused the consumer; False if
        `exc` is no refusal."""
        found = clients.describe_denial(exc, "Read")
        if found is None:
            return False
        if found != self.denied:
            log.error(
                "permission denied: %s on %s; the gateway's consumer is refused: nothing "
                "new is decided, and it retries",
                *found,
                extra={"operation": found[0]},
            )
        self.denied = found
        self.group = isinstance(exc, GroupAuthorizationFailedError)
        self.since = time.monotonic()
        self._attempts += 1
        return True

    def granted(self) -> None:
        if self.denied is None:
            return
        log.info("permission granted: the consumer resumes", extra={"operation": self.denied[0]})
        self.denied = None
        self._attempts = 0

    def backoff(self) -> float:
        if not self._attempts:
            return 0.0
        return float(min(RETRY_S * 2 ** (self._attempts - 1), RETRY_MAX_S))
