#!/usr/bin/env bash
# deploy/kafka.sh - run a REAL Apache Kafka broker locally, without Docker.
#
# One JVM, one KRaft node that is both broker and controller, bound to 127.0.0.1.
# The broker jars (org.apache.kafka:kafka_2.13 and its runtime dependencies) are
# resolved by Maven from Maven Central into .cache/kafka/<version>/libs/; nothing
# is downloaded from anywhere else. KRaft storage, logs and the pid file live in
# .kafka/<port>/. Both directories are git-ignored.
#
# Pinned version: Kafka 4.4.0, the newest 4.x that Maven Central serves.
# Kafka 4.0 removed old protocol versions (KIP-896) and aiokafka's support for
# 4.x brokers was questioned (aio-libs/aiokafka#1085), so 4.4.0 was pinned only
# after tests/integration/test_broker_smoke.py passed against it with aiokafka
# 0.14, which negotiates per request the highest version both sides know and
# sent, all accepted: Produce v7, Fetch v11, ListOffsets v3, Metadata v5,
# CreateTopics v3, DescribeConfigs v2, FindCoordinator v1, JoinGroup v5,
# SyncGroup v3, Heartbeat v1, LeaveGroup v1, OffsetCommit v3, OffsetFetch v3,
# InitProducerId v0, AddPartitionsToTxn v0, AddOffsetsToTxn v0,
# TxnOffsetCommit v0, EndTxn v0 (commit and abort). No request was refused.
# The same tests also pass on KAFKA_VERSION=3.9.2, the fallback if a later
# aiokafka or broker breaks this.
#
# Usage: deploy/kafka.sh fetch|format|start|stop|restart|status|logs [-f]
#   fetch    resolve the broker jars with Maven (once; a stamp file marks success)
#   format [--cluster-id=ID]
#            write the config and format KRaft storage (first time only), print
#            the cluster id. The id is ID, else the one saved in
#            <state>/cluster.id, else a new one from Kafka's own generator
#            (kafka-storage random-uuid); a saved id that cannot be one is
#            replaced, with a message.
#   start [--cluster-id=ID]
#            format KRaft storage (first time, as format), start the broker, wait until a Kafka
#            client can bootstrap and list topics, print the bootstrap address on
#            stdout. Reuses a broker this script already started from the same
#            state dir.
#   stop     SIGTERM the broker this script started (pid file), SIGKILL after
#            KAFKA_STOP_TIMEOUT seconds. Idempotent.
#   status   "running ..." and exit 0, or "not running" and exit 3
#   logs     tail of the broker log (-f to follow)
#
# Environment:
#   KAFKA_VERSION          broker version (default: the pinned one above)
#   KAFKA_PORT             client port (default 9092)
#   KAFKA_CONTROLLER_PORT  KRaft controller port (default 9093, or KAFKA_PORT+1
#                          when KAFKA_PORT is not 9092)
#   KAFKA_STATE_DIR        data/logs/pid dir (default <repo>/.kafka/<port>)
#   KAFKA_CACHE_DIR        jar cache (default <repo>/.cache/kafka)
#   KAFKA_PYTHON           python used for the readiness check (default
#                          <repo>/.venv/bin/python, then python3)
#   KAFKA_START_TIMEOUT    seconds to wait for the broker (default 90)
#   KAFKA_STOP_TIMEOUT     seconds to wait after SIGTERM (default 30)
#   KAFKA_HEAP_OPTS        JVM heap (default "-Xms256m -Xmx512m"); every client
#                          connection costs heap: raise it for large fleets,
#                          e.g. "-Xms1g -Xmx2g" (applies at the next start)
#   KAFKA_LOG_LINES        lines shown by `logs` and on failures (default 40)
#   JAVA_HOME              Java 17+ to use (default: java on PATH)
#   KAFKA_SECURITY         plaintext (default) or sasl_ssl: see "secure mode" below
#
# Secure mode (KAFKA_SECURITY=sasl_ssl; default port 9094, controller 9095): the
# client listener is SASL_SSL with SCRAM-SHA-512 only, TLS from a CA and a broker
# certificate generated on the first start (openssl; the broker certificate names
# IP 127.0.0.1 only), StandardAuthorizer with allow.everyone.if.no.acl.found=false.
# Principals, with random passwords made on the first start and stored as SCRAM
# credentials at format time (kafka-storage format --add-scram):
#   admin         super user: the broker itself (inter-broker, controller) and admin
#   agui-gateway  the gateway: no rights until ACLs grant them
#   agui-client   agents and services: no rights until ACLs grant them
# Files in <state>/secure/: ca.crt (what clients trust), <user>.password (mode 600),
# admin.properties (a --command-config for Kafka's own CLI tools).
# The controller listener stays on loopback with SASL PLAIN for the admin only.

set -euo pipefail

PINNED_KAFKA_VERSION=4.4.0

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(cd "$SCRIPT_DIR/.." && pwd)

