"""The package map is the architecture: imports run one way, from a higher layer to a
lower one, never back.

Across the packages: the core imports nothing of the gateway (its own purity test
holds more); the codec and the state store sit on the core; the Kafka shell on them.
Within `gateway.kafka` and `gateway.core`, each subpackage may import only the layers
below it (and itself). A new module must be in a subpackage this test knows.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

GATEWAY = Path(__file__).resolve().parents[1] / "gateway"

# package -> its layers, lowest first; a layer may import those before it (and itself)
LAYERS: dict[str, list[set[str]]] = {
    "gateway.kafka": [{"wire"}, {"pairs"}, {"exactly_once"}, {"assign"}, {"runner"}],
    "gateway.core": [{"values"}, {"reading"}, {"events", "requests"}],
}
# top-level packages: what each may import of the others
MAY_IMPORT: dict[str, set[str]] = {
    "core": set(),
    "codec": {"core"},
    "state": {"core", "codec"},
    "observe": {"core", "codec"},
}


def _imports(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text())
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
            # `from gateway.kafka import wire` names a subpackage, not a member
            found += [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names]
    return found


def _rank(package: str, part: str) -> int | None:
    for rank, layer in enumerate(LAYERS[package]):
        if part in layer:
            return rank
    return None


def _modules(package: str) -> list[Path]:
    root = GATEWAY / package.split(".")[1]
    return sorted(p for p in root.rglob("*.py") if p.parent != root or p.name != "__init__.py")


@pytest.mark.parametrize("package", sorted(LAYERS))
def test_every_module_is_in_a_known_layer(package):
    root = GATEWAY / package.split(".")[1]
    unplaced = [
        str(p.relative_to(root))
        for p in _modules(package)
        if _rank(package, p.relative_to(root).parts[0].removesuffix(".py")) is None
    ]
    assert unplaced == [], f"modules of {package} in no layer of this test: {unplaced}"


@pytest.mark.parametrize("package", sorted(LAYERS))
def test_imports_within_a_package_only_go_down(package):
    root = GATEWAY / package.split(".")[1]
    problems = []
    for path in _modules(package):
        mine = _rank(package, path.relative_to(root).parts[0].removesuffix(".py"))
        assert mine is not None
        for line, name in _imports(path):
            if not name.startswith(package + "."):
                continue
            theirs = _rank(package, name.split(".")[2])
            if theirs is not None and theirs > mine:
                problems.append(
                    f"{path.relative_to(GATEWAY)}:{line} imports {name} (a higher layer)"
                )
            elif theirs == mine and name.split(".")[2] != path.relative_to(root).parts[0]:
                problems.append(f"{path.relative_to(GATEWAY)}:{line} imports {name} (a sibling)")
    assert problems == []


def test_the_lower_packages_import_no_higher_one():
    problems = []
    for package, allowed in MAY_IMPORT.items():
        for path in sorted((GATEWAY / package).rglob("*.py")):
            for line, name in _imports(path):
                parts = name.split(".")
                if parts[0] != "gateway" or len(parts) < 2 or parts[1] in (package, "__version__"):
                    continue
                if parts[1] not in allowed:
                    problems.append(f"{path.relative_to(GATEWAY)}:{line} imports {name}")
    assert problems == []


def test_every_subpackage_says_what_it_owns():
    for package in LAYERS:
        root = GATEWAY / package.split(".")[1]
        for init in root.glob("*/__init__.py"):
            doc = ast.get_docstring(ast.parse(init.read_text()))
            assert doc and len(doc) > 80, f"{init.relative_to(GATEWAY)} has no docstring"
