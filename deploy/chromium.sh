#!/usr/bin/env bash
# deploy/chromium.sh - make Debian's `chromium` available for the tests that drive
# the inbox page in a real browser (tests/inbox_page/test_browser_*.py, through
# Playwright with Debian's binary: no browser download).
#
# Usage: deploy/chromium.sh ensure|check
#   ensure   if `chromium` is found (PATH or /usr/bin), print its version and exit 0
#            without touching the system. Otherwise, as root (or through sudo when it
#            is available): apt-get update; apt-get install -y --no-install-recommends
#            chromium; then print the version.
#   check    print the version and exit 0 when present, exit 3 when not.
#
# Environment:
#   CHROMIUM_APT_UPDATE=0   skip `apt-get update` before installing (default 1)

set -euo pipefail

say() { printf 'deploy/chromium.sh: %s\n' "$*" >&2; }

found() { command -v chromium >/dev/null 2>&1 || [ -x /usr/bin/chromium ]; }

version() { chromium --version 2>/dev/null || /usr/bin/chromium --version; }

as_root() {
    if [ "$(id -u)" = 0 ]; then
        "$@"
    elif command -v sudo >/dev/null 2>&1; then
        sudo "$@"
    else
        say "not root and no sudo: install Debian's chromium package (apt-get install chromium)"
        exit 1
    fi
}

case "${1:-}" in
ensure)
    if found; then
        version
        exit 0
    fi
    say "chromium not found; installing Debian's package"
    if [ "${CHROMIUM_APT_UPDATE:-1}" = 1 ]; then
        as_root env DEBIAN_FRONTEND=noninteractive apt-get update -q
    fi
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends chromium
    version
    ;;
check)
    if found; then
        version
        exit 0
    fi
    say "chromium not found (deploy/chromium.sh ensure installs it)"
    exit 3
    ;;
*)
    say "usage: deploy/chromium.sh ensure|check"
    exit 2
    ;;
esac
