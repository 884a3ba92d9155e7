from gateway.core.thread import InterruptRecord, RunStatus, ThreadState
from gateway.state.store import ThreadStore


def test_pending_changes_are_invisible_to_committed_until_commit():
    store = ThreadStore()
    store.put(ThreadState("a", RunStatus.ACTIVE))
    assert store.get("a").status is RunStatus.ACTIVE
    assert len(store) == 0 and set(store.changes()) == {"a"}
    store.commit()
    assert len(store) == 1 and store.changes() == {}


def test_rollback_restores_the_committed_view():
    store = ThreadStore()
    store.put(ThreadState("a", RunStatus.ACTIVE))
    store.commit()
    store.delete("a")
    assert store.get("a") is None
    store.rollback()
    assert store.get("a").status is RunStatus.ACTIVE


def test_delete_commits_as_removal_and_counts_open_interrupts():
    store = ThreadStore()
    store.put(ThreadState("a", RunStatus.INTERRUPTED, interrupts=(InterruptRecord("x", "r"),)))
    store.put(ThreadState("b"))
    store.commit()
    assert store.open_interrupts() == 1
    store.delete("a")
    assert store.changes() == {"a": None}
    store.commit()
    assert store.get("a") is None and len(store) == 1


def test_load_sets_and_removes_directly():
    store = ThreadStore()
    store.load(ThreadState("a"), "a")
    store.load(None, "a")
    store.load(ThreadState("b"), "b")
    assert [s.thread_id for s in store.committed()] == ["b"]


def test_restored_bytes_are_decoded_on_first_read_and_bad_ones_read_as_unknown(caplog):
    from gateway.codec import changelog

    store = ThreadStore()
    state = ThreadState("a", RunStatus.INTERRUPTED, interrupts=(InterruptRecord("x", "r"),))
    store.load(changelog.encode(state), "a")
    store.load(b"\x01\xff\xff", "bad")
    assert len(store) == 2
    assert store.get("a") == state
    assert store.get("bad") is None and len(store) == 1
    assert "unreadable changelog value" in caplog.text
