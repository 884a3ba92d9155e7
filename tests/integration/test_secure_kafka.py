"""The gateway on a locked-down Kafka: SASL_SSL (SCRAM-SHA-512), TLS and least-privilege ACLs.

The broker is `KAFKA_SECURITY=sasl_ssl deploy/kafka.sh start` (the `secure_kafka`
fixture): ACLs enforced, nothing allowed that no ACL grants. The gateway runs as
`agui-gateway` with exactly the ACLs `agui-gateway acls` gives it, configured by
deploy/secure/gateway.toml (the configuration docs/guides/secure-kafka.md shows) plus its password, and
the test's own clients as the `admin` super user.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.helpers import create_ssl_context

from gateway.kafka.wire import clients, closing
from gateway.kafka.wire.acls import Acl, apply
from gateway.settings import Settings
from tests.integration.support import (
    GATEWAY_BIN,
    REPO_ROOT,
    GatewayProcess,
    Namespace,
    collect,
    header,
    produce,
    values,
)

CONFIG = REPO_ROOT / "deploy" / "secure" / "gateway.toml"
AGENT = "support"
GATEWAY_USER = "agui-gateway"


class SecureNamespace(Namespace):
    """A test namespace whose commands connect over SASL_SSL as `user`, from CONFIG."""

    def __init__(self, bootstrap: str, secure_dir: Path, user: str = GATEWAY_USER) -> None:
        super().__init__(bootstrap)
        self.secure_dir = secure_dir
        self.user = user

    def as_user(self, user: str) -> SecureNamespace:
        other = SecureNamespace(self.bootstrap, self.secure_dir, user)
        other.prefix, other.group = self.prefix, self.group
        return other

    def password(self, user: str | None = None) -> str:
        return (self.secure_dir / f"{user or self.user}.password").read_text().strip()

    def env(self, **overrides: Any) -> dict[str, str]:
        # The documented file verbatim; only the port-dependent values and the secret differ.
        settings: dict[str, Any] = {
            "ssl_cafile": self.secure_dir / "ca.crt",
            "sasl_plain_username": self.user,
            "sasl_plain_password": self.password(),
        }
        settings.update(overrides)
        env = super().env(**settings)
        env["AGUI_GATEWAY_CONFIG_FILE"] = str(CONFIG)
        return env

    def security(self) -> dict[str, Any]:
        """aiokafka arguments for the test's own clients: the admin."""
        return {
            "security_protocol": "SASL_SSL",
            "sasl_mechanism": "SCRAM-SHA-512",
            "sasl_plain_username": "admin",
            "sasl_plain_password": self.password("admin"),
            "ssl_context": create_ssl_context(cafile=str(self.secure_dir / "ca.crt")),
        }

    def replies(self) -> str:
        return f"{self.prefix}.replies.a"


def started(thread: str, run: str) -> dict:
    return {"type": "RUN_STARTED", "threadId": thread, "runId": run}


def interrupted(thread: str, run: str, interrupt_id: str) -> dict:
    return {
        "type": "RUN_FINISHED",
        "threadId": thread,
        "runId": run,
        "outcome": {"type": "interrupt", "interrupts": [{"id": interrupt_id, "reason": "choice"}]},
    }


def resume(thread: str, run: str, *entries: dict) -> dict:
    return {"threadId": thread, "runId": run, "messages": [], "resume": list(entries)}


def run_cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(GATEWAY_BIN), *args],
        env=env,
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )


async def setup_agent(ns: SecureNamespace, *acls_args: str, **settings: Any) -> None:
    """As the admin: the agent's topics (`topics create`), a reply topic, the gateway's ACLs
    (`acls` with `acls_args`, printed for a gateway with `settings`)."""
    admin_ns = ns.as_user("admin")
    report = await admin_ns.create_agent(AGENT, partitions=1)
    assert "created" in report, report
    admin = AIOKafkaAdminClient(bootstrap_servers=ns.bootstrap, **ns.security())
    await admin.start()
    try:
        await admin.create_topics([NewTopic(ns.replies(), 1, 1)])
    finally:
        await admin.close()
    result = await asyncio.to_thread(
        run_cli,
        admin_ns.env(**settings),
        "acls",
        "--agent-pattern",
        AGENT,
        "--principal",
        f"User:{GATEWAY_USER}",
        "--reply-topic-prefix",
        f"{ns.prefix}.replies.",
        *acls_args,
        "--apply",
    )
    assert result.returncode == 0, result.stderr


