"""Copies of the checkout's sources, for tests that take a fresh clone's or a user's path."""

from __future__ import annotations

import shutil
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]

# What a fresh clone does not have: local state, caches, venvs, build output.
NOT_SOURCES = shutil.ignore_patterns(
    ".git",
    ".venv*",
    ".kafka",
    ".cache",
    "build",
    "dist",
    "*.egg-info",
    "__pycache__",
    ".pytest_cache",
    ".mypy_cache",
    ".ruff_cache",
    ".hypothesis",
    "results",
)


def copy_checkout(dest: Path) -> Path:
    """The checkout's sources copied to `dest` (created), without local state."""
    shutil.copytree(REPO_ROOT, dest, ignore=NOT_SOURCES, symlinks=True)
    return dest
