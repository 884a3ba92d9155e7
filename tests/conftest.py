"""Lanes: which tests must run in the same pytest-xdist worker.

`scripts/test.sh` runs the suite in two lanes (`-n 2 --dist loadgroup`): most
of its time is spent waiting on the broker and on the gateway's subprocesses,
so a second lane fills that time. A few fixtures hold something only one
process may hold at a time; every test that uses one is put in the same group,
so the thing is made once, in one worker, and never twice at once.
"""

from __future__ import annotations

import pytest

# fixture -> group: what it holds that a second worker must not make again
ONE_LANE = {
    "secure_kafka": "secure-broker",  # the SASL_SSL broker on KAFKA_PORT + 100 and + 200
    "wheel": "wheel",  # the wheel built and installed once (half a minute)
    "installed": "wheel",
}
# a module-scoped `broker` is a broker of that module's own, on fixed ports
# (test_broker_gone: + 300/400, test_fleet_exactly_once: + 500/600)
OWN_BROKER = "broker"


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups into the test ids
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        groups = {ONE_LANE[name] for name in names & ONE_LANE.keys()}
        if OWN_BROKER in names:
            groups.add(f"own-broker-{item.module.__name__}")  # type: ignore[attr-defined]
        if len(groups) > 1:  # xdist would make a third group of the two, in any lane
            raise pytest.UsageError(f"{item.nodeid} needs two lanes at once: {sorted(groups)}")
        for group in groups:
            item.add_marker(pytest.mark.xdist_group(group))


LOST = pytest.StashKey[bool]()


@pytest.hookimpl(trylast=True)  # after xdist has written the groups into the test ids
def pytest_collection_finish(session: pytest.Session) -> None:
    """A test whose group xdist did not take fails: its lane may have been mixed."""
    if hasattr(session.config, "workerinput"):  # in an xdist worker: one lane of several
        for item in session.items:
            if item.get_closest_marker("xdist_group") and "@" not in item.nodeid:
                item.stash[LOST] = True


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.stash.get(LOST, False):
        pytest.fail(
            "pytest-xdist did not keep this test in its lane (tests/conftest.py): run the lanes "
            "with --dist loadgroup, on a pytest whose test ids xdist's groups still work with "
            "(see the pin in pyproject.toml)",
            pytrace=False,
        )