async def change_acl(ns: SecureNamespace, acl: Acl, *, delete: bool) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=ns.bootstrap, **ns.security())
    await admin.start()
    try:
        await apply(admin, [acl], delete=delete)
    finally:
        await admin.close()


def reply_headers(ns: SecureNamespace, correlation: str) -> list[tuple[str, bytes]]:
    return [
        ("agui-reply-to", ns.replies().encode()),
        ("agui-correlation-id", correlation.encode()),
    ]


def assert_no_secret(ns: SecureNamespace, *texts: str | bytes) -> None:
    for user in ("agui-gateway", "admin"):
        secret = ns.password(user)
        for text in texts:
            body = text.decode(errors="replace") if isinstance(text, bytes) else text
            assert secret not in body, f"{user}'s password leaked"


@pytest.fixture
def ns(secure_kafka: tuple[str, Path]) -> SecureNamespace:
    return SecureNamespace(*secure_kafka)


async def judged_once_each(ns: SecureNamespace, sec: dict[str, Any], thread: str) -> None:
    """An interrupted run on `thread`, an answer leaving its interrupt uncovered (rejected)
    and the covering one (forwarded), each with its verdict on the reply topic."""
    await produce(
        ns.bootstrap,
        ns.events(AGENT),
        [(thread, started(thread, "run-1")), (thread, interrupted(thread, "run-1", "pick"))],
        **sec,
    )
    # uncovered: no entry for "pick" (a rejection), then the covering answer (a forward)
    await produce(
        ns.bootstrap,
        ns.requests(AGENT),
        [(thread, resume(thread, "run-2"))],
        headers=reply_headers(ns, "c-bad"),
        **sec,
    )
    good = resume(thread, "run-2", {"interruptId": "pick", "status": "resolved", "payload": 1})
    await produce(
        ns.bootstrap,
        ns.requests(AGENT),
        [(thread, good)],
        headers=reply_headers(ns, "c-good"),
        **sec,
    )
    forwarded = await collect(ns.bootstrap, ns.run_requests(AGENT), count=1, **sec)
    assert values(forwarded) == [good]
    rejected = values(await collect(ns.bootstrap, ns.rejections, count=1, **sec))
    assert [r["code"] for r in rejected[0]["reasons"]] == ["uncovered_interrupt"]
    replies = await collect(ns.bootstrap, ns.replies(), count=2, **sec)
    verdicts = {
        header(r, "agui-correlation-id"): v["verdict"]
        for r, v in zip(replies, values(replies), strict=True)
    }
    assert verdicts == {"c-bad": "reject", "c-good": "forward"}


async def test_gateway_with_exactly_its_acls_forwards_rejects_replies_and_restores(
    ns: SecureNamespace, tmp_path: Path
) -> None:
    await setup_agent(ns)
    sec = ns.security()
    first = await GatewayProcess(ns, tmp_path, name="first").start()
    thread = "t-1"
    try:
        await judged_once_each(ns, sec, thread)
        _, ready_body = first.http("/readyz")
    finally:
        assert await first.stop() == 0
    second = await GatewayProcess(ns, tmp_path, name="second").start()
    try:
        # Another answer to the same interrupt: only a restored changelog knows it was answered.
        await produce(
            ns.bootstrap,
            ns.requests(AGENT),
            [(thread, resume(thread, "run-3", {"interruptId": "pick", "status": "cancelled"}))],
            headers=reply_headers(ns, "c-again"),
            **sec,
        )
        rejected = values(await collect(ns.bootstrap, ns.rejections, count=2, **sec))
        assert [r["code"] for r in rejected[1]["reasons"]] == ["already_resumed"]
        readies = [
            json.loads(line)
            for line in second.log_path.read_text().splitlines()
            if '"pair ready"' in line
        ]
        assert readies and readies[0]["restored"] is True and readies[0]["threads"] == 1
        forwarded = await collect(ns.bootstrap, ns.run_requests(AGENT), count=1, settle=1.0, **sec)
        assert len(forwarded) == 1
    finally:
        assert await second.stop() == 0
    for gateway in (first, second):  # its ACLs let it ask (Write implies Describe)
        assert "last transaction ended" not in gateway.log_path.read_text()
    assert_no_secret(ns, first.log_path.read_bytes(), second.log_path.read_bytes(), ready_body)


