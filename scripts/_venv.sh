# Sourced by the other scripts: make sure a venv exists with the project installed.
#
#   VENV_KIND=dev (default, scripts/test.sh): .venv, an editable install with the
#       dev extras (pytest, ruff, mypy, ...) and the bench extra (the benchmark's
#       Quix Streams peer); re-installed when pyproject.toml or setup.py changed
#       since the last install.
#   VENV_KIND=run (scripts/run.sh): .venv-run, a regular install of what the
#       gateway needs plus the demo extra (the offline agent of `demo
#       --real-agent`), no dev tools; re-installed when the sources changed.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-python3}"
VENV_KIND="${VENV_KIND:-dev}"
case "$VENV_KIND" in
dev)
    VENV="$ROOT/.venv"
    INSTALL=(-e "$ROOT[dev,bench]")
    WATCH=("$ROOT/pyproject.toml" "$ROOT/setup.py")
    WHAT="agui-gateway (editable) and its dev and bench dependencies into .venv"
    ;;
run)
    VENV="$ROOT/.venv-run"
    INSTALL=("$ROOT[demo]")
    WATCH=("$ROOT/pyproject.toml" "$ROOT/setup.py" "$ROOT/gateway" "$ROOT/schemas")
    WHAT="agui-gateway[demo] (a regular install, no dev tools) into .venv-run"
    ;;
*)
    echo "error: VENV_KIND must be dev or run, not '$VENV_KIND'" >&2
    exit 2
    ;;
esac
STAMP="$VENV/.agui-installed"

if ! "$PYTHON" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' 2>/dev/null; then
    echo "error: Python 3.11 or newer is required (found: $("$PYTHON" --version 2>&1 || echo none))" >&2
    exit 1
fi
if [ ! -x "$VENV/bin/python" ]; then
    echo "==> creating $VENV"
    "$PYTHON" -m venv "$VENV"
fi
# a source file (not a byte-code cache) newer than the last install
sources_changed() {
    [ -n "$(find "${WATCH[@]}" -name __pycache__ -prune -o -type f -newer "$STAMP" -print 2>/dev/null | head -n1)" ]
}
if [ ! -f "$STAMP" ] || sources_changed; then
    echo "==> installing $WHAT"
    "$VENV/bin/python" -m pip install --quiet --upgrade pip
    "$VENV/bin/python" -m pip install --quiet "${INSTALL[@]}"
    touch "$STAMP"
fi
export KAFKA_PYTHON="$VENV/bin/python"
