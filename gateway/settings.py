"""The one typed settings object.

Read from environment variables prefixed `AGUI_GATEWAY_` and, optionally, a
TOML file named by `AGUI_GATEWAY_CONFIG_FILE` (environment wins). Frozen;
secrets are `SecretStr` and print masked.
"""

from __future__ import annotations

import ast
import functools
import inspect
import os
import re
import socket
import tomllib
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from types import UnionType
from typing import Any, Literal, Union, get_args, get_origin

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    Secret,
    SecretBytes,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

CONFIG_FILE_ENV = "AGUI_GATEWAY_CONFIG_FILE"
# Each field's meaning is the docstring written under it, read by `field_docs` when the
# docs or `--help` ask, not by pydantic's `use_attribute_docstrings` at import: that read
# this module's source for every model on every start of every command (0.1 s of a
# gateway's start-up).
_AGENT = "{agent}"


class BridgeAgent(BaseModel):
    """One HTTP AG-UI agent the bridge serves (`agui-gateway bridge`)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    url: str
    """Where RunAgentInput is POSTed; `{agent}` is replaced by the agent's name."""
    headers: dict[str, SecretStr] = {}
    """Extra request headers (e.g. Authorization); masked in logs."""
    connect_timeout_s: float = Field(default=5.0, gt=0)
    """Longest wait to connect to the agent."""
    read_timeout_s: float = Field(default=300.0, gt=0)
    """Longest silence within a run's stream."""
    concurrent_runs: int = Field(default=16, ge=1)
    """Runs in flight for this agent."""


