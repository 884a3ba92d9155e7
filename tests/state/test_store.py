from gateway.core.values.thread import InterruptRecord, RunStatus, ThreadState
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


def test_closed_threads_are_held_as_bytes_without_their_id_and_active_ones_as_objects():
    from gateway.codec import changelog

    store = ThreadStore()
    closed = ThreadState(
        "a" * 36, RunStatus.INTERRUPTED, "r", interrupts=(InterruptRecord("x", "r", "m"),)
    )
    active = ThreadState("b", RunStatus.ACTIVE, "r2")
    store.put(closed)
    store.put(active)
    store.commit()
    held = store._committed["a" * 36]
    assert isinstance(held, bytes) and b"a" * 36 not in held
    assert held == changelog.encode_held(closed)
    assert store.get("a" * 36) == closed and store.open_interrupts() == 1
    assert store._committed["b"] is active and store.get("b") is active


def test_an_older_restored_value_is_decoded_once_then_held_as_version_4():
    import io

    from fastavro import schemaless_writer

    from gateway.codec import changelog
    from gateway.core.values.thread import to_dict

    state = ThreadState("a", RunStatus.SUCCEEDED, "r", "success", closed_at_ms=3, updated_ms=3)
    out = io.BytesIO(b"\x03")
    out.seek(1)
    schemaless_writer(out, changelog.schema(3), to_dict(state))
    store = ThreadStore()
    store.load(out.getvalue(), "a")
    assert store.get("a") == state
    assert store._committed["a"] == changelog.encode_held(state)
    assert store.get("a") == state


def test_a_state_put_with_its_changelog_value_is_held_as_the_held_encoding():
    from gateway.codec import changelog

    store = ThreadStore()
    state = ThreadState(
        "a", RunStatus.INTERRUPTED, run_id="r", interrupts=(InterruptRecord("x", "r"),)
    )
    store.put(state, "a", changelog.encode(state))
    store.put(ThreadState("b", RunStatus.SUCCEEDED), "b", b"not a changelog value")
    store.commit()
    assert store._committed["a"] == changelog.encode_held(state)
    # a value that cannot be cut: the state is encoded as before
    assert store._committed["b"] == changelog.encode_held(ThreadState("b", RunStatus.SUCCEEDED))
    assert store.get("a") == state and store._values == {}