@pytest.mark.parametrize(
    ("settings", "acls_args"),
    [
        ({"instance_name": "gw-a"}, ()),
        ({"instance_name": "gw-b", "instance_producers": 2}, ()),
        ({"instance_name": "gw-c"}, ("--instance-name", "gw-*")),
    ],
    ids=["instance", "two-producers", "name-prefix"],
)
async def test_an_instance_scoped_gateway_with_exactly_its_acls_decides(
    ns: SecureNamespace, tmp_path: Path, settings: dict[str, Any], acls_args: tuple[str, ...]
) -> None:
    """producer_scope=instance: the transactional ids are the instance's, and `acls` grants
    exactly those (not the pairs' `<group>.<agent>.` prefix)."""
    scope = {"producer_scope": "instance", **settings}
    await setup_agent(ns, *acls_args, **scope)
    sec = ns.security()
    gateway = await GatewayProcess(ns, tmp_path, **scope).start()
    try:
        await judged_once_each(ns, sec, "t-1")
        assert json.loads(gateway.http("/readyz")[1])["denied"] == {}
    finally:
        assert await gateway.stop() == 0, gateway.log_tail()
    assert "permission denied" not in gateway.log_path.read_text()


async def test_a_bridge_with_exactly_the_acls_printed_for_it_relays_a_run(
    ns: SecureNamespace, tmp_path: Path
) -> None:
    """`acls --role bridge`: the bridge, as a principal with exactly those ACLs, creates
    its run markers' topic, consumes run-requests in its group and writes the agent's
    events in its transactions."""
    from tests.bridge.agents import Served, scripted_agent
    from tests.bridge.support import BridgeProcess, bridge_settings

    admin_ns = ns.as_user("admin")
    await admin_ns.create_agent(AGENT, partitions=1)
    sec = ns.security()
    app, _ = scripted_agent()
    async with Served(app) as agent:
        settings = bridge_settings(ns, {AGENT: {"url": agent.url}})
        result = await asyncio.to_thread(
            run_cli,
            admin_ns.env(**settings),
            "acls",
            "--role",
            "bridge",
            "--agent-pattern",
            AGENT,
            "--principal",
            "User:agui-client",
            "--apply",
        )
        assert result.returncode == 0, result.stderr
        bridge = BridgeProcess(ns.as_user("agui-client"), tmp_path, "bridge", **settings)
        await bridge.start()
        try:
            request = {"threadId": "t-1", "runId": "run-1", "messages": []}
            await produce(ns.bootstrap, ns.run_requests(AGENT), [("t-1", request)], **sec)
            events = await collect(ns.bootstrap, ns.events(AGENT), count=5, timeout=60, **sec)
            assert [e["type"] for e in values(events)] == [
                "RUN_STARTED",
                "TEXT_MESSAGE_START",
                "TEXT_MESSAGE_CONTENT",
                "TEXT_MESSAGE_END",
                "RUN_FINISHED",
            ]
        finally:
            assert await bridge.stop() == 0, bridge.log_tail()
    assert "denied" not in bridge.log_path.read_text().lower()
    assert_no_secret(ns, bridge.log_path.read_bytes())


