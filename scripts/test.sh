#!/usr/bin/env bash
# The whole test suite: .venv with the package, the static checks (ruff check,
# ruff format --check, mypy), a real local Kafka broker, pytest.
# The broker is stopped afterwards whatever the result (if this script started it).
# Extra arguments go to pytest.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/_venv.sh"
cd "$ROOT"

# The project's own ruff and mypy configuration (pyproject.toml), on the whole
# tree, before any broker starts: any failure fails the run.
echo "==> static checks: ruff check, ruff format --check, mypy gateway"
failed=()
"$VENV/bin/ruff" check --quiet . || failed+=("ruff check . (lint errors above)")
"$VENV/bin/ruff" format --check --quiet . ||
    failed+=("ruff format --check . (files above are not formatted; .venv/bin/ruff format fixes them)")
"$VENV/bin/mypy" gateway || failed+=("mypy gateway (type errors above)")
if [ "${#failed[@]}" -gt 0 ]; then
    for check in "${failed[@]}"; do
        echo "error: static check failed: $check" >&2
    done
    echo "error: no tests were run" >&2
    exit 1
fi

# Prometheus and promtool (Debian's package) for the observability tests.
deploy/prometheus.sh ensure
# Debian's chromium for the inbox page's browser tests (Playwright drives it).
deploy/chromium.sh ensure

export KAFKA_PORT="${KAFKA_PORT:-19092}"
started=0
if ! deploy/kafka.sh status >/dev/null 2>&1; then
    started=1
fi
stop_broker() {
    if [ "$started" = 1 ]; then
        deploy/kafka.sh stop || true
    fi
}
trap stop_broker EXIT

if ! deploy/kafka.sh start; then
    echo "error: the Kafka broker did not start; its log tail:" >&2
    deploy/kafka.sh logs 2>/dev/null | tail -n 60 >&2 || true
    exit 1
fi

# Two lanes (pytest-xdist): the suite mostly waits on the broker and on the
# gateway's subprocesses; tests/conftest.py keeps what one process must hold
# in one lane. TEST_LANES=0 runs everything in this process.
set +e
"$VENV/bin/python" -m pytest -n "${TEST_LANES:-2}" --dist loadgroup "$@"
status=$?
set -e
if [ "$status" -eq 5 ]; then
    echo "error: pytest collected no tests" >&2
fi
exit "$status"
