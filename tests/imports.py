"""What a fresh interpreter loads: for the tests that hold a module to what it imports."""

from __future__ import annotations

import json
import subprocess
import sys


def loaded_by(*modules: str) -> set[str]:
    """Every module in `sys.modules` of a new interpreter after importing `modules`."""
    code = f"import json, sys; import {', '.join(modules)}; print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    return set(json.loads(out.stdout))


def under(loaded: set[str], package: str) -> list[str]:
    """The loaded modules that are `package` or inside it."""
    return sorted(name for name in loaded if name == package or name.startswith(package + "."))
