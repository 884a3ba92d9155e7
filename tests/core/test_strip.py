"""Taking members out of a decoded input (gateway.core.reading.strip.remove_paths), checked
against the plain reading: delete each path from a deep copy, outermost first."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.core.reading.strip import Path, remove_paths

_VALUES = st.recursive(
    st.integers(0, 3) | st.text(max_size=2),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=2), inner, max_size=4)
    ),
    max_leaves=20,
)


def _paths(value: Any, at: Path = ()) -> list[Path]:
    found: list[Path] = []
    if isinstance(value, dict):
        for key, item in value.items():
            found += [(*at, key), *_paths(item, (*at, key))]
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += [(*at, index), *_paths(item, (*at, index))]
    return found


def _reference(doc: dict[str, Any], paths: list[Path]) -> dict[str, Any]:
    """Delete every path that no other path contains, list positions from the last."""
    out = copy.deepcopy(doc)
    outermost = {p for p in paths if not any(p[:n] in paths for n in range(1, len(p)))}
    for path in sorted(outermost, key=lambda p: [(str(type(x)), x) for x in p], reverse=True):
        node = out
        for part in path[:-1]:
            node = node[part]
        del node[path[-1]]
    return out


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.text(max_size=2), _VALUES, min_size=1, max_size=5), st.data())
def test_remove_paths_removes_what_the_plain_reading_removes(doc, data):
    candidates = _paths(doc)
    paths = data.draw(st.lists(st.sampled_from(candidates), max_size=8))
    before = copy.deepcopy(doc)
    assert remove_paths(doc, paths) == _reference(doc, paths)
    assert doc == before  # the input itself is never changed