async def test_missing_write_on_run_requests_is_reported_and_the_request_decided_once_granted(
    ns: SecureNamespace, tmp_path: Path
) -> None:
    await setup_agent(ns)
    sec = ns.security()
    write_run_requests = Acl(
        "topic", ns.run_requests(AGENT), "literal", "Write", f"User:{GATEWAY_USER}"
    )
    await change_acl(ns, write_run_requests, delete=True)
    gateway = await GatewayProcess(ns, tmp_path).start()
    thread = "t-1"
    try:
        await produce(
            ns.bootstrap,
            ns.events(AGENT),
            [(thread, started(thread, "run-1")), (thread, interrupted(thread, "run-1", "pick"))],
            **sec,
        )
        good = resume(thread, "run-2", {"interruptId": "pick", "status": "resolved", "payload": 1})
        await produce(
            ns.bootstrap,
            ns.requests(AGENT),
            [(thread, good)],
            headers=reply_headers(ns, "c-1"),
            **sec,
        )
        expected = f"Write on topic {ns.run_requests(AGENT)}"
        deadline = time.monotonic() + 60
        status, body = gateway.http("/readyz")
        while json.loads(body).get("denied", {}).get(f"{AGENT}/0") != expected:
            assert time.monotonic() < deadline, (status, body, gateway.log_tail())
            await asyncio.sleep(0.3)
            status, body = gateway.http("/readyz")
        assert status == 503
        metric = (
            f'agui_gateway_permission_denied{{agent="{AGENT}",operation="Write",'
            f'resource="topic {ns.run_requests(AGENT)}"}} 1.0'
        )
        assert metric in gateway.metrics()
        assert f"permission denied: {expected}" in gateway.log_path.read_text()
        # Not decided half-way: no forward, no rejection, no reply while the ACL is missing.
        for topic in (ns.run_requests(AGENT), ns.rejections, ns.replies()):
            assert await collect(ns.bootstrap, topic, timeout=2, **sec) == []

        await change_acl(ns, write_run_requests, delete=False)
        forwarded = await collect(
            ns.bootstrap, ns.run_requests(AGENT), count=1, timeout=90, settle=3.0, **sec
        )
        assert values(forwarded) == [good]
        replies = await collect(ns.bootstrap, ns.replies(), count=1, settle=1.0, **sec)
        assert [v["verdict"] for v in values(replies)] == ["forward"]
        assert await collect(ns.bootstrap, ns.rejections, timeout=2, **sec) == []
        await gateway.wait_ready(30)
        status, ready_body = gateway.http("/readyz")
        assert json.loads(ready_body)["denied"] == {}
        assert "agui_gateway_permission_denied{" not in gateway.metrics()
    finally:
        assert await gateway.stop() == 0
    assert_no_secret(ns, gateway.log_path.read_bytes(), body, ready_body)


@pytest.mark.parametrize(
    ("side", "operation"),
    [("changelog", "DescribeConfigs"), ("requests", "Read"), ("group", "Read")],
)
async def test_a_missing_acl_found_while_preparing_is_reported_until_granted(
    ns: SecureNamespace, tmp_path: Path, side: str, operation: str
) -> None:
    await setup_agent(ns)
    if side == "group":  # the gateway's consumer is refused: no pair is even assigned
        acl = Acl("group", ns.group, "literal", operation, f"User:{GATEWAY_USER}")
        expected, key = f"{operation} on group {ns.group}", "consumer"
    else:
        topic = ns.changelog(AGENT) if side == "changelog" else ns.requests(AGENT)
        acl = Acl("topic", topic, "literal", operation, f"User:{GATEWAY_USER}")
        expected, key = f"{operation} on topic {topic}", f"{AGENT}/0"
    await change_acl(ns, acl, delete=True)
    gateway = await GatewayProcess(ns, tmp_path).start(wait=False)
    try:
        deadline = time.monotonic() + 60
        status, body = 0, b"{}"
        while json.loads(body).get("denied", {}).get(key) != expected:
            assert time.monotonic() < deadline, (status, body, gateway.log_tail())
            await asyncio.sleep(0.3)
            with contextlib.suppress(OSError):
                status, body = gateway.http("/readyz")
        assert status == 503
        await change_acl(ns, acl, delete=False)
        await gateway.wait_ready(90)
        assert json.loads(gateway.http("/readyz")[1])["denied"] == {}
        # and it serves the agent: a covering answer is forwarded
        sec = ns.security()
        thread = "t-1"
        await produce(
            ns.bootstrap,
            ns.events(AGENT),
            [(thread, started(thread, "run-1")), (thread, interrupted(thread, "run-1", "pick"))],
            **sec,
        )
        good = resume(thread, "run-2", {"interruptId": "pick", "status": "cancelled"})
        await produce(ns.bootstrap, ns.requests(AGENT), [(thread, good)], **sec)
        forwarded = await collect(ns.bootstrap, ns.run_requests(AGENT), count=1, timeout=60, **sec)
        assert values(forwarded) == [good]
    finally:
        assert await gateway.stop() == 0
    assert_no_secret(ns, gateway.log_path.read_bytes(), body)


