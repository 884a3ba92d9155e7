#!/usr/bin/env bash
# deploy/prometheus.sh - make the Prometheus server and promtool available, from
# Debian's own `prometheus` package (it ships both /usr/bin/prometheus and
# /usr/bin/promtool). Used by the tests in tests/observe/, which run promtool and
# a real Prometheus server themselves.
#
# Usage: deploy/prometheus.sh ensure|check
#   ensure   if `prometheus` and `promtool` are both found (PATH or /usr/bin), print
#            their versions and exit 0 without touching the system (fast, idempotent).
#            Otherwise, as root (or through sudo when it is available):
#              apt-get update
#              apt-get install -y --no-install-recommends prometheus
#            non-interactively, then print the versions.
#   check    print the versions and exit 0 when both are present, exit 3 when not.
#            Never installs anything.
#
# What `ensure` does NOT do: it never starts or restarts the packaged
# `prometheus` system service. The tests run the binary themselves, on a loopback
# port of their choosing. To keep the package's maintainer scripts from starting
# the service during the install, a temporary /usr/sbin/policy-rc.d answering
# "action forbidden" (exit 101, the Debian policy mechanism honoured by
# invoke-rc.d and deb-systemd-invoke) is put in place for the duration of the
# apt-get install, and the previous one (if any) is restored afterwards.
# --no-install-recommends keeps out prometheus-node-exporter (a second daemon).
# The package itself still marks prometheus.service as enabled for systemd (a
# symlink under /etc/systemd/system); on a host booted with systemd that unit would
# start at the next boot: `systemctl disable --now prometheus` if you don't want it.
# Debian 12 ships Prometheus 2.42 (the tests and the rules in deploy/prometheus/
# need nothing newer).
#
# Environment:
#   PROMETHEUS_APT_UPDATE=0   skip `apt-get update` before installing (default 1)

set -euo pipefail

PACKAGE=prometheus
POLICY_RC_D=/usr/sbin/policy-rc.d

say() { printf 'deploy/prometheus.sh: %s\n' "$*" >&2; }

find_bin() {
    # $1: binary name. Prints its path, or nothing.
    local found
    found=$(command -v "$1" 2>/dev/null || true)
    if [[ -z $found && -x /usr/bin/$1 ]]; then
        found=/usr/bin/$1
    fi
    printf '%s' "$found"
}

versions() {
    local prom tool
    prom=$(find_bin prometheus)
    tool=$(find_bin promtool)
    if [[ -z $prom || -z $tool ]]; then
        return 3
    fi
    # Both print a multi-line banner; the first line carries the version.
    printf 'prometheus: %s (%s)\n' "$("$prom" --version 2>&1 | head -n1)" "$prom"
    printf 'promtool:   %s (%s)\n' "$("$tool" --version 2>&1 | head -n1)" "$tool"
}

as_root() {
    if [[ $(id -u) -eq 0 ]]; then
        "$@"
    elif command -v sudo >/dev/null 2>&1; then
        sudo -n "$@"
    else
        say "installing the Debian package '$PACKAGE' needs root (or sudo); run as root:"
        say "  apt-get update && apt-get install -y --no-install-recommends $PACKAGE"
        exit 1
    fi
}

# Put back the policy-rc.d that was there before the install (or none).
restore_policy() {
    if [[ ${HAD_POLICY:-0} -eq 1 ]]; then
        as_root cp -p "$POLICY_BACKUP" "$POLICY_RC_D"
    else
        as_root rm -f "$POLICY_RC_D"
    fi
    rm -f "${POLICY_BACKUP:-}"
}

install_package() {
    if ! command -v apt-get >/dev/null 2>&1; then
        say "apt-get not found: install Prometheus (server and promtool) yourself"
        exit 1
    fi
    POLICY_BACKUP=$(mktemp)
    HAD_POLICY=0
    if [[ -e $POLICY_RC_D ]]; then
        HAD_POLICY=1
        as_root cp -p "$POLICY_RC_D" "$POLICY_BACKUP"
    fi
    trap restore_policy EXIT
    say "temporarily forbidding service starts ($POLICY_RC_D exits 101) during the install"
    printf '#!/bin/sh\n# deploy/prometheus.sh: no service starts during its apt-get install\nexit 101\n' \
        | as_root tee "$POLICY_RC_D" >/dev/null
    as_root chmod 755 "$POLICY_RC_D"

    export DEBIAN_FRONTEND=noninteractive
    if [[ ${PROMETHEUS_APT_UPDATE:-1} != 0 ]]; then
        say "apt-get update"
        as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    fi
    say "apt-get install -y --no-install-recommends $PACKAGE"
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold \
        "$PACKAGE" >&2
    restore_policy
    trap - EXIT
    say "installed; the '$PACKAGE' system service was not started (run the binary yourself)"
}

cmd=${1:-}
case $cmd in
ensure)
    if versions; then
        exit 0
    fi
    say "prometheus and/or promtool missing: installing Debian's '$PACKAGE' package"
    started=$(date +%s)
    install_package
    say "install took $(($(date +%s) - started)) s"
    if ! versions; then
        say "the '$PACKAGE' package is installed but prometheus/promtool are still not found"
        exit 1
    fi
    ;;
check)
    if ! versions; then
        say "prometheus and/or promtool missing; run: deploy/prometheus.sh ensure"
        exit 3
    fi
    ;;
*)
    say "usage: deploy/prometheus.sh ensure|check"
    exit 2
    ;;
esac
