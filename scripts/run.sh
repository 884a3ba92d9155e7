#!/usr/bin/env bash
# The main job: a local Kafka broker, a demo agent's topics, the gateway, and a
# traffic generator of simulated agents and clients with a live console
# summary, until Ctrl-C. The broker keeps running afterwards
# (deploy/kafka.sh stop stops it).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/_venv.sh"
cd "$ROOT"

export KAFKA_PORT="${KAFKA_PORT:-9092}"
deploy/kafka.sh start
export AGUI_GATEWAY_BOOTSTRAP_SERVERS="${AGUI_GATEWAY_BOOTSTRAP_SERVERS:-127.0.0.1:$KAFKA_PORT}"
exec "$VENV/bin/agui-gateway" demo "$@"