async def test_topics_create_by_a_principal_without_create_says_so_and_exits_2(
    ns: SecureNamespace,
) -> None:
    """`agui-gateway` has no Create ACL: the command names the refusal and the topics,
    not a layout it cannot fix; granted Create, the same command creates them."""
    principal = f"User:{GATEWAY_USER}"
    agent_topics = [ns.events(AGENT), ns.requests(AGENT), ns.run_requests(AGENT)]
    wanted = sorted(
        [*agent_topics, ns.changelog(AGENT), ns.rejections, ns.warnings, ns.audit, ns.interrupts]
    )
    result = await asyncio.to_thread(run_cli, ns.env(), "topics", "create", "--agent", AGENT)
    assert result.returncode == 2, result
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert (
        f"Kafka refuses the principal {principal} the creation of {len(wanted)} topics" in lines[0]
    )
    assert "(TOPIC_AUTHORIZATION_FAILED)" in lines[0]
    assert all(topic in lines[0] for topic in wanted)
    assert "cannot fix" not in result.stderr and "mismatch" not in result.stdout
    assert sorted(line.split()[1] for line in result.stdout.splitlines()) == wanted
    assert {line.split()[0] for line in result.stdout.splitlines()} == {"refused"}
    assert_no_secret(ns, result.stdout, result.stderr)

    await change_acl(ns, Acl("topic", ns.prefix, "prefixed", "Create", principal), delete=False)
    result = await asyncio.to_thread(run_cli, ns.env(), "topics", "create", "--agent", AGENT)
    assert result.returncode == 0, result
    # created; without Describe, Kafka hides them from it, and it says so
    assert {line.split()[0] for line in result.stdout.splitlines()} == {"created"}
    assert all("(no Describe ACL)" in line for line in result.stdout.splitlines())

    # Describe granted, the existing changelog's policy is checked: DescribeConfigs refused
    await change_acl(ns, Acl("topic", ns.prefix, "prefixed", "Describe", principal), delete=False)
    result = await asyncio.to_thread(run_cli, ns.env(), "topics", "create", "--agent", AGENT)
    assert result.returncode == 2, result
    assert result.stderr.strip() == (
        f"agui-gateway topics: Kafka refuses the principal {principal} DescribeConfigs on "
        f"topic {ns.changelog(AGENT)} (TOPIC_AUTHORIZATION_FAILED): grant it, or run this "
        "command as a principal that may"
    )


def other_ca(tmp_path: Path) -> Path:
    """A CA that signed nothing the broker presents."""
    key, cert = tmp_path / "other.key", tmp_path / "other.crt"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"]
        + ["-subj", "/CN=someone else", "-keyout", str(key), "-out", str(cert)],
        check=True,
        capture_output=True,
    )
    return cert


@pytest.mark.parametrize(
    ("case", "cause"),
    [
        ("wrong_password", "refused user 'agui-gateway' with SCRAM-SHA-512 (wrong user name"),
        ("untrusted_certificate", "is not trusted"),
        ("hostname_mismatch", "does not match the host name"),
    ],
)
@pytest.mark.parametrize("command", [["run"], ["topics", "create", "--agent", AGENT]])
def test_refused_security_is_exit_2_with_one_line_naming_the_cause(
    ns: SecureNamespace, tmp_path: Path, case: str, cause: str, command: list[str]
) -> None:
    overrides: dict[str, Any] = {"http_port": 0}
    if case == "wrong_password":
        overrides["sasl_plain_password"] = "not-" + ns.password()
    elif case == "untrusted_certificate":
        overrides["ssl_cafile"] = other_ca(tmp_path)
    else:  # the broker's certificate names 127.0.0.1 only
        overrides["bootstrap_servers"] = ns.bootstrap.replace("127.0.0.1", "localhost")
    env = ns.env(**overrides)
    result = run_cli(env, *command)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert cause in lines[0]
    assert result.stdout == ""
    assert_no_secret(ns, result.stderr)
    assert env["AGUI_GATEWAY_SASL_PLAIN_PASSWORD"] not in result.stderr


