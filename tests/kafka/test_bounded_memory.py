"""Memory that stays flat: once the threads are fixed, more traffic holds no more memory.

Traffic with fresh ids every run goes through the core, the pair and the store
(`tests.kafka.traffic`); after a warm-up, two equal stretches of it must leave the
bytes Python holds (tracemalloc) and the number of live objects (gc) where they were.
A cache keyed by anything a record carries, or state that remembers every run, grows
with each stretch. Objects are counted, nothing is timed.
"""

from __future__ import annotations

import gc
import tracemalloc

from tests.kafka.test_pair import make_pair
from tests.kafka.traffic import Traffic
from tests.test_caches import LISTED, _found

THREADS = 40
STRETCH = 15  # cycles: 40 threads x 15 conversations x 12 events = 7,200 events


def _held() -> tuple[int, int]:
    gc.collect()
    return tracemalloc.get_traced_memory()[0], len(gc.get_objects())


def test_traffic_on_fixed_threads_holds_no_more_memory_as_it_goes_on():
    pair, registry = make_pair()
    traffic = Traffic(pair, THREADS)
    # the bounded caches start empty, so that the warm-up fills them while traced: an
    # untraced entry of an earlier test evicted for a traced one would count as growth
    for name, cache in _found().items():
        if LISTED[name][0] in ("lru", "bytes"):
            if hasattr(cache, "cache_clear"):
                cache.cache_clear()
            else:
                cache.clear()
    tracemalloc.start()
    try:
        for n in range(STRETCH):  # warm-up: imports, model builds, per-thread state
            traffic.cycle(n)
        bytes_0, objects_0 = _held()
        for n in range(STRETCH, 2 * STRETCH):
            traffic.cycle(n)
        bytes_1, objects_1 = _held()
        events_per_stretch = traffic.events // 2
        for n in range(2 * STRETCH, 3 * STRETCH):
            traffic.cycle(n)
        bytes_2, objects_2 = _held()
    finally:
        tracemalloc.stop()

    # the traffic is what it says: each conversation one rejection and one forward
    conversations = THREADS * 3 * STRETCH
    verdicts = {
        verdict: registry.get_sample_value(
            "agui_gateway_requests_total", {"verdict": verdict, "agent": "bot"}
        )
        for verdict in ("forward", "reject")
    }
    assert verdicts == {"forward": conversations, "reject": conversations}
    assert len(pair.store) == THREADS

    # Two stretches of the same traffic after the warm-up: what either adds is noise,
    # not a share of the events (the leak this guards against held ~700 B per event).
    grown = [bytes_1 - bytes_0, bytes_2 - bytes_1]
    assert max(grown) < 8 * events_per_stretch, (grown, events_per_stretch)
    assert bytes_2 - bytes_0 < 8 * events_per_stretch, (bytes_0, bytes_1, bytes_2)
    assert max(objects_1 - objects_0, objects_2 - objects_1) < events_per_stretch // 20, (
        objects_0,
        objects_1,
        objects_2,
    )
