"""The instances scenario's reading of waits (by send time and partition) and of the pairs
that moved when an instance was added (pure, no broker)."""

from __future__ import annotations

from bench.scenarios.instances import Driver, must_move, owners


def _driver() -> Driver:
    driver = Driver(None, None, threads=0, partitions=4)  # type: ignore[arg-type]
    driver.origin -= 100  # "now" is 100 s after the start
    # sent at, partition, thread; forwarded (or rejected) at
    driver.sent = {
        "before": (0.5, 0, "a"),
        "dead": (2.0, 0, "b"),
        "dead-late": (3.0, 1, "c"),
        "alive": (2.5, 2, "d"),
        "rejected": (2.6, 3, "e"),
        "waiting": (4.0, 3, "f"),
        "after": (9.0, 0, "g"),
    }
    driver.forwarded = {
        "before": [0.6],
        "dead": [8.0],
        "dead-late": [8.1, 8.5],  # twice: the first counts
        "alive": [2.7],
        "after": [9.1],
    }
    driver.rejected = {"rejected": 3.0}
    return driver


def test_waits_split_by_the_dead_instances_partitions() -> None:
    driver = _driver()
    on = driver.waits(1.0, 5.0, {0, 1}, inside=True)
    assert sorted(round(w, 3) for w in on) == [5.1, 6.0]
    off = driver.waits(1.0, 5.0, {0, 1}, inside=False)
    # a rejection ends the wait; a request never decided waits until now (100 s)
    assert sorted(round(w, 3) for w in off) == [0.2, 0.4, 96.0]
    assert len(driver.waits(0.0, 10.0)) == 7


def test_the_fewest_pairs_an_added_instance_must_take() -> None:
    assert must_move([4, 4, 4], 4) == 3  # 12 pairs, 3 -> 4 instances: 3 each
    assert must_move([2, 2, 2], 4) == 1  # 6 pairs: 2, 2, 1 stay, 1 to the new one
    assert must_move([5, 4, 4], 4) == 3  # 13 pairs: 4, 3, 3 stay, 3 to the new one
    assert must_move([3, 3], 2) == 0  # the same members: nothing must move


def test_owners_name_the_instance_of_each_pair() -> None:
    before = owners([[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]])
    after = owners([[0, 1, 2], [4, 5, 6], [8, 9, 10], [3, 7, 11]])
    assert {p for p in range(12) if before[p] != after[p]} == {3, 7, 11}
