"""scripts/test.sh runs ruff check, ruff format --check and mypy first; a failure fails the run."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from tests.checkout import REPO_ROOT, copy_checkout


def test_a_lint_format_or_type_error_fails_the_run_before_any_test(tmp_path: Path) -> None:
    tree = copy_checkout(tmp_path / "clone")
    # the test venv, as is: old build files, so that it is not re-installed from the copy
    (tree / ".venv").symlink_to(REPO_ROOT / ".venv")
    for name in ("pyproject.toml", "setup.py"):
        os.utime(tree / name, (0, 0))
    # mypy's cache from the run that started this suite: the probes are new files,
    # checked all the same, and the rest is not checked again (half a minute)
    if (REPO_ROOT / ".mypy_cache").is_dir():
        shutil.copytree(REPO_ROOT / ".mypy_cache", tree / ".mypy_cache")
    (tree / "gateway" / "_lint_probe.py").write_text('"""Probe."""\n\nimport os\n')
    (tree / "tests" / "_format_probe.py").write_text('"""Probe."""\n\nx=1\n')
    (tree / "gateway" / "_type_probe.py").write_text('"""Probe."""\n\nx: int = "one"\n')
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["KAFKA_PORT"] = "not-a-port"  # reaching the broker would fail differently
    result = subprocess.run(
        [str(tree / "scripts" / "test.sh"), "-q"],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        stdin=subprocess.DEVNULL,
    )
    out = result.stdout + result.stderr
    assert result.returncode == 1, out
    assert "error: static check failed: ruff check" in result.stderr, out
    assert "error: static check failed: ruff format --check" in result.stderr, out
    assert "error: static check failed: mypy gateway" in result.stderr, out
    assert "_lint_probe.py" in out and "_format_probe.py" in out and "_type_probe.py" in out
    assert "error: no tests were run" in result.stderr
    assert "kafka.sh" not in out and "passed" not in out, out
