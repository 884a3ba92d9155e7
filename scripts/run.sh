#!/usr/bin/env bash
# The main job: a local Kafka broker, a demo agent's topics, the gateway, and a
# traffic generator of simulated agents and clients with a live console
# summary, until Ctrl-C. The broker keeps running afterwards
# (deploy/kafka.sh stop stops it). The gateway runs from .venv-run, a regular
# install without the dev tools. Arguments go to `agui-gateway demo`
# (`./scripts/run.sh --help` lists them without starting a broker).
set -euo pipefail
VENV_KIND=run
source "$(dirname "${BASH_SOURCE[0]}")/_venv.sh"
cd "$ROOT"

for arg in "$@"; do
    case "$arg" in
    -h | --help) exec "$VENV/bin/agui-gateway" demo --help ;;
    esac
done

# With AGUI_GATEWAY_BOOTSTRAP_SERVERS set (e.g. localhost:9092, the compose
# stack's broker), no local broker is started.
if [ -z "${AGUI_GATEWAY_BOOTSTRAP_SERVERS:-}" ]; then
    export KAFKA_PORT="${KAFKA_PORT:-9092}"
    deploy/kafka.sh start
    export AGUI_GATEWAY_BOOTSTRAP_SERVERS="127.0.0.1:$KAFKA_PORT"
fi
exec "$VENV/bin/agui-gateway" demo "$@"