KAFKA_VERSION=${KAFKA_VERSION:-$PINNED_KAFKA_VERSION}
KAFKA_SECURITY=${KAFKA_SECURITY:-plaintext}
case $KAFKA_SECURITY in
plaintext) KAFKA_PORT=${KAFKA_PORT:-9092} ;;
sasl_ssl)
    KAFKA_PORT=${KAFKA_PORT:-9094}
    [[ $KAFKA_PORT == 9094 ]] && KAFKA_CONTROLLER_PORT=${KAFKA_CONTROLLER_PORT:-9095}
    ;;
*)
    printf 'deploy/kafka.sh: error: KAFKA_SECURITY must be plaintext or sasl_ssl, got %s\n' "$KAFKA_SECURITY" >&2
    exit 1
    ;;
esac
if [[ $KAFKA_PORT == 9092 ]]; then
    KAFKA_CONTROLLER_PORT=${KAFKA_CONTROLLER_PORT:-9093}
elif [[ $KAFKA_PORT =~ ^[0-9]+$ ]]; then
    KAFKA_CONTROLLER_PORT=${KAFKA_CONTROLLER_PORT:-$((KAFKA_PORT + 1))}
else
    KAFKA_CONTROLLER_PORT=${KAFKA_CONTROLLER_PORT:-}  # start rejects the bad KAFKA_PORT
fi
KAFKA_HOST=127.0.0.1
BOOTSTRAP="$KAFKA_HOST:$KAFKA_PORT"
START_TIMEOUT=${KAFKA_START_TIMEOUT:-90}
STOP_TIMEOUT=${KAFKA_STOP_TIMEOUT:-30}
LOG_LINES=${KAFKA_LOG_LINES:-40}
HEAP_OPTS=${KAFKA_HEAP_OPTS:--Xms256m -Xmx512m}

CACHE_ROOT=${KAFKA_CACHE_DIR:-$REPO_ROOT/.cache/kafka}
CACHE_DIR="$CACHE_ROOT/$KAFKA_VERSION"
LIBS_DIR="$CACHE_DIR/libs"
STAMP="$CACHE_DIR/.resolved"

STATE_DIR=${KAFKA_STATE_DIR:-$REPO_ROOT/.kafka/$KAFKA_PORT}
PID_FILE="$STATE_DIR/kafka.pid"
DATA_DIR="$STATE_DIR/data"
LOG_DIR="$STATE_DIR/logs"
SERVER_LOG="$LOG_DIR/server.log"
CONSOLE_LOG="$LOG_DIR/kafka.out"
PROPS="$STATE_DIR/server.properties"

PROG="deploy/kafka.sh"

info() { printf '%s: %s\n' "$PROG" "$*" >&2; }
die() {
    printf '%s: error: %s\n' "$PROG" "$*" >&2
    exit 1
}

check_port_number() {
    local name=$1 value=$2
    if ! [[ $value =~ ^[0-9]+$ ]] || ((value < 1 || value > 65535)); then
        die "$name must be a TCP port number (1-65535), got '$value'"
    fi
}

# --- Java ------------------------------------------------------------------

JAVA=""
find_java() {
    if [[ -n ${JAVA_HOME:-} && -x $JAVA_HOME/bin/java ]]; then
        JAVA="$JAVA_HOME/bin/java"
    elif command -v java >/dev/null 2>&1; then
        JAVA=$(command -v java)
    else
        die "Java not found: Kafka $KAFKA_VERSION needs Java 17 or newer (install a JDK/JRE 17+, e.g. openjdk-17-jre-headless, or set JAVA_HOME)"
    fi
    local version major
    version=$("$JAVA" -version 2>&1 | awk -F'"' '/version/ {print $2; exit}')
    [[ -n $version ]] || die "could not read the Java version from '$JAVA -version'; Kafka needs Java 17 or newer"
    if [[ $version == 1.* ]]; then
        major=$(cut -d. -f2 <<<"$version")
    else
        major=${version%%[.+-]*}
    fi
    [[ $major =~ ^[0-9]+$ ]] || die "could not parse Java version '$version' of $JAVA"
    ((major >= 17)) ||
        die "Java $version at $JAVA is too old: Kafka $KAFKA_VERSION needs Java 17 or newer (set JAVA_HOME to a JDK 17+)"
}

# --- Python (readiness check) ----------------------------------------------

PYTHON=""
find_python() {
    [[ -n $PYTHON ]] && return 0
    if [[ -n ${KAFKA_PYTHON:-} ]]; then
        PYTHON=$(command -v "$KAFKA_PYTHON" 2>/dev/null) ||
            die "KAFKA_PYTHON=$KAFKA_PYTHON is not an executable python"
    elif [[ -x $REPO_ROOT/.venv/bin/python ]]; then
        PYTHON=$REPO_ROOT/.venv/bin/python
    elif command -v python3 >/dev/null 2>&1; then
        PYTHON=$(command -v python3)
    fi
}

# Exit 0 when a Kafka client can bootstrap from $1 and list topics (aiokafka),
# 1 when not (yet). Without aiokafka, falls back to a raw ApiVersions request.
PROBE_PY='
import asyncio, socket, struct, sys

bootstrap = sys.argv[1]