def test_the_docs_show_the_secure_configuration_the_tests_use() -> None:
    guide = (REPO_ROOT / "docs" / "guides" / "secure-kafka.md").read_text()
    assert CONFIG.read_text() in guide
    assert os.path.relpath(CONFIG, REPO_ROOT) in guide


class Traffic:
    """Requests for new threads, one every `every` seconds, until stopped: each is
    forwarded once decided."""

    def __init__(self, ns: SecureNamespace, every: float = 0.1) -> None:
        self.ns = ns
        self.every = every
        self.sent: list[dict] = []

    async def __aenter__(self) -> Traffic:
        self.producer = AIOKafkaProducer(
            bootstrap_servers=self.ns.bootstrap, acks="all", **self.ns.security()
        )
        await self.producer.start()
        self.stopping = asyncio.Event()
        self.task = asyncio.create_task(self._send())
        return self

    async def _send(self) -> None:
        while not self.stopping.is_set():
            n = len(self.sent)
            request = {"threadId": f"t-{n}", "runId": f"run-{n}", "messages": []}
            await self.producer.send_and_wait(
                self.ns.requests(AGENT), json.dumps(request).encode(), key=f"t-{n}".encode()
            )
            self.sent.append(request)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stopping.wait(), self.every)

    async def __aexit__(self, *exc: object) -> None:
        self.stopping.set()
        try:
            await self.task
        finally:
            await self.producer.stop()


# What is logged for an error nobody handled: by asyncio (a future's, a task's), by
# aiokafka (its producer's sender ended), by the gateway (an unexpected exception).
UNHANDLED = (
    "exception was never retrieved",
    "Task was destroyed but it is pending",
    "Unexpected error in sender routine",
    '"msg":"internal error',
)


@pytest.mark.parametrize(
    ("revoked", "scope"),
    [
        ("run-requests", "pair"),
        ("group", "pair"),
        ("requests", "pair"),
        ("run-requests", "instance"),
    ],
)
async def test_an_acl_revoked_while_running_is_reported_handled_and_recovered_from(
    ns: SecureNamespace, tmp_path: Path, revoked: str, scope: str
) -> None:
    """Revoked while requests flow: each refusal is handled where it happens (no error
    left for asyncio to log), reported (log, /readyz), and once the ACL is back every
    request is forwarded exactly once."""
    settings = {"producer_scope": scope, "instance_name": "gw-a"}
    await setup_agent(ns, **settings)
    sec = ns.security()
    principal = f"User:{GATEWAY_USER}"
    if revoked == "group":
        acl = Acl("group", ns.group, "literal", "Read", principal)
        expected = f"Read on group {ns.group}"
    elif revoked == "requests":
        acl = Acl("topic", ns.requests(AGENT), "literal", "Read", principal)
        expected = f"Read on topic {ns.requests(AGENT)}"
    else:
        acl = Acl("topic", ns.run_requests(AGENT), "literal", "Write", principal)
        expected = f"Write on topic {ns.run_requests(AGENT)}"
    gateway = await GatewayProcess(ns, tmp_path, **settings).start()
    try:
        async with Traffic(ns) as traffic:
            await collect(ns.bootstrap, ns.run_requests(AGENT), count=3, **sec)
            await change_acl(ns, acl, delete=True)
            deadline = time.monotonic() + 60
            while f"permission denied: {expected}" not in gateway.log_path.read_text():
                assert time.monotonic() < deadline, gateway.log_tail()
                await asyncio.sleep(0.3)
            await asyncio.sleep(4)  # requests go on arriving while it is refused
            status, body = gateway.http("/readyz")
            assert status == 503, body
            assert expected in json.loads(body)["denied"].values(), body
            await change_acl(ns, acl, delete=False)
            await asyncio.sleep(2)
        forwarded = await collect(
            ns.bootstrap,
            ns.run_requests(AGENT),
            count=len(traffic.sent),
            timeout=120,
            settle=2.0,
            **sec,
        )
        assert sorted(v["threadId"] for v in values(forwarded)) == sorted(
            r["threadId"] for r in traffic.sent
        )
        await gateway.wait_ready(60)
        assert json.loads(gateway.http("/readyz")[1])["denied"] == {}
    finally:
        assert await gateway.stop() == 0, gateway.log_tail()
    log = gateway.log_path.read_text()
    unhandled = [line for line in log.splitlines() if any(n in line for n in UNHANDLED)]
    assert unhandled == []
    assert_no_secret(ns, log, body)


