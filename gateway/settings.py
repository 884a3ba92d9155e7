"""The one typed settings object.

Read from environment variables prefixed `AGUI_GATEWAY_` and, optionally, a
TOML file named by `AGUI_GATEWAY_CONFIG_FILE` (environment wins). Frozen;
secrets are `SecretStr` and print masked.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

CONFIG_FILE_ENV = "AGUI_GATEWAY_CONFIG_FILE"
_AGENT = "{agent}"


class BridgeAgent(BaseModel):
    """One HTTP AG-UI agent the bridge serves (`agui-gateway bridge`)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    url: str  # where RunAgentInput is POSTed; `{agent}` is replaced by the agent's name
    headers: dict[str, SecretStr] = {}  # extra request headers (e.g. Authorization), masked
    connect_timeout_s: float = Field(default=5.0, gt=0)
    read_timeout_s: float = Field(default=300.0, gt=0)  # longest silence within a stream
    concurrent_runs: int = Field(default=16, ge=1)  # runs in flight for this agent


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="AGUI_GATEWAY_", frozen=True, extra="forbid")

    # --- Kafka connection -------------------------------------------------------------
    bootstrap_servers: str = "127.0.0.1:9092"
    client_id: str = "agui-gateway"
    group_id: str = "agui-gateway"
    security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = "PLAINTEXT"
    sasl_mechanism: str | None = None  # PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, ...
    sasl_plain_username: str | None = None
    sasl_plain_password: SecretStr | None = None
    ssl_cafile: Path | None = None
    ssl_certfile: Path | None = None
    ssl_keyfile: Path | None = None
    ssl_password: SecretStr | None = None

    # --- Topics (templates: {agent} is the agent's name) -----------------------------
    events_topic: str = "agui.{agent}.events"
    requests_topic: str = "agui.{agent}.requests"
    run_requests_topic: str = "agui.{agent}.run-requests"
    changelog_topic: str = "agui.{agent}.gateway-changelog"
    rejections_topic: str = "agui.rejections"
    warnings_topic: str = "agui.warnings"
    agent_name_pattern: str = r"[A-Za-z0-9_-]+"

    # --- Judging ---------------------------------------------------------------------
    strict: bool = False

    # --- Processing ------------------------------------------------------------------
    merge_max_wait_ms: int = Field(
        default=5000, ge=0
    )  # wait for a lagging events side before judging
    poll_timeout_ms: int = Field(default=100, ge=1)
    max_poll_records: int = Field(default=2000, ge=1)
    commit_interval_ms: int = Field(
        default=1000, ge=1
    )  # most delay for offsets of state-neutral records
    transaction_timeout_ms: int = Field(default=60000, ge=1000)
    revoke_timeout_s: float = Field(default=10.0, gt=0)
    discovery_interval_ms: int = Field(
        default=5000, ge=100
    )  # how often new agents' topics are seen
    session_timeout_ms: int = Field(default=10000, ge=1000)
    heartbeat_interval_ms: int = Field(default=2000, ge=100)

    # --- State retention ---------------------------------------------------------------
    thread_retention_s: float = Field(
        default=7 * 24 * 3600, gt=0
    )  # idle threads, no open interrupts
    interrupt_grace_s: float = Field(default=24 * 3600, ge=0)  # kept past the last expiresAt
    interrupt_retention_s: float = Field(default=30 * 24 * 3600, gt=0)  # open interrupts, no expiry
    sweep_interval_s: float = Field(default=10.0, gt=0)

    # --- Warnings ----------------------------------------------------------------------
    warning_burst: int = Field(default=5, ge=1)  # identical warnings per thread before suppression
    warning_window_s: float = Field(default=60.0, gt=0)

    # --- HTTP and logs -----------------------------------------------------------------
    http_host: str = "127.0.0.1"
    http_port: int = Field(default=9464, ge=0, le=65535)
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"

    # --- Agent bridge (agui-gateway bridge) ------------------------------------------------
    bridge_agents: dict[str, BridgeAgent] = {}  # agent name -> its HTTP endpoint
    bridge_agent_pattern: str | None = None  # more agents, by name (regex): served by...
    bridge_default: BridgeAgent | None = None  # ...this endpoint (its url may use {agent})
    bridge_group_id: str = "agui-gateway-bridge"  # also prefixes its transactional ids
    bridge_runs_topic: str = "agui.{agent}.bridge-runs"  # the bridge's run markers (compacted)
    bridge_max_event_bytes: int = Field(default=900_000, ge=1024, le=1_000_000)
    bridge_buffer_bytes: int = Field(default=8 << 20, ge=1)  # per partition, before runs wait
    bridge_pending_requests: int = Field(default=1000, ge=1)  # per partition, before pausing it
    bridge_http_port: int = Field(default=9465, ge=0, le=65535)

    @field_validator("bridge_runs_topic")
    @classmethod
    def _bridge_runs_has_agent(cls, value: str) -> str:
        if value.count(_AGENT) != 1:
            raise ValueError(f"a per-agent topic template must contain {_AGENT} exactly once")
        return value

    @field_validator("events_topic", "requests_topic", "run_requests_topic", "changelog_topic")
    @classmethod
    def _has_agent(cls, value: str) -> str:
        if value.count(_AGENT) != 1:
            raise ValueError(f"a per-agent topic template must contain {_AGENT} exactly once")
        return value

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        config_file = os.environ.get(CONFIG_FILE_ENV)
        if config_file:
            path = Path(config_file)
            if not path.is_file():
                raise FileNotFoundError(f"{CONFIG_FILE_ENV}={config_file}: no such file")
            sources.append(TomlConfigSettingsSource(settings_cls, toml_file=path))
        return tuple(sources)

    # --- derived -------------------------------------------------------------------------

    def topic(self, template: str, agent: str) -> str:
        return template.replace(_AGENT, agent)

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
