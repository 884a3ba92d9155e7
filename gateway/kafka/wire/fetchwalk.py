"""The fetcher's walk over every assigned partition, skipped while it could find nothing.

aiokafka's fetch loop walks every assigned partition (`_get_actions_per_node`)
each time it wakes: when a fetch lands, and again whenever records are taken from
its buffer, a partition is sought, paused or resumed. In that walk a partition
whose node has a fetch in flight is passed over before anything else about it is
asked, once its buffered records have given their backoff. So while every broker
the cluster knows has a fetch in flight, a walk can start no fetch, no offset
reset and no wait for a resume: all it yields is the backoff of the records still
buffered, and the loop's wake-ups under load (two or more per fetch) each paid a
walk over every partition for that (at 800 pairs, about a third of the gateway's
busy time while it answered 200 requests a second). `install` answers those
wake-ups from the buffered records alone; any other wake-up walks as before, and
so does the next one after the fetch in flight lands.
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from typing import Any

from aiokafka import AIOKafkaConsumer

Actions = tuple[list[Any], dict[int, list[Any]], float, bool, list[Any]]


def install(consumer: AIOKafkaConsumer) -> None:
    """Skip the started consumer's walks that could find nothing to do."""
    fetcher = consumer._fetcher
    assert fetcher is not None, "install after the consumer started"
    fetcher._get_actions_per_node = lean(fetcher, fetcher._get_actions_per_node)


def lean(fetcher: Any, walk: Callable[[Any], Actions]) -> Callable[[Any], Actions]:
    def actions(assignment: Any) -> Actions:
        in_flight = fetcher._in_flight
        if in_flight:
            nodes = {broker.nodeId for broker in fetcher._client.cluster.brokers()}
            if nodes and nodes <= in_flight:
                return _buffered_only(fetcher, assignment)
        return walk(assignment)

    return actions


def _buffered_only(fetcher: Any, assignment: Any) -> Actions:
    """What the walk answers while every node has a fetch in flight: the longest
    backoff of each node's buffered records, the shortest over the nodes (or the
    fetcher's own timeout without any)."""
    backoff_by_nodes: dict[int, list[float]] = collections.defaultdict(list)
    tps = assignment.tps
    for tp, record in list(fetcher._records.items()):
        if tp not in tps:
            continue
        backoff = record.calculate_backoff()
        if backoff:
            backoff_by_nodes[fetcher._select_read_replica(tp)].append(backoff)
    if backoff_by_nodes:
        timeout = min(map(max, backoff_by_nodes.values()))
    else:
        timeout = fetcher._fetcher_timeout
    return [], collections.defaultdict(list), timeout, False, []
