"""`agui-gateway run` sets the service's garbage-collector thresholds at start-up."""

import gc

import pytest

from gateway.commands import collector, run
from gateway.settings import Settings


@pytest.fixture
def restored_gc():
    thresholds = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*thresholds)


def test_configure_freezes_what_exists_and_sets_the_thresholds(restored_gc):
    gc.unfreeze()
    gc.set_threshold(700, 10, 10)
    collector.configure()
    assert gc.get_threshold() == collector.THRESHOLDS
    assert gc.get_freeze_count() > 0


def test_run_configures_the_collector_before_it_serves(restored_gc, monkeypatch):
    gc.set_threshold(700, 10, 10)
    seen: list[tuple[int, ...]] = []

    def until_stopped(name, settings, work):
        seen.append(gc.get_threshold())
        work.close()  # the coroutine is not run: only the start-up order is under test
        return 0

    monkeypatch.setattr(run, "run_until_stopped", until_stopped)
    monkeypatch.setattr(run.logs, "configure", lambda level: None)
    assert run.main(Settings()) == 0
    assert seen == [collector.THRESHOLDS]
