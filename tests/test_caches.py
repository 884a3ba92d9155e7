"""Every module-level cache of the package is bounded by construction, and listed here.

A cache keyed by what records carry (ids, texts, times) grows with traffic unless it
has a size; one keyed by something finite (a model class, a format version, nothing
at all) stays as it is. Each cache below says which in a comment where it is defined,
and this list says the same: a cache that is not listed, a listed one that is gone,
a comment that is missing, or a module-level container that grows under traffic
after a warm-up fails here.
"""

from __future__ import annotations

import gc
import importlib
import inspect
import pkgutil
from collections import OrderedDict, deque
from typing import Any

import pytest

import gateway
from gateway.core.values.bytecache import ByteLRU
from tests.kafka.test_pair import make_pair
from tests.kafka.traffic import Traffic

# name -> its bound: ("lru", maxsize), ("bytes", budget), ("finite", what it is keyed by)
LISTED: dict[str, tuple[str, Any]] = {
    "gateway.codec.changelog.schema": ("finite", "format version"),
    "gateway.core.reading.input_schema.schema": ("finite", "no arguments"),
    "gateway.core.reading.input_schema.validator": ("finite", "no arguments"),
    "gateway.core.reading.input_schema.lenient": ("finite", "no arguments"),
    "gateway.core.reading.input_schema.walker": ("finite", "no arguments"),
    "gateway.core.reading.input_schema.lenient_schema": ("finite", "no arguments"),
    "gateway.core.reading.input_schema.quick": ("finite", "no arguments"),
    "gateway.core.reading.input_schema.lenient_count": ("finite", "no arguments"),
    "gateway.core.reading.shape._windowed": ("finite", "no arguments"),
    "gateway.core.reading.shape._item_count": ("finite", "no arguments"),
    "gateway.core.reading.strip._nested_fields": ("finite", "model class"),
    "gateway.core.reading.extras._root": ("finite", "model class"),
    "gateway.core.reading.extras._SPECS": ("finite", "model nodes of the models `_root` read"),
    "gateway.kafka.pairs.shaping.iso": ("lru", 1024),
    "gateway.core.reading.response_schema._by_text": ("bytes", 16 * 1024 * 1024),
    "gateway.core.reading.expiry._cache": ("bytes", 1024 * 1024),
    "gateway.settings.field_docs": ("finite", "model class"),
}
FINITE_MOST = 64  # entries a cache keyed by something finite may hold after traffic
COMMENT_WORDS = ("bounded", "keyed by", "no arguments")


def _modules() -> list[Any]:
    names = [
        info.name
        for info in pkgutil.walk_packages(gateway.__path__, "gateway.")
        if not info.name.endswith("__main__")
    ]
    return [importlib.import_module(name) for name in sorted(names)]


def _is_function_cache(value: Any) -> bool:
    return callable(value) and hasattr(value, "cache_info") and hasattr(value, "cache_clear")


def _found() -> dict[str, Any]:
    """Every module-level functools cache and ByteLRU, by its module's own name."""
    found = {}
    for module in _modules():
        for name, value in vars(module).items():
            own = getattr(value, "__module__", module.__name__) == module.__name__
            if (_is_function_cache(value) and own) or isinstance(value, ByteLRU):
                found[f"{module.__name__}.{name}"] = value
    return found


def _containers() -> dict[str, Any]:
    """Every module-level dict, list, set or deque of the package's modules."""
    kinds = (dict, list, set, deque, OrderedDict)
    return {
        f"{module.__name__}.{name}": value
        for module in _modules()
        for name, value in vars(module).items()
        if type(value) in kinds and not name.startswith("__")
    }


def _size(value: Any) -> int:
    if _is_function_cache(value):
        return int(value.cache_info().currsize)
    return len(value)


def _definition_lines(name: str, value: Any) -> list[str]:
    module_name, _, attribute = name.rpartition(".")
    if _is_function_cache(value):
        lines, _ = inspect.getsourcelines(value.__wrapped__)
        return lines[:3]
    source = inspect.getsource(importlib.import_module(module_name)).splitlines()
    at = [i for i, line in enumerate(source) if line.startswith(f"{attribute}:")]
    at = at or [i for i, line in enumerate(source) if line.startswith(f"{attribute} =")]
    assert at, f"{name}: its definition was not found"
    return source[max(0, at[0] - 3) : at[0] + 1]


def test_every_module_level_cache_is_listed_with_its_bound():
    found = _found()
    named_containers = {name for name in LISTED if name not in found}
    containers = _containers()
    assert named_containers <= set(containers), named_containers - set(containers)
    assert set(found) == {name for name in LISTED if name not in named_containers}
    for name, value in found.items():
        kind, bound = LISTED[name]
        if isinstance(value, ByteLRU):
            assert kind == "bytes" and value.budget == bound, name
        elif kind == "lru":
            assert value.cache_info().maxsize == bound, name
        else:
            assert kind == "finite", name


@pytest.mark.parametrize("name", sorted(LISTED))
def test_every_cache_says_where_it_is_defined_what_bounds_it(name):
    found = _found()
    value = found[name] if name in found else _containers()[name]
    comments = [line.partition("#")[2].lower() for line in _definition_lines(name, value)]
    assert any(word in comment for comment in comments for word in COMMENT_WORDS), (name, comments)


def test_no_module_level_container_or_cache_grows_with_traffic():
    pair, _ = make_pair()
    traffic = Traffic(pair, 20)
    for n in range(3):  # warm-up: models built, schemas read
        traffic.cycle(n)
    watched = {**_containers(), **_found()}
    before = {name: _size(value) for name, value in watched.items()}
    for n in range(3, 23):
        traffic.cycle(n)
    gc.collect()
    grown = {
        name: (before[name], _size(value))
        for name, value in watched.items()
        if _size(value) > before[name] and LISTED.get(name, ("", 0))[0] not in ("lru", "bytes")
    }
    assert grown == {}, "module-level state that grows with traffic (unbounded): " + repr(grown)
    for name, value in _found().items():
        if LISTED[name][0] == "finite":
            assert _size(value) <= FINITE_MOST, (name, _size(value))