def security():
    import os
    cafile = os.environ.get("KAFKA_PROBE_CAFILE")
    if not cafile:
        return {}
    from aiokafka.helpers import create_ssl_context
    with open(os.environ["KAFKA_PROBE_PASSWORD_FILE"]) as f:
        password = f.read().strip()
    return {
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": "admin",
        "sasl_plain_password": password,
        "ssl_context": create_ssl_context(cafile=cafile),
    }

async def with_aiokafka():
    from aiokafka.admin import AIOKafkaAdminClient
    admin = AIOKafkaAdminClient(
        bootstrap_servers=bootstrap, request_timeout_ms=5000, **security()
    )
    try:
        await admin.start()
        await admin.list_topics()
    finally:
        await admin.close()

def with_socket():
    host, port = bootstrap.rsplit(":", 1)
    client = b"kafka.sh"
    body = struct.pack(">hhih", 18, 0, 1, len(client)) + client  # ApiVersions v0
    with socket.create_connection((host, int(port)), timeout=5) as s:
        s.sendall(struct.pack(">i", len(body)) + body)
        data = b""
        while len(data) < 10:
            chunk = s.recv(4096)
            if not chunk:
                raise ConnectionError("closed")
            data += chunk
    size, corr, err = struct.unpack(">iih", data[:10])
    if corr != 1 or err != 0:
        raise RuntimeError("bad ApiVersions answer")

try:
    import aiokafka  # noqa: F401
except ImportError:
    with_socket()
else:
    asyncio.run(asyncio.wait_for(with_aiokafka(), 10))
'

broker_answers() {
    find_python
    if [[ -n $PYTHON && $KAFKA_SECURITY == sasl_ssl ]]; then
        KAFKA_PROBE_CAFILE="$SECURE_DIR/ca.crt" KAFKA_PROBE_PASSWORD_FILE="$SECURE_DIR/admin.password" \
            timeout 20 "$PYTHON" -c "$PROBE_PY" "$BOOTSTRAP" >/dev/null 2>&1
    elif [[ -n $PYTHON ]]; then
        timeout 20 "$PYTHON" -c "$PROBE_PY" "$BOOTSTRAP" >/dev/null 2>&1
    else
        # no python at all: accept a TCP connection as the sign of life
        timeout 5 bash -c "exec 3<>/dev/tcp/$KAFKA_HOST/$KAFKA_PORT" >/dev/null 2>&1
    fi
}

# Exit 0 when something already holds 127.0.0.1:$1 (listening or bound).
port_in_use() {
    local port=$1
    find_python
    if [[ -n $PYTHON ]]; then
        local rc=0
        "$PYTHON" - "$KAFKA_HOST" "$port" <<'EOF' >/dev/null 2>&1 || rc=$?
import errno, socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the JVM does; ignores TIME_WAIT
try:
    s.bind((sys.argv[1], int(sys.argv[2])))
except OSError as e:
    sys.exit(3 if e.errno == errno.EADDRINUSE else 4)
s.close()
EOF
        ((rc == 3))
    else
        timeout 3 bash -c "exec 3<>/dev/tcp/$KAFKA_HOST/$port" >/dev/null 2>&1
    fi
}

port_holder() {
    command -v ss >/dev/null 2>&1 || return 0
    ss -Htlnp "sport = :$1" 2>/dev/null | grep -o 'users:(([^)]*))' | head -n1 || true
}

# --- pid file / process ownership ------------------------------------------

# Exit 0 when pid $1 is alive and is the kafka.Kafka JVM of this state dir.
is_our_broker() {
    local pid=$1 cmdline
    [[ $pid =~ ^[0-9]+$ ]] || return 1
    [[ -r /proc/$pid/cmdline ]] || return 1
    cmdline=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null) || return 1
    # zombies have an empty cmdline and count as dead
    [[ $cmdline == *" kafka.Kafka "* && $cmdline == *"$PROPS"* ]]
}

# Prints the pid of our running broker; exit 1 when there is none.
running_pid() {
    [[ -f $PID_FILE ]] || return 1
    local pid
    pid=$(tr -d '[:space:]' <"$PID_FILE")
    is_our_broker "$pid" || return 1
    printf '%s\n' "$pid"
}

# Port of the broker configured in $PROPS (the running one, if any).
configured_port() {
    [[ -f $PROPS ]] || return 1
    sed -n 's#^advertised\.listeners=[A-Z_]*://[^:]*:\([0-9]*\).*#\1#p' "$PROPS" | head -n1
}

lock_state_dir() {
    mkdir -p "$STATE_DIR"
    exec 9>"$STATE_DIR/.lock"
    if command -v flock >/dev/null 2>&1; then
        flock -w 180 9 || die "another $PROG holds $STATE_DIR/.lock for more than 180 s"
    fi
}

show_log_tail() {
    local f
    for f in "$SERVER_LOG" "$CONSOLE_LOG"; do
        if [[ -s $f ]]; then
            printf '%s: ---- last %s lines of %s ----\n' "$PROG" "$LOG_LINES" "$f" >&2
            tail -n "$LOG_LINES" "$f" >&2
        fi
    done
}

# --- fetch -------------------------------------------------------------------