class AgentGroup(BaseModel):
    """Agents that share one set of topics: the topic templates with `{agent}` replaced by
    the group's name (`agui.<group>.events`, ...), each record naming its agent in the
    `agui-agent` header. An agent no group names keeps topics of its own."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    agents: list[str] = []
    """The group's agents by name. With neither agents nor agent_pattern, any agent name
    that matches agent_name_pattern is allowed on the group's records."""
    agent_pattern: str | None = None
    """More agents of the group, by name (a regular expression matched whole)."""
    partitions: int = Field(default=6, ge=1, le=10_000)
    """Partitions of each of the group's topics when `topics create --group` makes them:
    chosen for the group's traffic, not its number of agents."""

    @field_validator("agent_pattern")
    @classmethod
    def _pattern_compiles(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                re.compile(value)
            except re.error as exc:
                raise ValueError(f"not a regular expression: {exc}") from None
        return value

    def names(self, agent: str) -> bool:
        """Whether the group names `agent` (by its list or its pattern)."""
        if agent in self.agents:
            return True
        return (
            self.agent_pattern is not None and re.fullmatch(self.agent_pattern, agent) is not None
        )

    @property
    def open(self) -> bool:
        """Whether any legal agent name is allowed (neither a list nor a pattern set)."""
        return not self.agents and self.agent_pattern is None


class ApproverSetting(BaseModel):
    """One rule of the approver policy (`approvers`): who may answer, and who may abandon,
    the interrupts of an agent (or a group's agents, or any: "*") with a reason (or any:
    "*") for a tool call of a tool (or any: "*"). The most specific rule that applies to
    an interrupt governs it (the agent's own over its group's over "*", then a named tool,
    then a named reason); an interrupt no rule names may be answered by anyone."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    agent: str = "*"
    """The agent, or the group, whose interrupts this rule governs; "*": every agent."""
    reason: str = "*"
    """The interrupt `reason` it governs (e.g. "tool_call", "payment"); "*": every reason."""
    tool: str = "*"
    """The tool whose calls' interrupts it governs: the `toolCallName` of the run's
    TOOL_CALL_START whose `toolCallId` the interrupt names; "*": any, and interrupts with
    no known tool name (which a named tool never matches)."""
    answer_subjects: list[str] = []
    """Subjects (the verified identity's `sub`) that may answer (status `resolved`); "*":
    any verified identity."""
    answer_groups: list[str] = []
    """Groups or roles (from the token's groups claim) whose members may answer. With no
    subjects and no groups: any verified identity (and an unattested one if `unattested`)."""
    abandon_subjects: list[str] | None = None
    """Subjects that may abandon (status `cancelled`); unset with abandon_groups unset: the
    same as may answer."""
    abandon_groups: list[str] | None = None
    """Groups or roles whose members may abandon; see abandon_subjects."""
    unattested: bool = False
    """Whether an answer with no verified identity is accepted (only where the lists name
    nobody): false rejects it `approver_unverified`."""

    def rule(self) -> Any:
        """The core's value for this rule (`gateway.core.values.approvers.ApproverRule`)."""
        from gateway.core.values.approvers import ApproverRule

        return ApproverRule(
            agent=self.agent,
            reason=self.reason,
            tool=self.tool,
            answer_subjects=tuple(self.answer_subjects),
            answer_groups=tuple(self.answer_groups),
            abandon_subjects=None
            if self.abandon_subjects is None
            else tuple(self.abandon_subjects),
            abandon_groups=None if self.abandon_groups is None else tuple(self.abandon_groups),
            unattested=self.unattested,
        )


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="AGUI_GATEWAY_", frozen=True, extra="forbid")

    # --- Kafka connection -------------------------------------------------------------
    bootstrap_servers: str = "127.0.0.1:9092"
    """Kafka bootstrap servers: host:port, comma-separated."""
    client_id: str = "agui-gateway"
    """Client id prefix of every Kafka client the gateway opens."""
    group_id: str = "agui-gateway"
    """Consumer group; also prefixes the transactional ids."""
    security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = "PLAINTEXT"
    """PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL."""
    sasl_mechanism: str | None = None  # PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, ...
    """SASL mechanism (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, ...)."""
    sasl_plain_username: str | None = None
    """SASL user name."""
    sasl_plain_password: SecretStr | None = None
    """SASL password (masked)."""
    ssl_cafile: Path | None = None
    """TLS: CA certificates file."""
    ssl_certfile: Path | None = None
    """TLS: client certificate file."""
    ssl_keyfile: Path | None = None
    """TLS: client key file."""
    ssl_password: SecretStr | None = None
    """TLS: the client key's password (masked)."""

    # --- Topics (templates: {agent} is the agent's name) -----------------------------
    events_topic: str = "agui.{agent}.events"
    """Events topic template ({agent} is the agent's name)."""
    requests_topic: str = "agui.{agent}.requests"
    """Requests topic template."""
    run_requests_topic: str = "agui.{agent}.run-requests"
    """Forwarded requests topic template."""
    changelog_topic: str = "agui.{agent}.gateway-changelog"
    """Thread state changelog topic template."""
    rejections_topic: str = "agui.rejections"
    """Rejections topic: one for all agents, or with {agent} (at most once) a template,
    each owner's rejections on its own topic (`agui.{agent}.rejections`: an agent's on
    `agui.<agent>.rejections`, a group's agents' on `agui.<group>.rejections`), so that
    each team may be given Read on its own only."""
    warnings_topic: str = "agui.warnings"
    """Warnings topic: one for all agents, or with {agent} (at most once) a template, as
    rejections_topic."""
    audit_topic: str = "agui.audit"
    """Audit topic: one record per decided request (who answered which interrupts, the
    verdict, hashes of the payloads, never the payloads), written in the decision's own
    transaction. One for all agents, or with {agent} (at most once) a template, as
    rejections_topic, so that an auditor of one team reads only its own."""
    audit_enabled: bool = True
    """Write the audit trail. On by default: an approval that leaves no trace cannot be
    accounted for afterwards. With it on, the audit topic must exist (`topics create`
    makes it) and the gateway's principal needs Write on it (`acls` lists it)."""
    audit_retention_days: int = Field(default=400, ge=-1)
    """How long `topics create` makes the audit topic keep its records (retention.ms),
    in days; -1 keeps them forever. 400 days holds a whole year for a yearly review.
    Only applied when the topic is created."""
    interrupts_topic: str = "agui.interrupts"
    """The inbox's compacted topic, one for all agents and groups: a record per open
    interrupt (keyed by agent, thread and interrupt id) and a tombstone when it closes,
    written in the same transaction as the state change; made by `topics create`. Empty:
    not written (the inbox then has nothing to show)."""
    interrupts_topic_runs: bool = True
    """Also write to interrupts_topic, per thread, how its latest run closed (succeeded,
    interrupted, cancelled, failed: one small record per closed run, keyed by the thread,
    a tombstone when retention forgets it), so the inbox's thread answer tells every run's
    close, not only those that ended with interrupts. False saves that record."""
    agent_name_pattern: str = r"[A-Za-z0-9_-]+"
    """Regular expression an agent's name ({agent}) must match; a group's name too."""
    groups: dict[str, AgentGroup] = {}
    """Agent groups by name: a group's agents share the group's topics (the templates
    above with {agent} = the group's name), each record naming its agent in the
    `agui-agent` header. Agents no group names keep topics of their own."""

    # --- Judging ---------------------------------------------------------------------
    strict: bool = False
    """Unrecognised resume entries and unknown threads reject instead of warn."""

    # --- Approvers: who may answer (docs/guides/approvers.md) --------------------------
    approvers: list[ApproverSetting] = []
    """The approver policy: rules saying who may answer or abandon which agents'
    interrupts, by reason. None (the default): anyone who can publish to a requests topic
    or reach the edge may answer any interrupt, as the gateway warns at start."""
    attest_trusted_keys: dict[str, str] = {}
    """The gateway's trusted keys, by key id: Ed25519 public keys (base64 of the 32 bytes,
    or PEM) whose signatures on a request's identity headers it believes. Several at once:
    trust a new key before anyone signs with it, drop an old one after its last request
    was judged. Identity headers signed with any other key are never trusted."""
    attest_trusted_keys_file: Path | None = None
    """More trusted keys, in a file (a JSON object or TOML: key id = public key) that the
    gateway reads again when it changes, so keys rotate without a restart. A file that
    cannot be read at start stops the gateway; later, the keys it gave last are kept and
    the problem is logged."""
    attest_keys_reload_s: float = Field(default=5.0, gt=0)
    """Longest interval between two looks at attest_trusted_keys_file for a change."""
    attest_key_id: str | None = None
    """The edge's (or the inbox's, or a GatewayClient's) signing key id: the id the
    gateway trusts its public key under."""
    attest_private_key_file: Path | None = None
    """The edge's (or the inbox's, or a GatewayClient's) Ed25519 private key (PEM,
    PKCS#8): signs the identity it verified onto each request record (the inbox: a
    signed-in person's answers; it also derives the key sealing their sessions). Read at
    start, never logged."""

    @model_validator(mode="after")
    def _signing_key_named(self) -> Settings:
        if (self.attest_key_id is None) != (self.attest_private_key_file is None):
            raise ValueError(
                "attest_key_id and attest_private_key_file are set together (a key and its id)"
            )
        return self

    @field_validator("attest_trusted_keys")
    @classmethod
    def _trusted_keys_read(cls, value: dict[str, str]) -> dict[str, str]:
        from gateway.kafka.wire.trustedkeys import public_key

        problems = []
        for key_id, text in value.items():
            try:
                public_key(text)
            except ValueError as exc:
                problems.append(f"key {key_id!r}: {exc}")
        if problems:
            raise ValueError("; ".join(problems))
        return value

    # --- Processing ------------------------------------------------------------------
    merge_max_wait_ms: int = Field(
        default=5000, ge=0
    )  # wait for a lagging events side before judging
    """Longest wait for a lagging events side before judging a request."""
    poll_timeout_ms: int = Field(default=100, ge=1)
    """Consumer poll timeout."""
    max_poll_records: int = Field(default=2000, ge=1)
    """Records per poll."""
    fetch_max_wait_ms: int = Field(default=500, ge=0, le=30000)
    """How long the broker holds the consumer's fetch while none of its partitions has
    new records (it answers as soon as one has). Longer: fewer empty fetches while idle,
    each of which costs CPU (little with fetch_sessions). A partition resumed (its pair
    restored) or rewound joins the next fetch, so while nothing else arrives its first
    records can wait this long."""
    fetch_sessions: bool = True
    """Fetch in incremental fetch sessions (KIP-227): a fetch names only the partitions
    whose offsets changed and its response only those with records, rather than one
    entry for every assigned partition each way. False: every fetch in full, as
    aiokafka sends it."""
    commit_interval_ms: int = Field(
        default=1000, ge=1
    )  # most delay for offsets of state-neutral records
    """Longest delay before committing what events alone changed."""
    commit_min_interval_ms: int = Field(default=0, ge=0, le=1000)
    """Under load, a pair's next commit starts only this long after its last one began
    (or once commit_min_records are pending): fewer, larger transactions. A request
    after a quiet spell still commits at once. 0: each commit starts as soon as the
    last one ended."""
    commit_min_records: int = Field(default=0, ge=0)
    """Records pending in a pair's round that start its commit before
    commit_min_interval_ms has passed (0: only the interval counts)."""
    pending_max_bytes: int = Field(default=16 * 2**20, ge=2**20)
    """What the pairs' rounds not yet committed may hold (their outputs and thread
    states, in bytes) before each commits at once and a pair whose commit is still under
    way stops fetching until it ends: it bounds the memory a backlog takes (a restart's
    catch-up, a burst after an outage), whatever its size."""
    transaction_timeout_ms: int = Field(default=60000, ge=1000)
    """Producer transaction timeout."""
    revoke_timeout_s: float = Field(default=10.0, gt=0)
    """How long a revoke waits for the round in progress."""
    producer_scope: Literal["pair", "instance"] = "pair"
    """Transactional producers: one per partition pair (fenced by a transactional id per
    pair), or one per instance (fenced by the consumer group's generation, KIP-447)."""
    instance_producers: int = Field(default=1, ge=1, le=8)
    """With producer_scope=instance: transactional producers per instance. Above 1, rounds
    asked for while one producer's transaction is open start another's at once rather
    than waiting for it to end (two broker connections each)."""
    instance_name: str = Field(default_factory=socket.gethostname, min_length=1)
    """This instance's name: in its transactional id with producer_scope=instance, and its
    static group membership (group.instance.id) with static_membership; stable across its
    restarts, unique among live instances (default: the host name)."""
    partition_assignor: Literal["pairs", "range"] = "pairs"
    """How the group's leader spreads the pairs over the instances. pairs: each pair's
    events and requests partitions together, counts per instance within one of each
    other, and sticky (an instance keeps what it holds up to its share). range: Kafka's
    range assignor, as versions before this setting (partition p of every topic to one
    instance: one-partition agents all land on one). Every instance of a group must use
    the same: an instance offering the other one is refused (INCONSISTENT_GROUP_PROTOCOL),
    so an upgrade from a version before this setting either stops every instance before
    starting the new ones, or rolls with range and switches to pairs in a full restart."""
    static_membership: bool = False
    """Join the consumer group as a static member named instance_name (KIP-345): an
    instance restarted within session_timeout_ms gets its pairs back with no rebalance of
    the others; one that stays away longer loses them at the session timeout (not at its
    stop). Two live instances with one name fence each other at every join and both rejoin
    over and over, deciding almost nothing (nothing twice: their transactions are fenced
    by the group's generation); the gateway logs an error naming instance_name when it
    is rebalanced 5 times within 30 s as a static member."""
    standby_replicas: int = Field(default=1, ge=0, le=8)
    """Warm standbys of each pair (with partition_assignor=pairs): instances other than
    its owner that keep a replica of its state by reading its changelog, so that the
    instance taking it over after a death restores only the changelog's tail. At most
    one fewer than the instances in the group (the default 1: one standby when two or
    more instances run, none alone); 0: none. The group leader's setting places them.
    Each costs its instance about the memory of the pair's own store and the reading
    of its changelog."""
    discovery_interval_ms: int = Field(
        default=5000, ge=100
    )  # how often new agents' topics are seen
    """Metadata refresh: how soon new agents' topics are seen."""
    session_timeout_ms: int = Field(default=10000, ge=1000)
    """Consumer group session timeout: an instance that sends no heartbeat for this long
    is taken for dead and its pairs move (after a kill -9, its pairs wait this long).
    Shorter: faster takeover, more false deaths under load (a long pause, GC, a slow
    broker). The broker bounds it (group.min.session.timeout.ms, default 6000, and
    group.max.session.timeout.ms); with static_membership it is also how long a restart
    may take without moving anything."""
    heartbeat_interval_ms: int = Field(default=500, ge=100)
    """Consumer group heartbeat interval: how soon an instance hears of a rebalance. The
    group's protocol is eager (every pair of every instance stops at a rebalance), and a
    rebalance waits for the last instance to hear of it, so the others' pairs stop for up
    to about this long plus the join and the preparation. Each instance sends one small
    request per interval. Less than session_timeout_ms (a third of it at most is usual)."""

    # --- When the broker is gone ------------------------------------------------------
    broker_timeout_s: float = Field(default=10.0, gt=0)
    """How long the broker may leave a probe unanswered before /readyz turns false."""
    shutdown_timeout_s: float = Field(default=20.0, gt=0)
    """Longest wait for a stop after SIGTERM/SIGINT; then uncommitted work is abandoned, exit 3."""

    # --- State retention ---------------------------------------------------------------
    thread_retention_s: float = Field(
        default=7 * 24 * 3600, gt=0
    )  # idle threads, no open interrupts
    """How long an idle thread without open interrupts is kept."""
    interrupt_grace_s: float = Field(default=24 * 3600, ge=0)  # kept past the last expiresAt
    """How long a thread is kept past its interrupts' last expiresAt."""
    interrupt_retention_s: float = Field(default=30 * 24 * 3600, gt=0)  # open interrupts, no expiry
    """How long a thread with open interrupts and no readable expiry is kept."""
    sweep_interval_s: float = Field(default=10.0, gt=0)
    """How often expiries and retention are checked."""

    # --- Warnings ----------------------------------------------------------------------
    warning_burst: int = Field(default=5, ge=1)  # identical warnings per thread before suppression
    """Identical warnings per thread and code published before suppression."""
    warning_window_s: float = Field(default=60.0, gt=0)
    """The warning rate limit's window."""

    # --- HTTP and logs -----------------------------------------------------------------
    http_host: str = "127.0.0.1"
    """Address of the HTTP endpoints (/healthz, /readyz, /metrics)."""
    http_port: int = Field(default=9464, ge=0, le=65535)
    """Port of the HTTP endpoints (0: any free port)."""
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    """DEBUG, INFO, WARNING or ERROR."""
    event_loop: Literal["uvloop", "asyncio"] = "asyncio"
    """The event loop of the long-lived commands (run, bridge, edge, inbox): Python's own
    asyncio loop, or uvloop (libuv: less CPU for each socket write and wake-up; not the
    default: a 200-agent fleet test's kills and takeovers took 73, 131 and 260 s on it,
    70-110 s on asyncio, not yet understood). Where uvloop cannot be imported, Python's
    own, with a warning."""

    # --- Metrics -----------------------------------------------------------------------
    metrics_agent_detail: Literal["dashboard", "full"] = "dashboard"
    """Which metrics carry agent: dashboard (verdicts per agent, detail over all) or full."""

    @field_validator("bootstrap_servers")
    @classmethod
    def _host_port_list(cls, value: str) -> str:
        for server in value.split(","):
            problem = _host_port_problem(server.strip())
            if problem:
                raise ValueError(f"{server.strip()!r} {problem}; expected host:port[,host:port...]")
        return value

    # --- Agent bridge (agui-gateway bridge) ------------------------------------------------
    bridge_agents: dict[str, BridgeAgent] = {}
    """Agent name -> its HTTP endpoint (JSON in the environment, tables in the file)."""
    bridge_agent_pattern: str | None = None
    """More agents, by name (a regex), served by bridge_default."""
    bridge_default: BridgeAgent | None = None
    """The endpoint of agents matched by bridge_agent_pattern (its url may use {agent})."""
    bridge_group_id: str = "agui-gateway-bridge"
    """The bridge's consumer group; also prefixes its transactional ids."""
    bridge_runs_topic: str = "agui.{agent}.bridge-runs"
    """The bridge's run markers (compacted; created by the bridge)."""
    bridge_max_event_bytes: int = Field(default=900_000, ge=1024, le=1_000_000)
    """Largest SSE event accepted from an agent; a larger one ends the run."""
    bridge_buffer_bytes: int = Field(default=8 << 20, ge=1)
    """Relayed bytes buffered per partition before runs wait."""
    bridge_linger_ms: int = Field(default=3, ge=0, le=1000)
    """How long a partition's outbox waits, once something is handed to it, before
    it starts a transaction: what arrives meanwhile (a run's last events, its end,
    other runs' starts) shares that transaction. Up to this much latency on each
    event and run start, for fewer transactions (0: start at once)."""
    bridge_pending_requests: int = Field(default=1000, ge=1)
    """Run requests waiting per partition before it is paused."""
    bridge_http_port: int = Field(default=9465, ge=0, le=65535)
    """Port of the bridge's /healthz, /readyz, /metrics (0: any free port)."""
    bridge_identity_header: str = Field(default="X-AGUI-Identity", pattern=r"^[A-Za-z0-9-]+$")
    """HTTP header of the bridge's POST that carries who answered the interrupts it
    resumes (the gateway's verified identity, as JSON: subject, groups, issuer, signer);
    absent when the request was unattested. An agent's configured header of this name is
    never sent."""

    @field_validator("bridge_runs_topic")
    @classmethod
    def _bridge_runs_has_agent(cls, value: str) -> str:
        if value.count(_AGENT) != 1:
            raise ValueError(f"a per-agent topic template must contain {_AGENT} exactly once")
        return value

    # --- The edge (`agui-gateway edge`: AG-UI over HTTP, backed by Kafka) ----------------
    edge_host: str = "127.0.0.1"
    """Address the edge's HTTP endpoint listens on."""
    edge_port: int = Field(default=8000, ge=0, le=65535)
    """Port of the edge (POST /agents/{agent}, /healthz, /readyz, /metrics; 0: any free port)."""
    edge_reply_topic: str = "agui.edge-replies"
    """The edge's reply topic: created at start if missing; may be shared by edge instances."""
    edge_reply_partitions: int = Field(default=3, ge=1)
    """Partitions of the reply topic when the edge creates it."""
    edge_verdict_timeout_s: float = Field(default=10.0, gt=0)
    """Longest wait for the gateway's verdict; then 504."""
    edge_run_start_timeout_s: float = Field(default=60.0, gt=0)
    """Longest wait from the forward to the run's RUN_STARTED; then the edge's RUN_ERROR."""
    edge_run_timeout_s: float = Field(default=900.0, gt=0)
    """Longest wait from the forward to the run's close; then the edge's RUN_ERROR."""
    edge_keepalive_s: float = Field(default=15.0, gt=0)
    """Interval of SSE keep-alive comments while a stream waits."""
    edge_max_streams: int = Field(default=10_000, ge=1)
    """Open streams per edge; beyond it a request gets 503 busy."""
    edge_stream_buffer: int = Field(default=10_000, ge=1)
    """Unread events held per stream; beyond it the stream ends (run_buffer_overflow)."""
    edge_max_body_bytes: int = Field(default=1_000_000, ge=1)
    """Largest request body accepted; beyond it 413."""
    edge_cors_origins: list[str] = []
    """Origins allowed by CORS, e.g. ["https://app.example"]; ["*"] allows any."""
    edge_header_timeout_s: float = Field(default=10.0, gt=0)
    """Longest wait for a request's headers, from the connection's opening (or the end of
    its previous response) to their last byte; then 408 (if part of a request came) and
    the connection is closed. Bounds clients that send their headers slowly."""
    edge_body_timeout_s: float = Field(default=30.0, gt=0)
    """Longest wait for a request's body, from its headers to its last byte; then 408 and
    the connection is closed."""
    edge_max_connections: int = Field(default=12_000, ge=1)
    """Open HTTP connections per edge (requests being read, event streams, idle keep-alive
    ones); a connection accepted beyond it is answered 503 and closed at once. Keep it
    above edge_max_streams, and the process's open-file limit above it."""

    # --- The inbox page (`/inbox`: open interrupts, answered through the gateway) --------
    inbox_page_reply_topic: str = "agui.inbox-replies"
    """The inbox page's reply topic: its answers are sent to the agent's requests topic with
    this as `agui-reply-to`; created when the first answer is sent, if missing."""
    inbox_page_reply_partitions: int = Field(default=1, ge=1)
    """Partitions of the inbox page's reply topic when the page creates it."""
    inbox_page_verdict_timeout_s: float = Field(default=10.0, gt=0)
    """Longest wait for the gateway's verdict on an answer sent from the page; then the page
    says none came (the answer is still judged exactly once)."""
    inbox_page_rows: int = Field(default=200, ge=1, le=500)
    """Open interrupts the page lists at most (oldest first; the filters narrow them)."""
    inbox_page_keepalive_s: float = Field(default=15.0, gt=0)
    """Interval of keep-alive comments on the page's live stream (`GET /inbox/events`)."""
    inbox_page_summary_refresh_s: float = Field(default=15.0, gt=0)
    """How often the open page refreshes its per-agent summary and the view's lag."""
    inbox_page_max_body_bytes: int = Field(default=1_000_000, ge=1)
    """Largest answer form (or JSON check) the page accepts; beyond it 413."""

    edge_jwt_jwks_file: Path | None = None
    """Verify callers' bearer tokens (JWT) with the keys of this JWKS file; with it (or
    edge_jwt_jwks_url) every run request needs a valid token, else 401. Unset (with the
    URL unset): callers are not verified and their requests carry no identity. The inbox
    (API and page) verifies people's tokens with these same edge_jwt_* settings, beside
    inbox_token."""
    edge_jwt_jwks_url: str | None = None
    """Verify callers' bearer tokens with the keys of this JWKS URL (fetched at start, and
    again when a token names a key id it does not hold)."""
    edge_jwks_min_refresh_s: float = Field(default=60.0, ge=0)
    """Shortest interval between two fetches of edge_jwt_jwks_url."""
    edge_jwt_issuer: str | None = None
    """The `iss` a token must carry (needed when tokens are verified)."""
    edge_jwt_audience: str | None = None
    """The `aud` a token must carry (one of, when a list; needed when tokens are verified)."""
    edge_jwt_algorithms: list[str] = ["RS256", "ES256", "EdDSA"]
    """Signature algorithms accepted (never "none"; HMAC ones only if listed)."""
    edge_jwt_groups_claim: str = "groups"
    """The claim holding the caller's groups or roles: a dotted path (e.g.
    "realm_access.roles"), a list of strings or one space-separated string."""
    edge_jwt_leeway_s: float = Field(default=30.0, ge=0, le=600)
    """Clock skew allowed on exp, nbf and iat."""

    edge_ssl_certfile: Path | None = None
    """Serve the edge over TLS with this certificate (PEM; with edge_ssl_keyfile)."""
    edge_ssl_keyfile: Path | None = None
    """The edge's TLS private key (PEM)."""
    edge_ssl_ca_certs: Path | None = None
    """CA certificates that client certificates are verified against (edge_client_certs)."""
    edge_client_certs: Literal["off", "optional", "required"] = "off"
    """TLS client certificates: "required" (the handshake fails without one signed by
    edge_ssl_ca_certs), "optional", or "off". A verified certificate is a caller's
    identity (subject: its commonName; groups: its organizationalUnitName values;
    issuer: its issuer's commonName) where no bearer token is given."""

    @model_validator(mode="after")
    def _edge_tls_complete(self) -> Settings:
        if (self.edge_ssl_certfile is None) != (self.edge_ssl_keyfile is None):
            raise ValueError("edge_ssl_certfile and edge_ssl_keyfile are set together")
        if self.edge_client_certs != "off" and (
            self.edge_ssl_certfile is None or self.edge_ssl_ca_certs is None
        ):
            raise ValueError(
                "edge_client_certs needs TLS (edge_ssl_certfile, edge_ssl_keyfile) and the "
                "client certificates' CA (edge_ssl_ca_certs)"
            )
        return self

    @field_validator("edge_jwt_algorithms")
    @classmethod
    def _no_none_algorithm(cls, value: list[str]) -> list[str]:
        if any(a.lower() == "none" for a in value) or not value:
            raise ValueError('list signature algorithms, never "none"')
        return value

    # --- The inbox (open interrupts of every agent, read from interrupts_topic) ---------
    inbox_enabled: bool = False
    """Serve the inbox's JSON API (`/interrupts`, `/threads/...`) and its page (`/inbox`)
    on the gateway's HTTP port; `agui-gateway inbox` serves both whatever this says."""
    inbox_token: SecretStr | None = None
    """Bearer token the inbox's API and page ask for (`Authorization: Bearer <token>`, or
    the session cookie a browser gets by giving it once at `/inbox/login`: an HMAC under
    the token, not the token): an operator's or a service's credential, with no person's
    identity (answers sent with it are unattested). People may use a JWT instead where
    the edge's token settings (edge_jwt_*) are set. Unset (and no JWKS): every request
    is refused (401) unless inbox_open says otherwise."""
    inbox_open: bool = False
    """Serve the inbox's API and page with no token at all (for a trusted network only)."""
    inbox_max_open: int = Field(default=200_000, ge=1)
    """Open interrupts the inbox's view holds at most. Past it (or past inbox_max_bytes)
    an interrupt that opens is not held nor listed, and counted in
    agui_gateway_inbox_dropped_total; it shows once a view reads the topic again (a
    restart) with room for it. Those held stay right."""
    inbox_max_bytes: int = Field(default=512 << 20, ge=1 << 20)
    """Bytes the inbox's view counts its open interrupts as holding, at most: each its
    record and search text plus 1,000 bytes (about 1.6 KiB for a typical interrupt, up to
    about 90 KiB for one with the largest message and responseSchema); past it, as
    past inbox_max_open."""
    inbox_max_threads: int = Field(default=200_000, ge=1)
    """Threads whose history (runs, how their interrupts closed, last verdicts) the
    inbox's view keeps at most; past it (or past inbox_history_max_bytes) the thread with
    the oldest activity is forgotten (agui_gateway_inbox_threads_forgotten_total). The
    default keeps every thread of inbox_max_open interrupts each on a thread of its own."""
    inbox_history_max_bytes: int = Field(default=384 << 20, ge=1 << 20)
    """Bytes the inbox's view counts its threads' history as holding, at most: about 1 KB
    for a thread with one open interrupt, 2.6 KB with two runs, two closed interrupts
    and two verdicts (measured: see the inbox guide); past it, as past
    inbox_max_threads. The default holds 100,000 threads of the second kind."""
    inbox_verdicts_lookback_s: int = Field(default=3600, ge=-1)
    """How far back the inbox's view starts reading the audit topic for each thread's last
    verdicts, in seconds (by the records' timestamps); -1 reads it from its beginning
    (which may hold audit_retention_days of decisions). While it runs the view keeps
    every verdict it reads; this bounds only what a fresh view knows of the past."""
    inbox_group_id: str = "agui-gateway-inbox"
    """Prefix of the inbox reader's client id (it reads with no consumer group, from the
    beginning of interrupts_topic, and commits nothing)."""
    inbox_port: int = Field(default=9466, ge=0, le=65535)
    """HTTP port of `agui-gateway inbox` (on http_host)."""

    @field_validator("events_topic", "requests_topic", "run_requests_topic", "changelog_topic")
    @classmethod
    def _has_agent(cls, value: str) -> str:
        if value.count(_AGENT) != 1:
            raise ValueError(f"a per-agent topic template must contain {_AGENT} exactly once")
        return value

    @field_validator("rejections_topic", "warnings_topic", "audit_topic")
    @classmethod
    def _agent_at_most_once(cls, value: str) -> str:
        if value.count(_AGENT) > 1:
            raise ValueError(
                f"a rejections, warnings or audit topic contains {_AGENT} at most once: once "
                "for a topic per agent or group, not at all for one topic shared by all"
            )
        return value

    @field_validator("audit_retention_days")
    @classmethod
    def _retention_not_zero(cls, value: int) -> int:
        if value == 0:
            raise ValueError("a number of days of at least 1, or -1 to keep audit records forever")
        return value

    @model_validator(mode="after")
    def _heartbeat_within_session(self) -> Settings:
        if self.heartbeat_interval_ms >= self.session_timeout_ms:
            raise ValueError(
                f"heartbeat_interval_ms ({self.heartbeat_interval_ms}) must be less than "
                f"session_timeout_ms ({self.session_timeout_ms}): a member whose heartbeats "
                "are further apart than its session is taken for dead between two of them"
            )
        return self

    @model_validator(mode="after")
    def _group_names_are_legal(self) -> Settings:
        legal = re.compile(self.agent_name_pattern)
        problems = []
        for group, spec in self.groups.items():
            if not legal.fullmatch(group):
                problems.append(f"group name {group!r} does not match agent_name_pattern")
            problems += [
                f"group {group!r}: agent name {agent!r} does not match agent_name_pattern"
                for agent in spec.agents
                if not legal.fullmatch(agent)
            ]
        if problems:
            raise ValueError("; ".join(problems))
        return self

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        unknown = unknown_environment(settings_cls)
        if unknown:
            raise SettingsSourceError(
                [f"environment variable {name} names no setting" for name in unknown]
            )
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        config_file = os.environ.get(CONFIG_FILE_ENV)
        if config_file:
            path = Path(config_file)
            if not path.is_file():
                raise FileNotFoundError(f"{CONFIG_FILE_ENV}={config_file}: no such file")
            sources.append(_TomlFile(settings_cls, toml_file=path))
        return tuple(sources)

    # --- derived -------------------------------------------------------------------------

    def group_of(self, agent: str) -> str | None:
        """The group whose topics carry `agent`: the first group (in the settings' order)
        that names it in its list, else the first whose pattern matches it, else the first
        open group (neither list nor pattern); None: the agent has topics of its own."""
        for name, group in self.groups.items():
            if agent in group.agents:
                return name
        for name, group in self.groups.items():
            if group.agent_pattern is not None and group.names(agent):
                return name
        for name, group in self.groups.items():
            if group.open:
                return name
        return None

    def owner_of(self, agent: str) -> str:
        """Whose topics carry `agent`: its group's name, or the agent's own."""
        return self.group_of(agent) or agent

    def group_allows(self, group: str, agent: str) -> bool:
        """Whether a record on `group`'s topics may name `agent`: a legal agent name the
        group names (any legal name for an open group)."""
        spec = self.groups.get(group)
        if spec is None or not re.fullmatch(self.agent_name_pattern, agent):
            return False
        return spec.open or spec.names(agent)

    def topic(self, template: str, agent: str) -> str:
        return template.replace(_AGENT, agent)

    @staticmethod
    def per_owner(template: str) -> bool:
        """Whether a topic setting is a template (one topic per agent or group), not one
        topic for all: rejections_topic, warnings_topic and audit_topic may be either."""
        return _AGENT in template

    def topic_regex(self, template: str) -> re.Pattern[str]:
        """A regex matching the topics of `template`, capturing the agent's name."""
        head, tail = template.split(_AGENT)
        return re.compile(
            "^" + re.escape(head) + f"(?P<agent>{self.agent_name_pattern})" + re.escape(tail) + "$"
        )

    def subscription_pattern(self) -> str:
        """The consumer's subscription: every agent's events and requests topics."""
        parts = [
            self.topic_regex(self.events_topic).pattern,
            self.topic_regex(self.requests_topic).pattern,
        ]
        return "|".join(f"(?:{p})" for p in parts).replace("?P<agent>", "")

    def kafka_security(self) -> dict[str, Any]:
        """aiokafka keyword arguments for the connection's security."""
        kwargs: dict[str, Any] = {"security_protocol": self.security_protocol}
        if self.sasl_mechanism:
            kwargs["sasl_mechanism"] = self.sasl_mechanism
        if self.sasl_plain_username:
            kwargs["sasl_plain_username"] = self.sasl_plain_username
        if self.sasl_plain_password:
            kwargs["sasl_plain_password"] = self.sasl_plain_password.get_secret_value()
        if self.security_protocol in ("SSL", "SASL_SSL"):
            from aiokafka.helpers import create_ssl_context

            kwargs["ssl_context"] = create_ssl_context(
                cafile=str(self.ssl_cafile) if self.ssl_cafile else None,
                certfile=str(self.ssl_certfile) if self.ssl_certfile else None,
                keyfile=str(self.ssl_keyfile) if self.ssl_keyfile else None,
                password=self.ssl_password.get_secret_value() if self.ssl_password else None,
            )
        return kwargs

    def bridge_agent(self, agent: str) -> BridgeAgent | None:
        """The endpoint the bridge uses for `agent`, or None when it serves no such agent."""
        if agent in self.bridge_agents:
            return self.bridge_agents[agent]
        if self.bridge_agent_pattern and self.bridge_default is not None:
            if re.fullmatch(self.bridge_agent_pattern, agent):
                return self.bridge_default
        return None

    def masked(self) -> dict[str, Any]:
        """Every setting, secrets masked: what the gateway logs at start."""
        return self.model_dump(mode="json")


# --- where settings come from, and what is wrong with them ---------------------------------


class SettingsSourceError(ValueError):
    """Settings that cannot even be read: one line per problem."""

    def __init__(self, lines: list[str]) -> None:
        super().__init__("; ".join(lines))
        self.lines = lines


class _TomlFile(TomlConfigSettingsSource):
    """The settings file; a syntax error names the file."""

    def _read_file(self, file_path: Any) -> dict[str, Any]:
        try:
            return super()._read_file(file_path)
        except tomllib.TOMLDecodeError as exc:
            raise SettingsSourceError(
                [f"settings file {file_path}: not valid TOML: {exc}"]
            ) from exc


def _host_port_problem(server: str) -> str | None:
    host, sep, port = server.rpartition(":")
    if not sep or not host:
        return "is not host:port"
    if host.startswith("[") != host.endswith("]") or (":" in host and not host.startswith("[")):
        return "has a malformed host (an IPv6 address is written [address]:port)"
    if not port.isdigit() or not 1 <= int(port) <= 65535:
        return "has no port between 1 and 65535"
    return None


def setting_fields(
    model: type[BaseModel] = Settings,
    path: tuple[str, ...] = (),
    config: SettingsConfigDict | None = None,
) -> Iterator[tuple[str, str, Any, str]]:
    """Every setting, nested ones included: (dotted name, environment variable, default,
    description). Names follow the settings' own environment prefix and nested delimiter."""
    config = config if config is not None else SettingsConfigDict(**model.model_config)  # type: ignore[typeddict-item]
    prefix = str(config.get("env_prefix") or "")
    delimiter = config.get("env_nested_delimiter")
    docs = field_docs(model)
    for name, field in model.model_fields.items():
        here = (*path, field.alias or name)
        nested = _model_in(field.annotation)
        env = prefix + (delimiter or "__").join(here).upper()
        if nested is not None and delimiter:
            yield ".".join(here), env, field.get_default(), docs.get(name, "")
            yield from setting_fields(nested, here, config)
            continue
        yield ".".join(here), env, field.get_default(), docs.get(name, "")


@functools.cache  # keyed by model class: finite
def field_docs(model: type[BaseModel]) -> dict[str, str]:
    """Each field of `model` (its own and its bases' among this module's models) with the
    docstring written under it in the source; a field without one is left out (all of them
    where the source is not installed: the meanings are for docs and `--help` only)."""
    docs: dict[str, str] = {}
    for cls in reversed(model.__mro__):
        if cls.__module__ != __name__ or not issubclass(cls, BaseModel):
            continue
        try:
            (node,) = ast.parse(inspect.getsource(cls)).body
        except (OSError, TypeError):
            continue
        if not isinstance(node, ast.ClassDef):
            continue
        for this, after in zip(node.body, node.body[1:], strict=False):
            if (
                isinstance(this, ast.AnnAssign)
                and isinstance(this.target, ast.Name)
                and isinstance(after, ast.Expr)
                and isinstance(after.value, ast.Constant)
                and isinstance(after.value.value, str)
            ):
                docs[this.target.id] = inspect.cleandoc(after.value.value)
    return docs


def _model_in(annotation: Any) -> type[BaseModel] | None:
    """The settings model a field holds (also when optional), if any."""
    for candidate in (annotation, *get_args(annotation)):
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            return candidate
    return None


def unknown_environment(model: type[BaseSettings] = Settings, environ: Any = None) -> list[str]:
    """`AGUI_GATEWAY_*` variables that name no setting (nor the settings file)."""
    environ = os.environ if environ is None else environ
    prefix = str(model.model_config.get("env_prefix") or "").upper()
    known = {env.upper() for _, env, _, _ in setting_fields(model)} | {CONFIG_FILE_ENV}
    return sorted(
        name for name in environ if name.upper().startswith(prefix) and name.upper() not in known
    )


def error_lines(exc: ValidationError, model: type[BaseModel] = Settings) -> list[str]:
    """One line per invalid setting, naming where it came from: its environment variable,
    or the settings file and key.

    A line shows the value it got only when nothing at that place can be a secret (a
    `SecretStr` anywhere in its type, as the model's annotations say): a password written
    as a number, a header given as a list, or a whole block that holds a secret is named,
    never shown; nor is a message that would repeat a secret's value."""
    envs = {dotted: env for dotted, env, _, _ in setting_fields(model)}
    file_name = os.environ.get(CONFIG_FILE_ENV)
    in_file: dict[str, Any] = {}
    if file_name:
        try:
            with open(file_name, "rb") as f:
                in_file = tomllib.load(f)
        except (OSError, tomllib.TOMLDecodeError):
            in_file = {}
    environ = {k.upper() for k in os.environ}
    lines = []
    for error in exc.errors(include_url=False):
        name = ".".join(str(part) for part in error["loc"])
        env = envs.get(name) or envs.get(str(error["loc"][0]) if error["loc"] else "")
        if env and env.upper() in environ:
            where = f"{name} (env {env})"
        elif file_name and _in_file(in_file, error["loc"]):
            where = f"{name} (settings file {file_name}, key {name})"
        elif name:
            where = name
        else:
            where = "(settings)"
        if error["type"] == "extra_forbidden":
            lines.append(f"{where}: no such setting")
            continue
        annotation = _annotation_at(model, error["loc"])
        if not _may_hold_secret(annotation):
            got = f" (got {error['input']!r})" if error["type"] != "missing" else ""
            lines.append(f"{where}: {error['msg']}{got}")
            continue
        message = error["msg"]
        if any(secret in message for secret in _secret_texts(annotation, error["input"])):
            message = "invalid value"
        lines.append(f"{where}: {message} (value not shown: it may hold a secret)")
    return lines


_SECRET_TYPES = (SecretStr, SecretBytes, Secret)


def _is_secret_type(annotation: Any) -> bool:
    target = get_origin(annotation) or annotation
    return isinstance(target, type) and issubclass(target, _SECRET_TYPES)


def _may_hold_secret(annotation: Any, seen: frozenset[type] = frozenset()) -> bool:
    """Whether a value of this type is, or contains, a secret (by the annotations)."""
    if _is_secret_type(annotation):
        return True
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        if annotation in seen:
            return False
        return any(
            _may_hold_secret(field.annotation, seen | {annotation})
            for field in annotation.model_fields.values()
        )
    if annotation is Any:
        return True  # anything could be in it: a secret too
    return any(_may_hold_secret(arg, seen) for arg in get_args(annotation))


def _members(annotation: Any) -> tuple[Any, ...]:
    """The types a union (an optional included) may hold; the type itself otherwise."""
    if get_origin(annotation) in (Union, UnionType):
        return tuple(arg for arg in get_args(annotation) if arg is not type(None))
    return (annotation,)


def _annotation_at(model: type[BaseModel], loc: tuple[Any, ...]) -> Any:
    """The type of what sits at an error's location (field names, dict keys, indices);
    where the path cannot be followed (a union's tag, say), the type it could be
    followed to, which holds whatever sits below it."""
    annotation: Any = model
    for part in loc:
        members = _members(annotation)
        if len(members) != 1:
            return annotation
        (current,) = members
        if isinstance(current, type) and issubclass(current, BaseModel):
            field = current.model_fields.get(str(part)) or next(
                (f for f in current.model_fields.values() if f.alias == part), None
            )
            if field is None:
                return current
            annotation = field.annotation
            continue
        origin, args = get_origin(current), get_args(current)
        if origin in (dict, Mapping) and len(args) == 2:
            annotation = args[1]
        elif origin in (list, set, frozenset, Sequence) and args:
            annotation = args[0]
        elif origin is tuple and args:
            annotation = args[0] if len(args) == 2 and args[1] is Ellipsis else Union[args]  # noqa: UP007
        else:
            return current
    return annotation


def _secret_texts(annotation: Any, value: Any) -> list[str]:
    """The text of every secret in `value`, a value given for `annotation`."""
    if _is_secret_type(annotation) or annotation is Any:
        return _leaf_texts(value)
    texts: list[str] = []
    for member in _members(annotation):
        if isinstance(member, type) and issubclass(member, BaseModel):
            if isinstance(value, dict):
                for name, field in member.model_fields.items():
                    for key in {name, field.alias or name}:
                        if key in value:
                            texts += _secret_texts(field.annotation, value[key])
            continue
        origin, args = get_origin(member), get_args(member)
        if origin in (dict, Mapping) and len(args) == 2 and isinstance(value, dict):
            for item in value.values():
                texts += _secret_texts(args[1], item)
        elif args and isinstance(value, list | tuple | set | frozenset):
            for item in value:
                texts += _secret_texts(Union[args], item)  # noqa: UP007
        elif _may_hold_secret(member) and member is not annotation:
            texts += _secret_texts(member, value)
    return texts


def _leaf_texts(value: Any) -> list[str]:
    if isinstance(value, dict):
        return [text for v in (*value.keys(), *value.values()) for text in _leaf_texts(v)]
    if isinstance(value, list | tuple | set | frozenset):
        return [text for v in value for text in _leaf_texts(v)]
    text = value.get_secret_value() if isinstance(value, _SECRET_TYPES) else value
    return [str(text)] if str(text) else []


def _in_file(data: Any, loc: tuple[Any, ...]) -> bool:
    for part in loc:
        if not isinstance(data, dict) or part not in data:
            return False
        data = data[part]
    return bool(loc)