async def test_an_auditor_with_exactly_its_acls_reads_the_trail_and_nothing_more(
    ns: SecureNamespace, tmp_path: Path
) -> None:
    """The gateway, with exactly its ACLs, writes an audit record per decision; a
    principal given exactly `acls --role auditor` reads them with `agui-gateway audit`
    (no group), and, before it is granted, is told which ACL it lacks."""
    await setup_agent(ns)
    sec = ns.security()
    gw = await GatewayProcess(ns, tmp_path).start()
    try:
        await judged_once_each(ns, sec, "t-audit")
    finally:
        assert await gw.stop() == 0
    auditor = ns.as_user("agui-client")
    args = ("audit", "--agent", AGENT, "--output", "json")
    refused = await asyncio.to_thread(run_cli, auditor.env(), *args)
    assert refused.returncode == 2, refused
    assert f"audit topic {ns.audit} does not exist, or this principal may not" in refused.stderr
    assert "acls --role auditor" in refused.stderr
    granted = await asyncio.to_thread(
        run_cli,
        ns.as_user("admin").env(),
        "acls",
        "--agent-pattern",
        AGENT,
        "--principal",
        "User:agui-client",
        "--role",
        "auditor",
        "--apply",
    )
    assert granted.returncode == 0, granted.stderr
    assert "created 1 ACLs for User:agui-client" in granted.stdout
    result = await asyncio.to_thread(run_cli, auditor.env(), *args)
    assert result.returncode == 0, result.stderr
    found = [json.loads(line) for line in result.stdout.splitlines()]
    assert sorted((r["verdict"], r["correlationId"]) for r in found) == [
        ("forward", "c-good"),
        ("reject", "c-bad"),
    ]
    assert all(r["attestation"] == "unattested" for r in found)
    assert_no_secret(ns, result.stdout, result.stderr, refused.stderr)


@pytest.mark.parametrize("event_loop", ["asyncio", "uvloop"])
def test_a_consumer_with_a_fetch_in_flight_stops_without_waiting_out_the_tls_close(
    ns: SecureNamespace, event_loop: str
) -> None:
    """A TLS close waits for the broker's close_notify, which a broker holding a fetch of
    that connection sends only once the fetch ends, and which on uvloop did not come at
    all in about one stop in four: the stop then took the loop's SSL shutdown timeout,
    30 s (each partition the bridge opened waited that long for its marker reader).
    Every client the gateway builds aborts what is still open after `closing.GRACE_S`."""
    import uvloop

    settings = Settings(
        bootstrap_servers=ns.bootstrap,
        security_protocol="SASL_SSL",
        sasl_mechanism="SCRAM-SHA-512",
        sasl_plain_username="admin",
        sasl_plain_password=ns.password("admin"),
        ssl_cafile=str(ns.secure_dir / "ca.crt"),
    )
    topic = f"{ns.prefix}.empty"

    async def stops() -> list[float]:
        admin = clients.admin(settings)
        await admin.start()
        try:
            await admin.create_topics([NewTopic(topic, 1, 1)])
        finally:
            await admin.close()
        took = []
        for _ in range(10):  # without the bound, on uvloop, 3 stops of 12 took 30 s
            consumer = clients.consumer(
                settings, enable_auto_commit=False, isolation_level="read_committed"
            )
            await consumer.start()
            tp = TopicPartition(topic, 0)
            consumer.assign([tp])
            await consumer.seek_to_beginning(tp)  # its fetcher starts a fetch, which waits
            started = time.monotonic()
            await consumer.stop()
            took.append(time.monotonic() - started)
        return took

    factory = uvloop.new_event_loop if event_loop == "uvloop" else None
    with asyncio.Runner(loop_factory=factory) as runner:
        took = runner.run(stops())
    # the fetch's own wait (fetch_max_wait_ms, 0.5 s), the close's bound, a margin
    assert max(took) < 0.5 + closing.GRACE_S + closing.ABORT_WAIT_S + 2, took