write_pom() {
    local pom=$1 extra=${2:-}
    cat >"$pom" <<EOF
<?xml version="1.0" encoding="UTF-8"?>
<!-- Generated by deploy/kafka.sh: only used to resolve the broker's runtime jars. -->
<project>
  <modelVersion>4.0.0</modelVersion>
  <groupId>local.agui-gateway</groupId>
  <artifactId>kafka-broker-libs</artifactId>
  <version>$KAFKA_VERSION</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>org.apache.kafka</groupId>
      <artifactId>kafka_2.13</artifactId>
      <version>$KAFKA_VERSION</version>
    </dependency>$extra
  </dependencies>
</project>
EOF
}

dep_xml() {
    printf '\n    <dependency>\n      <groupId>%s</groupId>\n      <artifactId>%s</artifactId>\n      <version>%s</version>\n    </dependency>' "$1" "$2" "$3"
}

# version of the single jar matching libs/<artifact>-<version>.jar, if any
jar_version() {
    local dir=$1 artifact=$2 f
    for f in "$dir/$artifact"-[0-9]*.jar; do
        [[ -e $f ]] || continue
        f=${f##*/}
        f=${f#"$artifact"-}
        printf '%s\n' "${f%.jar}"
        return 0
    done
    return 1
}

run_maven() {
    local pom=$1 out=$2 log=$3
    mvn -B -Dstyle.color=never -f "$pom" dependency:copy-dependencies \
        -DincludeScope=runtime -DoutputDirectory="$out" >>"$log" 2>&1
}

jars_resolved() {
    [[ -f $STAMP && -f $LIBS_DIR/kafka_2.13-$KAFKA_VERSION.jar ]]
}

fetch() {
    if jars_resolved; then
        info "Kafka $KAFKA_VERSION jars already resolved in $LIBS_DIR"
        return 0
    fi
    command -v mvn >/dev/null 2>&1 ||
        die "Maven (mvn) not found: it is needed once to resolve the Kafka $KAFKA_VERSION jars into $LIBS_DIR (install maven)"
    find_java

    mkdir -p "$CACHE_DIR"
    exec 8>"$CACHE_DIR/.lock"
    command -v flock >/dev/null 2>&1 && { flock -w 600 8 || die "another fetch holds $CACHE_DIR/.lock"; }
    if jars_resolved; then
        info "Kafka $KAFKA_VERSION jars already resolved in $LIBS_DIR"
        return 0
    fi

    local work="$CACHE_DIR/.resolve" log="$CACHE_DIR/maven.log" start=$SECONDS
    rm -rf "$work" "$STAMP"
    mkdir -p "$work"
    : >"$log"
    info "resolving org.apache.kafka:kafka_2.13:$KAFKA_VERSION and its runtime dependencies with Maven ..."

    # pass 1: the broker and what its pom declares
    write_pom "$work/pom.xml"
    if ! run_maven "$work/pom.xml" "$work/libs" "$log"; then
        tail -n "$LOG_LINES" "$log" >&2
        die "Maven could not resolve org.apache.kafka:kafka_2.13:$KAFKA_VERSION (full log: $log)"
    fi

    # pass 2: add the SLF4J binding the broker's pom leaves to the distribution
    local slf4j log4j extra=""
    slf4j=$(jar_version "$work/libs" slf4j-api || true)
    if log4j=$(jar_version "$work/libs" log4j-core); then
        # Kafka >= 4.0 logs through log4j2
        if [[ $slf4j == 1.* ]]; then
            extra=$(dep_xml org.apache.logging.log4j log4j-slf4j-impl "$log4j")
        else
            extra=$(dep_xml org.apache.logging.log4j log4j-slf4j2-impl "$log4j")
        fi
    elif [[ -n $slf4j ]]; then
        # Kafka 3.x logs through reload4j (log4j 1.x API), as its distribution does
        extra=$(dep_xml org.slf4j slf4j-reload4j "$slf4j")
    fi
    if [[ -n $extra ]]; then
        write_pom "$work/pom.xml" "$extra"
        if ! run_maven "$work/pom.xml" "$work/libs" "$log"; then
            tail -n "$LOG_LINES" "$log" >&2
            die "Maven could not resolve the logging binding for Kafka $KAFKA_VERSION (full log: $log)"
        fi
    fi

    [[ -f $work/libs/kafka_2.13-$KAFKA_VERSION.jar ]] ||
        die "Maven finished but $work/libs/kafka_2.13-$KAFKA_VERSION.jar is missing (log: $log)"

    rm -rf "$LIBS_DIR"
    mv "$work/libs" "$LIBS_DIR"
    mv "$work/pom.xml" "$CACHE_DIR/pom.xml"
    rm -rf "$work"
    {
        echo "kafka_2.13=$KAFKA_VERSION"
        echo "jars=$(find "$LIBS_DIR" -name '*.jar' | wc -l)"
        echo "resolved_at=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
    } >"$STAMP"
    info "resolved $(find "$LIBS_DIR" -name '*.jar' | wc -l) jars into $LIBS_DIR in $((SECONDS - start)) s"
}

# --- secure mode (KAFKA_SECURITY=sasl_ssl) ---------------------------------------
# Everything secure mode adds lives here; the plaintext broker calls none of it
# except listener_props and check_security_mode.

SECURE_DIR="$STATE_DIR/secure"
SECURE_USERS=(admin agui-gateway agui-client)

listener_props() {
    if [[ $KAFKA_SECURITY == sasl_ssl ]]; then
        cat <<EOF
listeners=SASL_SSL://$KAFKA_HOST:$KAFKA_PORT,CONTROLLER://$KAFKA_HOST:$KAFKA_CONTROLLER_PORT
advertised.listeners=SASL_SSL://$KAFKA_HOST:$KAFKA_PORT
inter.broker.listener.name=SASL_SSL
controller.listener.names=CONTROLLER
listener.security.protocol.map=CONTROLLER:SASL_PLAINTEXT,SASL_SSL:SASL_SSL
EOF
    else
        cat <<EOF
listeners=PLAINTEXT://$KAFKA_HOST:$KAFKA_PORT,CONTROLLER://$KAFKA_HOST:$KAFKA_CONTROLLER_PORT
advertised.listeners=PLAINTEXT://$KAFKA_HOST:$KAFKA_PORT
inter.broker.listener.name=PLAINTEXT
controller.listener.names=CONTROLLER
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
EOF
    fi
}

# A state dir formatted in one mode is never started in the other: the SCRAM
# credentials exist only when they were added at format time.
check_security_mode() {
    local formatted
    [[ -f $DATA_DIR/meta.properties ]] || return 0
    formatted=$(cat "$STATE_DIR/security" 2>/dev/null || echo plaintext)
    [[ $formatted == "$KAFKA_SECURITY" ]] ||
        die "$STATE_DIR was formatted with KAFKA_SECURITY=$formatted, not $KAFKA_SECURITY; use another KAFKA_PORT or KAFKA_STATE_DIR (or delete $STATE_DIR)"
}

secret() { tr -d '[:space:]' <"$SECURE_DIR/$1.password"; }

# CA, broker certificate and passwords, made once per state dir.
secure_material() {
    command -v openssl >/dev/null 2>&1 || die "openssl not found: secure mode needs it to make its certificates (install openssl)"
    mkdir -p "$SECURE_DIR"
    chmod 700 "$SECURE_DIR"
    local user
    for user in "${SECURE_USERS[@]}" keystore; do
        if [[ ! -s $SECURE_DIR/$user.password ]]; then
            (umask 077 && openssl rand -hex 16 >"$SECURE_DIR/$user.password")
        fi
    done
    if [[ ! -s $SECURE_DIR/broker.p12 ]]; then
        info "making a CA and a broker certificate in $SECURE_DIR"
        local log="$SECURE_DIR/openssl.log"
        {
            openssl req -x509 -newkey rsa:2048 -nodes -days 365 -subj "/CN=agui-gateway dev CA" \
                -keyout "$SECURE_DIR/ca.key" -out "$SECURE_DIR/ca.crt" &&
                openssl req -newkey rsa:2048 -nodes -subj "/CN=$KAFKA_HOST" \
                    -keyout "$SECURE_DIR/broker.key" -out "$SECURE_DIR/broker.csr" &&
                printf 'subjectAltName=IP:%s\nextendedKeyUsage=serverAuth,clientAuth\n' "$KAFKA_HOST" \
                    >"$SECURE_DIR/broker.ext" &&
                openssl x509 -req -in "$SECURE_DIR/broker.csr" -CA "$SECURE_DIR/ca.crt" \
                    -CAkey "$SECURE_DIR/ca.key" -CAcreateserial -days 365 \
                    -extfile "$SECURE_DIR/broker.ext" -out "$SECURE_DIR/broker.crt" &&
                openssl pkcs12 -export -in "$SECURE_DIR/broker.crt" -inkey "$SECURE_DIR/broker.key" \
                    -certfile "$SECURE_DIR/ca.crt" -name broker -out "$SECURE_DIR/broker.p12" \
                    -passout "file:$SECURE_DIR/keystore.password"
        } >"$log" 2>&1 || {
            cat "$log" >&2
            rm -f "$SECURE_DIR/broker.p12"
            die "making the TLS certificates failed (log: $log)"
        }
        chmod 600 "$SECURE_DIR"/*.key "$SECURE_DIR/broker.p12"
    fi
    (
        umask 077
        cat >"$SECURE_DIR/admin.properties" <<EOF
# Generated by deploy/kafka.sh: the admin's client settings for Kafka's CLI tools
# (kafka-acls --command-config ...).
security.protocol=SASL_SSL
sasl.mechanism=SCRAM-SHA-512
sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="admin" password="$(secret admin)";
ssl.truststore.type=PEM
ssl.truststore.location=$SECURE_DIR/ca.crt
EOF
    )
}

secure_props() {
    local admin
    admin=$(secret admin)
    cat <<EOF

# secure mode: SASL_SSL (SCRAM-SHA-512) for clients and inter-broker traffic,
# SASL PLAIN (admin only) on the loopback controller listener, ACLs enforced.
sasl.enabled.mechanisms=SCRAM-SHA-512
sasl.mechanism.inter.broker.protocol=SCRAM-SHA-512
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="admin" password="$admin";
sasl.mechanism.controller.protocol=PLAIN
listener.name.controller.sasl.enabled.mechanisms=PLAIN
listener.name.controller.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" password="$admin" user_admin="$admin";
ssl.keystore.type=PKCS12
ssl.keystore.location=$SECURE_DIR/broker.p12
ssl.keystore.password=$(secret keystore)
ssl.truststore.type=PEM
ssl.truststore.location=$SECURE_DIR/ca.crt
ssl.client.auth=none
ssl.endpoint.identification.algorithm=https
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
allow.everyone.if.no.acl.found=false
super.users=User:admin
EOF
}

# kafka-storage format arguments that store every principal's SCRAM credential.
scram_format_args() {
    local user
    for user in "${SECURE_USERS[@]}"; do
        printf '%s\n' --add-scram "SCRAM-SHA-512=[name=$user,password=$(secret "$user")]"
    done
}

# --- start -------------------------------------------------------------------

# A KRaft cluster id is a Kafka Uuid: 16 bytes as 22 characters of URL-safe
# base64 without padding. It may start with '-' (older versions of this script
# saved such ids), which is why format_storage passes it as --cluster-id=ID.
valid_cluster_id() {
    [[ $1 =~ ^[A-Za-z0-9_-]{22}$ ]]
}

# A fresh id from Kafka's own generator (never all zeros, never starting with '-').
new_cluster_id() {
    local id
    id=$("$JAVA" -Xmx128m -cp "$LIBS_DIR/*" kafka.tools.StorageTool random-uuid 2>"$LOG_DIR/random-uuid.out" | tail -n1 | tr -d '[:space:]') ||
        true
    valid_cluster_id "$id" ||
        die "kafka-storage random-uuid gave no usable cluster id ('$id'); output: $LOG_DIR/random-uuid.out"
    printf '%s\n' "$id"
}

# The cluster id to format with: --cluster-id=ID given to start, else the one
# saved in $STATE_DIR/cluster.id, else a new one (saved). A saved id that cannot
# be a cluster id is replaced, and said so.
cluster_id() {
    local f="$STATE_DIR/cluster.id" id=""
    if [[ -n $CLUSTER_ID_ARG ]]; then
        valid_cluster_id "$CLUSTER_ID_ARG" ||
            die "--cluster-id=$CLUSTER_ID_ARG is not a Kafka cluster id (22 characters of A-Z a-z 0-9 _ -, e.g. from 'kafka-storage random-uuid')"
        id=$CLUSTER_ID_ARG
    elif [[ -s $f ]]; then
        id=$(tr -d '[:space:]' <"$f")
        if ! valid_cluster_id "$id"; then
            info "the saved cluster id '$id' in $f is not a Kafka cluster id; the storage was never formatted with it, so it is replaced by a new one"
            id=""
        fi
    fi
    if [[ -z $id ]]; then
        id=$(new_cluster_id)
    fi
    printf '%s\n' "$id" >"$f"
    printf '%s\n' "$id"
}

write_configs() {
    mkdir -p "$DATA_DIR" "$LOG_DIR"
    cat >"$PROPS" <<EOF
# Generated by deploy/kafka.sh on every start; edit the script, not this file.
# Single-node KRaft development broker: broker and controller in one process.
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@$KAFKA_HOST:$KAFKA_CONTROLLER_PORT
$(listener_props)
log.dirs=$DATA_DIR

# development settings: one replica, topics only created explicitly
auto.create.topics.enable=false
num.partitions=1
default.replication.factor=1
min.insync.replicas=1
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0

# sized for a small (2-core) machine
num.network.threads=2
num.io.threads=4
EOF
    [[ $KAFKA_SECURITY == sasl_ssl ]] && secure_props >>"$PROPS"

    # Kafka >= 4.0 (log4j2)
    cat >"$STATE_DIR/log4j2.xml" <<EOF
<?xml version="1.0" encoding="UTF-8"?>
<!-- Generated by deploy/kafka.sh -->
<Configuration status="warn">
  <Appenders>
    <RollingFile name="server" fileName="$SERVER_LOG" filePattern="$LOG_DIR/server.log.%i">
      <PatternLayout pattern="[%d] %p %m (%c)%n"/>
      <Policies><SizeBasedTriggeringPolicy size="20 MB"/></Policies>
      <DefaultRolloverStrategy max="3"/>
    </RollingFile>
  </Appenders>
  <Loggers>
    <Logger name="kafka.request.logger" level="warn"/>
    <Logger name="org.apache.kafka.controller" level="info"/>
    <Logger name="kafka.log.LogCleaner" level="info"/>
    <Root level="info"><AppenderRef ref="server"/></Root>
  </Loggers>
</Configuration>
EOF

    # Kafka 3.x (reload4j)
    cat >"$STATE_DIR/log4j.properties" <<EOF
# Generated by deploy/kafka.sh
log4j.rootLogger=INFO, server
log4j.appender.server=org.apache.log4j.RollingFileAppender
log4j.appender.server.File=$SERVER_LOG
log4j.appender.server.MaxFileSize=20MB
log4j.appender.server.MaxBackupIndex=3
log4j.appender.server.layout=org.apache.log4j.PatternLayout
log4j.appender.server.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.kafka.request.logger=WARN
EOF
}

jvm_log_opts() {
    printf '%s\n' \
        "-Dkafka.logs.dir=$LOG_DIR" \
        "-Dlog4j2.configurationFile=$STATE_DIR/log4j2.xml" \
        "-Dlog4j.configuration=file:$STATE_DIR/log4j.properties"
}

format_storage() {
    if [[ -f $DATA_DIR/meta.properties ]]; then
        local formatted
        formatted=$(sed -n 's/^cluster\.id=//p' "$DATA_DIR/meta.properties")
        if [[ -n $CLUSTER_ID_ARG && $CLUSTER_ID_ARG != "$formatted" ]]; then
            die "$DATA_DIR is already formatted with cluster id $formatted, not $CLUSTER_ID_ARG; remove $STATE_DIR to start a new cluster"
        fi
        return 0
    fi
    local -a FORMAT_EXTRA=()
    [[ $KAFKA_SECURITY == sasl_ssl ]] && mapfile -t FORMAT_EXTRA < <(scram_format_args)
    printf '%s\n' "$KAFKA_SECURITY" >"$STATE_DIR/security"
    local cid
    cid=$(cluster_id)
    info "formatting KRaft storage in $DATA_DIR (cluster id $cid)"
    # no log config: StorageTool's own messages go to format.out, not server.log.
    # --cluster-id=ID, never "-t ID": an id may start with '-'.
    if ! "$JAVA" -Xmx256m -cp "$LIBS_DIR/*" kafka.tools.StorageTool \
        format "--cluster-id=$cid" -c "$PROPS" --ignore-formatted "${FORMAT_EXTRA[@]}" >"$LOG_DIR/format.out" 2>&1; then
        cat "$LOG_DIR/format.out" >&2
        die "formatting KRaft storage with cluster id $cid (saved in $STATE_DIR/cluster.id) failed (output: $LOG_DIR/format.out)"
    fi
}

# format: write the configuration and format KRaft storage, without starting.
format_only() {
    check_port_number KAFKA_PORT "$KAFKA_PORT"
    check_port_number KAFKA_CONTROLLER_PORT "$KAFKA_CONTROLLER_PORT"
    lock_state_dir
    running_pid >/dev/null && die "the broker from $STATE_DIR is running; stop it first"
    find_java
    jars_resolved || fetch
    write_configs
    format_storage
    sed -n 's/^cluster\.id=//p' "$DATA_DIR/meta.properties"
}

stop_pid() {
    local pid=$1 waited=0
    kill -TERM "$pid" 2>/dev/null || return 0
    while is_our_broker "$pid" && ((waited < STOP_TIMEOUT * 10)); do
        sleep 0.1
        waited=$((waited + 1))
    done
    if is_our_broker "$pid"; then
        info "broker pid $pid still running after ${STOP_TIMEOUT} s, sending SIGKILL"
        kill -KILL "$pid" 2>/dev/null || true
        waited=0
        while is_our_broker "$pid" && ((waited < 100)); do
            sleep 0.1
            waited=$((waited + 1))
        done
    fi
}

wait_until_ready() {
    local pid=$1 deadline=$((SECONDS + START_TIMEOUT))
    while ((SECONDS < deadline)); do
        if ! is_our_broker "$pid"; then
            rm -f "$PID_FILE"
            show_log_tail
            die "the broker (pid $pid) died during startup; log: $SERVER_LOG (JVM output: $CONSOLE_LOG)"
        fi
        if broker_answers; then
            return 0
        fi
        sleep 0.5
    done
    show_log_tail
    info "stopping the broker that did not come up (pid $pid)"
    stop_pid "$pid"
    rm -f "$PID_FILE"
    die "the broker did not answer on $BOOTSTRAP within ${START_TIMEOUT} s (KAFKA_START_TIMEOUT); log: $SERVER_LOG"
}

start() {
    check_port_number KAFKA_PORT "$KAFKA_PORT"
    check_port_number KAFKA_CONTROLLER_PORT "$KAFKA_CONTROLLER_PORT"
    [[ $KAFKA_PORT != "$KAFKA_CONTROLLER_PORT" ]] || die "KAFKA_PORT and KAFKA_CONTROLLER_PORT must differ (both $KAFKA_PORT)"
    lock_state_dir

    local pid
    if pid=$(running_pid); then
        local port
        port=$(configured_port || true)
        [[ $port == "$KAFKA_PORT" ]] ||
            die "the broker from $STATE_DIR (pid $pid) is running on port ${port:-?}, not $KAFKA_PORT; run '$PROG stop' with the same KAFKA_STATE_DIR first"
        if broker_answers; then
            info "reusing the running broker (pid $pid) at $BOOTSTRAP"
        else
            info "broker pid $pid is running but not answering yet; waiting up to ${START_TIMEOUT} s"
            wait_until_ready "$pid"
            info "broker pid $pid is up at $BOOTSTRAP"
        fi
        printf '%s\n' "$BOOTSTRAP"
        return 0
    fi
    rm -f "$PID_FILE"

    find_java
    local p holder
    for p in "$KAFKA_PORT" "$KAFKA_CONTROLLER_PORT"; do
        if port_in_use "$p"; then
            holder=$(port_holder "$p")
            die "port $p on $KAFKA_HOST is already in use by another process${holder:+ ($holder)}, not by a broker started from $STATE_DIR; stop it or choose another KAFKA_PORT/KAFKA_CONTROLLER_PORT"
        fi
    done

    jars_resolved || fetch
    check_security_mode
    [[ $KAFKA_SECURITY == sasl_ssl ]] && secure_material
    write_configs
    format_storage

    local -a log_opts heap
    mapfile -t log_opts < <(jvm_log_opts)
    read -r -a heap <<<"$HEAP_OPTS"
    local t0=$SECONDS
    # this run's logs start empty, so failures show this run's lines only
    [[ -s $SERVER_LOG ]] && mv -f "$SERVER_LOG" "$SERVER_LOG.previous"
    : >"$CONSOLE_LOG"
    rm -f "$PID_FILE"
    # setsid: the broker gets its own session, so a Ctrl-C in the shell (or the
    # end of a test run) that started it does not kill it; `stop` does.
    # The child writes its own pid (exec keeps it) and closes the lock fd.
    local launcher=()
    command -v setsid >/dev/null 2>&1 && launcher=(setsid)
    # shellcheck disable=SC2016  # $$ and $@ belong to the inner bash
    "${launcher[@]}" bash -c 'echo $$ >"$1"; shift; exec "$@"' kafka-launch "$PID_FILE" \
        "$JAVA" "${heap[@]}" \
        -server -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:InitiatingHeapOccupancyPercent=35 \
        -XX:+ExplicitGCInvokesConcurrent -XX:+ExitOnOutOfMemoryError -Djava.awt.headless=true \
        "${log_opts[@]}" -cp "$LIBS_DIR/*" kafka.Kafka "$PROPS" \
        </dev/null >>"$CONSOLE_LOG" 2>&1 9>&- 8>&- &
    local waited=0
    while [[ ! -s $PID_FILE ]] && ((waited < 100)); do
        sleep 0.05
        waited=$((waited + 1))
    done
    pid=$(tr -d '[:space:]' <"$PID_FILE" 2>/dev/null || true)
    [[ -n $pid ]] || die "could not launch the broker (no pid written); JVM output: $CONSOLE_LOG"
    info "started Kafka $KAFKA_VERSION broker (pid $pid), waiting up to ${START_TIMEOUT} s for $BOOTSTRAP ..."
    wait_until_ready "$pid"
    info "broker pid $pid is up at $BOOTSTRAP after $((SECONDS - t0)) s (state: $STATE_DIR)"
    printf '%s\n' "$BOOTSTRAP"
}

stop() {
    lock_state_dir
    if [[ ! -f $PID_FILE ]]; then
        info "not running (no pid file in $STATE_DIR)"
        return 0
    fi
    local pid
    pid=$(tr -d '[:space:]' <"$PID_FILE")
    if ! is_our_broker "$pid"; then
        rm -f "$PID_FILE"
        info "not running (removed stale pid file for pid ${pid:-?})"
        return 0
    fi
    info "stopping broker pid $pid (SIGTERM, SIGKILL after ${STOP_TIMEOUT} s) ..."
    stop_pid "$pid"
    if is_our_broker "$pid"; then
        die "broker pid $pid survived SIGKILL"
    fi
    rm -f "$PID_FILE"
    info "stopped"
}

status() {
    local pid
    if pid=$(running_pid); then
        local port note=""
        port=$(configured_port || echo "$KAFKA_PORT")
        KAFKA_PORT=$port BOOTSTRAP="$KAFKA_HOST:$port"
        broker_answers || note=" (process alive but not answering yet)"
        echo "running: pid $pid, bootstrap $BOOTSTRAP, state $STATE_DIR$note"
        return 0
    fi
    echo "not running (state $STATE_DIR)"
    return 3
}

logs() {
    [[ -f $SERVER_LOG ]] || die "no broker log yet at $SERVER_LOG"
    if [[ ${1:-} == -f ]]; then
        exec tail -n "$LOG_LINES" -F "$SERVER_LOG"
    fi
    echo "==> $SERVER_LOG <==" >&2
    tail -n "$LOG_LINES" "$SERVER_LOG"
}

usage() {
    sed -n '/^# Usage:/,/^# Environment:/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//' >&2
}

cmd=${1:-}
[[ $# -gt 0 ]] && shift
CLUSTER_ID_ARG=""
if [[ $cmd == start || $cmd == format || $cmd == restart ]]; then
    for arg in "$@"; do
        case $arg in
        --cluster-id=*) CLUSTER_ID_ARG=${arg#--cluster-id=} ;;
        *)
            usage
            exit 2
            ;;
        esac
    done
fi
case $cmd in
fetch) fetch ;;
format) format_only ;;
start) start ;;
stop) stop ;;
restart) (stop) && start ;;
status) status ;;
logs) logs "$@" ;;
-h | --help | help) usage ;;
*)
    usage
    exit 2
    ;;
esac
