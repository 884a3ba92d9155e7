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

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

CONFIG_FILE_ENV = "AGUI_GATEWAY_CONFIG_FILE"
_AGENT = "{agent}"


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

    # --- The edge (`agui-gateway edge`: AG-UI over HTTP, backed by Kafka) ----------------
    edge_host: str = "127.0.0.1"
    edge_port: int = Field(default=8000, ge=0, le=65535)
    edge_reply_topic: str = "agui.edge-replies"  # created at start if missing; may be shared
    edge_reply_partitions: int = Field(default=3, ge=1)  # when the edge creates it
    edge_verdict_timeout_s: float = Field(default=10.0, gt=0)  # then 504
    edge_run_start_timeout_s: float = Field(default=60.0, gt=0)  # forward to RUN_STARTED
    edge_run_timeout_s: float = Field(default=900.0, gt=0)  # forward to the run's close
    edge_keepalive_s: float = Field(default=15.0, gt=0)  # SSE comment while waiting
    edge_max_streams: int = Field(default=10_000, ge=1)  # open streams; beyond: 503
    edge_stream_buffer: int = Field(default=10_000, ge=1)  # unread events per stream
    edge_max_body_bytes: int = Field(default=1_000_000, ge=1)
    edge_cors_origins: list[str] = []  # e.g. ["https://app.example"]; ["*"] allows any

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

    def masked(self) -> dict[str, Any]:
        """Every setting, secrets masked: what the gateway logs at start."""
        return self.model_dump(mode="json")
