"""A wheel built from the checkout and installed into a fresh venv outside it.

The tests here take a user's path (`pip install .`), not a developer's: the
sources are copied out of the checkout (so no stale `build/` and no `schemas/`
next to the code), built into a wheel, and installed with its dependencies
into a venv of its own, once per session. Tests run its console scripts from
a directory outside the checkout, with `installed.script(name)`.
"""

from __future__ import annotations

import os
import subprocess
import sys
import venv
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.checkout import REPO_ROOT, copy_checkout
from tests.integration.conftest import kafka_bootstrap, unique_name  # noqa: F401

PIP_TIMEOUT_S = 600


def _run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    result = subprocess.run(
        argv,
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=PIP_TIMEOUT_S,
        stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 0, f"{argv} exited {result.returncode}:\n{result.stderr[-4000:]}"
    return result


@dataclass(frozen=True)
class Installed:
    """A venv with only the wheel (and its dependencies) installed."""

    venv: Path
    wheel: Path

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    def script(self, name: str = "agui-gateway") -> Path:
        path = self.venv / "bin" / name
        assert path.is_file(), f"the wheel installs no console script {name!r}"
        return path

    def env(self) -> dict[str, str]:
        """The caller's environment without anything pointing into the checkout."""
        return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}


@pytest.fixture(scope="session")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The project's wheel, built from a copy of the checkout's sources."""
    src = copy_checkout(tmp_path_factory.mktemp("src") / "agui-gateway")
    out = tmp_path_factory.mktemp("wheel")
    _run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(out), str(src)],
        cwd=out,
    )
    wheels = list(out.glob("agui_gateway-*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


@pytest.fixture(scope="session")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Installed:
    """The wheel installed (not editable) into a fresh venv outside the checkout."""
    root = tmp_path_factory.mktemp("installed") / "venv"
    assert REPO_ROOT not in root.parents
    venv.EnvBuilder(with_pip=True).create(root)
    python = root / "bin" / "python"
    _run([str(python), "-m", "pip", "install", "--quiet", str(wheel)], cwd=root)
    return Installed(venv=root, wheel=wheel)


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A working directory outside the checkout, for the installed scripts."""
    assert REPO_ROOT not in tmp_path.parents
    return tmp_path
