import re

import pytest
from pydantic import ValidationError

from gateway.settings import CONFIG_FILE_ENV, Settings


def test_defaults_and_environment(monkeypatch):
    monkeypatch.setenv("AGUI_GATEWAY_BOOTSTRAP_SERVERS", "kafka:9093")
    monkeypatch.setenv("AGUI_GATEWAY_STRICT", "true")
    s = Settings()
    assert s.bootstrap_servers == "kafka:9093" and s.strict is True
    assert s.topic(s.events_topic, "bot") == "agui.bot.events"
    with pytest.raises(ValidationError):
        s.strict = False  # frozen


def test_config_file_is_read_and_environment_wins(monkeypatch, tmp_path):
    path = tmp_path / "gateway.toml"
    path.write_text('group_id = "from-file"\nhttp_port = 9999\n')
    monkeypatch.setenv(CONFIG_FILE_ENV, str(path))
    monkeypatch.setenv("AGUI_GATEWAY_HTTP_PORT", "9100")
    s = Settings()
    assert s.group_id == "from-file" and s.http_port == 9100


def test_missing_config_file_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setenv(CONFIG_FILE_ENV, str(tmp_path / "nope.toml"))
    with pytest.raises(FileNotFoundError, match="nope.toml"):
        Settings()


def test_unknown_settings_are_rejected_not_ignored(monkeypatch, tmp_path):
    path = tmp_path / "gateway.toml"
    path.write_text('bootstrap_server = "typo"\n')
    monkeypatch.setenv(CONFIG_FILE_ENV, str(path))
    with pytest.raises(ValidationError, match="bootstrap_server"):
        Settings()


def test_secrets_are_masked():
    s = Settings(sasl_plain_password="hunter2", ssl_password="p")
    assert "hunter2" not in repr(s) and "hunter2" not in str(s.masked())
    assert s.kafka_security()["sasl_plain_password"] == "hunter2"


def test_templates_need_the_agent_placeholder_once():
    with pytest.raises(ValidationError, match="agent"):
        Settings(events_topic="agui.events")


def test_a_heartbeat_no_shorter_than_the_session_is_refused():
    with pytest.raises(ValidationError, match="heartbeat_interval_ms .6000. must be less"):
        Settings(session_timeout_ms=6000, heartbeat_interval_ms=6000)
    assert Settings(session_timeout_ms=6000, heartbeat_interval_ms=5999).heartbeat_interval_ms


def test_subscription_pattern_matches_events_and_requests_only():
    pattern = re.compile(Settings().subscription_pattern())
    assert pattern.match("agui.billing.events") and pattern.match("agui.billing.requests")
    for other in (
        "agui.billing.run-requests",
        "agui.billing.gateway-changelog",
        "agui.rejections",
        "agui.a.b.events",
    ):
        assert not pattern.match(other)


# --- where settings come from, and their errors ------------------------------------------

from pydantic import BaseModel  # noqa: E402
from pydantic_settings import SettingsConfigDict  # noqa: E402

from gateway.settings import (  # noqa: E402
    SettingsSourceError,
    error_lines,
    setting_fields,
    unknown_environment,
)


def test_every_setting_has_a_description_and_an_environment_variable():
    fields = list(setting_fields())
    assert {name for name, _, _, _ in fields} == set(Settings.model_fields)
    for name, env, _, description in fields:
        assert env == f"AGUI_GATEWAY_{name.upper()}"
        assert description.strip(), f"{name} has no description"


def test_an_environment_variable_naming_no_setting_is_an_error(monkeypatch, tmp_path):
    path = tmp_path / "gateway.toml"
    path.write_text("strict = true\n")
    monkeypatch.setenv(CONFIG_FILE_ENV, str(path))  # names the file: not a setting, no error
    monkeypatch.setenv("AGUI_GATEWAY_STRICT", "false")
    assert Settings().strict is False
    monkeypatch.setenv("AGUI_GATEWAY_BOOTSTRAP_SERVER", "typo:9092")
    with pytest.raises(SettingsSourceError) as raised:
        Settings()
    assert raised.value.lines == [
        "environment variable AGUI_GATEWAY_BOOTSTRAP_SERVER names no setting"
    ]


def test_new_settings_nested_ones_included_are_known_to_the_environment_check():
    class Tls(BaseModel):
        cafile: str | None = None
        """CA file."""

    class Extended(Settings):
        model_config = SettingsConfigDict(env_nested_delimiter="__")
        tls: Tls | None = None
        """TLS, nested."""
        extra_knob: int = 1
        """A new setting."""

    environ = {
        "AGUI_GATEWAY_EXTRA_KNOB": "2",
        "AGUI_GATEWAY_TLS__CAFILE": "/ca.pem",
        "AGUI_GATEWAY_TLS__CAFILES": "/typo.pem",
        "AGUI_GATEWAY_CONFIG_FILE": "x.toml",
        "OTHER": "1",
    }
    assert unknown_environment(Extended, environ) == ["AGUI_GATEWAY_TLS__CAFILES"]
    assert unknown_environment(Settings, environ) == [
        "AGUI_GATEWAY_EXTRA_KNOB",
        "AGUI_GATEWAY_TLS__CAFILE",
        "AGUI_GATEWAY_TLS__CAFILES",
    ]


def test_an_error_in_the_settings_file_names_the_file_and_the_key(monkeypatch, tmp_path):
    path = tmp_path / "gateway.toml"
    path.write_text('bogus = 1\nmerge_max_wait_ms = -1\ngroup_id = "g"\n')
    monkeypatch.setenv(CONFIG_FILE_ENV, str(path))
    with pytest.raises(ValidationError) as raised:
        Settings()
    assert sorted(error_lines(raised.value)) == [
        f"bogus (settings file {path}, key bogus): no such setting",
        f"merge_max_wait_ms (settings file {path}, key merge_max_wait_ms): "
        "Input should be greater than or equal to 0 (got -1)",
    ]
    monkeypatch.setenv("AGUI_GATEWAY_MERGE_MAX_WAIT_MS", "-2")  # the environment wins
    with pytest.raises(ValidationError) as raised:
        Settings()
    assert (
        "merge_max_wait_ms (env AGUI_GATEWAY_MERGE_MAX_WAIT_MS): "
        "Input should be greater than or equal to 0 (got '-2')"
    ) in error_lines(raised.value)


def test_a_settings_file_that_is_not_toml_names_the_file(monkeypatch, tmp_path):
    path = tmp_path / "gateway.toml"
    path.write_text("group_id = \n")
    monkeypatch.setenv(CONFIG_FILE_ENV, str(path))
    with pytest.raises(SettingsSourceError) as raised:
        Settings()
    (line,) = raised.value.lines
    assert line.startswith(f"settings file {path}: not valid TOML: ")


@pytest.mark.parametrize(
    "servers",
    ["kafka:9092", "a:1,b:65535", "[::1]:9092", "10.0.0.1:9092, 10.0.0.2:9092"],
)
def test_bootstrap_servers_as_a_host_port_list(servers):
    assert Settings(bootstrap_servers=servers).bootstrap_servers == servers


@pytest.mark.parametrize(
    "servers", ["kafka", "kafka:", ":9092", "kafka:0", "kafka:70000", "a:1,,b:2", "::1:9092", "k:x"]
)
def test_bootstrap_servers_that_are_not_host_port_are_refused(servers):
    with pytest.raises(ValidationError, match="expected host:port"):
        Settings(bootstrap_servers=servers)


# --- the agent bridge's block ---------------------------------------------------------


def test_bridge_agents_from_the_environment_with_masked_headers(monkeypatch):
    monkeypatch.setenv(
        "AGUI_GATEWAY_BRIDGE_AGENTS",
        '{"payments": {"url": "http://a:8001/", "headers": {"Authorization": "Bearer s3cret"},'
        ' "read_timeout_s": 30}}',
    )
    s = Settings()
    agent = s.bridge_agent("payments")
    assert agent is not None and agent.url == "http://a:8001/" and agent.read_timeout_s == 30
    assert agent.headers["Authorization"].get_secret_value() == "Bearer s3cret"
    assert "s3cret" not in repr(s) and "s3cret" not in str(s.masked())
    assert s.bridge_agent("other") is None


def test_bridge_agents_by_pattern_and_from_the_config_file(monkeypatch, tmp_path):
    path = tmp_path / "gateway.toml"
    path.write_text(
        'bridge_agent_pattern = "lg-.*"\n'
        '[bridge_default]\nurl = "http://agents/{agent}/"\n'
        '[bridge_agents.payments]\nurl = "http://a:8001/"\n'
    )
    monkeypatch.setenv(CONFIG_FILE_ENV, str(path))
    s = Settings()
    assert s.bridge_agent("payments").url == "http://a:8001/"
    assert s.bridge_agent("lg-approvals").url == "http://agents/{agent}/"
    assert s.bridge_agent("xlg-approvals") is None


def test_bridge_settings_are_checked():
    with pytest.raises(ValidationError, match="bridge_runs_topic"):
        Settings(bridge_runs_topic="agui.bridge-runs")
    with pytest.raises(ValidationError, match="concurrent_runs"):
        Settings(bridge_agents={"a": {"url": "http://a/", "concurrent_runs": 0}})
    with pytest.raises(ValidationError, match="unknown"):
        Settings(bridge_agents={"a": {"url": "http://a/", "unknown": 1}})


def test_groups_find_an_agent_by_list_then_pattern_then_an_open_group():
    s = Settings(
        groups={
            "team-a": {"agents": ["pay", "ship"]},
            "team-b": {"agent_pattern": "b-.*", "agents": ["pay"]},
            "rest": {},
        }
    )
    assert s.group_of("pay") == "team-a"  # the first group that lists it
    assert s.group_of("b-7") == "team-b"
    assert s.group_of("other") == "rest"  # an open group takes any legal name
    assert s.owner_of("ship") == "team-a"
    assert Settings().owner_of("ship") == "ship"  # no groups: topics of its own
    assert s.group_allows("team-a", "ship")
    assert not s.group_allows("team-a", "b-7")
    assert s.group_allows("team-b", "b-7")
    assert s.group_allows("rest", "anything")
    assert not s.group_allows("rest", "no/slash")  # not a legal agent name
    assert not s.group_allows("nosuch", "pay")


def test_group_names_and_patterns_are_checked():
    with pytest.raises(ValidationError, match="group name 'a.b'"):
        Settings(groups={"a.b": {}})
    with pytest.raises(ValidationError, match="agent name 'x y'"):
        Settings(groups={"g": {"agents": ["x y"]}})
    with pytest.raises(ValidationError, match="not a regular expression"):
        Settings(groups={"g": {"agent_pattern": "("}})
    with pytest.raises(ValidationError):
        Settings(groups={"g": {"partitions": 0}})


# --- secrets never in a settings error ------------------------------------------------

import json  # noqa: E402
from typing import Any, get_args, get_origin  # noqa: E402

from pydantic import SecretStr, field_validator  # noqa: E402

NUMBER_SECRET = 1786483309117
TEXT_SECRET = "s3cret-7731-marker"


def _planted(annotation: Any) -> list[Any]:
    """Values for `annotation` with a wrongly typed secret (a number, a list, a table) at
    each place the type holds a SecretStr; found from the annotations, so a secret a new
    setting adds is covered too."""
    if annotation is SecretStr:
        return [NUMBER_SECRET, [TEXT_SECRET], {"k": TEXT_SECRET}, 3.5e12]
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [
            {name: value}
            for name, field in annotation.model_fields.items()
            for value in _planted(field.annotation)
        ]
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is dict:
        return [{"key": value} for value in _planted(args[1])]
    if origin is list:
        return [[value] for value in _planted(args[0])]
    return [value for arg in args for value in _planted(arg)]  # a union, an optional


def _members(annotation: Any) -> tuple[Any, ...]:
    return (annotation, *get_args(annotation))


def _toml(value: Any) -> str:
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(k)} = {_toml(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return json.dumps(value)


class _Vault(BaseModel):
    role: str = "r"
    """A role."""
    tokens: list[SecretStr] = []
    """Tokens."""


class _FutureSettings(Settings):
    """Settings as a later version might have them: secrets in new places."""

    api_token: SecretStr | None = None
    """An API token."""
    vaults: dict[str, _Vault] = {}
    """Vaults."""
    vault: _Vault | None = None
    """A vault."""


def _secret_cases(model: type[Settings]) -> list[tuple[str, Any, bool]]:
    """(setting, value, whether the environment can carry it as JSON)."""
    cases = [
        (name, value, isinstance(value, dict | list) and SecretStr not in _members(annotation))
        for name, field in model.model_fields.items()
        for annotation in [field.annotation]
        for value in _planted(annotation)
    ]
    assert cases, "no secret found in the settings"
    return cases


@pytest.mark.parametrize("model", [Settings, _FutureSettings])
def test_no_secret_is_shown_in_a_settings_error(monkeypatch, tmp_path, model):
    names = {name for name, _, _ in _secret_cases(model)}
    if model is Settings:  # today's secrets, found from the annotations
        assert names == {
            "sasl_plain_password",
            "ssl_password",
            "bridge_agents",
            "bridge_default",
            "inbox_token",
        }
    else:
        assert {"api_token", "vaults", "vault"} <= names
    for name, value, as_json in _secret_cases(model):
        sources = [("file", _toml(value))]
        if as_json:  # a structured setting: JSON in the environment
            sources.append(("env", json.dumps(value)))
        for source, text in sources:
            monkeypatch.delenv(CONFIG_FILE_ENV, raising=False)
            monkeypatch.delenv(f"AGUI_GATEWAY_{name.upper()}", raising=False)
            if source == "file":
                path = tmp_path / "gateway.toml"
                path.write_text(f"{name} = {text}\n")
                monkeypatch.setenv(CONFIG_FILE_ENV, str(path))
            else:
                monkeypatch.setenv(f"AGUI_GATEWAY_{name.upper()}", text)
            with pytest.raises(ValidationError) as raised:
                model()
            lines = error_lines(raised.value, model)
            shown = "\n".join(lines)
            assert any(line.startswith(name) for line in lines), (name, source, shown)
            for secret in (str(NUMBER_SECRET), TEXT_SECRET, "3500000000000"):
                assert secret not in shown, (name, source, text, shown)


def test_a_valid_secret_is_not_shown_with_an_error_elsewhere(monkeypatch):
    monkeypatch.setenv("AGUI_GATEWAY_SASL_PLAIN_PASSWORD", TEXT_SECRET)
    monkeypatch.setenv(
        "AGUI_GATEWAY_BRIDGE_DEFAULT",
        json.dumps({"url": "http://a/", "headers": {"Authorization": TEXT_SECRET + "-h"}}),
    )
    monkeypatch.setenv("AGUI_GATEWAY_GROUPS", '{"bad name": {}}')  # a whole-settings error
    with pytest.raises(ValidationError) as raised:
        Settings()
    (line,) = error_lines(raised.value)
    assert "group name 'bad name' does not match agent_name_pattern" in line
    assert TEXT_SECRET not in line


def test_what_cannot_be_a_secret_is_still_shown(monkeypatch):
    monkeypatch.setenv("AGUI_GATEWAY_BRIDGE_DEFAULT", '{"url": 5}')
    with pytest.raises(ValidationError) as raised:
        Settings()
    assert error_lines(raised.value) == [
        "bridge_default.url (env AGUI_GATEWAY_BRIDGE_DEFAULT): "
        "Input should be a valid string (got 5)"
    ]


def test_a_message_repeating_a_secret_is_not_shown(monkeypatch):
    class Echoing(Settings):
        api_token: SecretStr | None = None
        """An API token."""

        @field_validator("api_token")
        @classmethod
        def _echo(cls, value: SecretStr | None) -> SecretStr | None:
            if value is not None:
                raise ValueError(f"token {value.get_secret_value()} is revoked")
            return value

    monkeypatch.setenv("AGUI_GATEWAY_API_TOKEN", TEXT_SECRET)
    with pytest.raises(ValidationError) as raised:
        Echoing()
    assert error_lines(raised.value, Echoing) == [
        "api_token (env AGUI_GATEWAY_API_TOKEN): invalid value "
        "(value not shown: it may hold a secret)"
    ]


def test_masked_hides_every_secret_nested_ones_and_new_ones_included():
    agent = {"url": "http://a/", "headers": {"Authorization": TEXT_SECRET}}
    vault = {"tokens": [TEXT_SECRET]}
    s = _FutureSettings(
        sasl_plain_password=TEXT_SECRET,
        ssl_password=TEXT_SECRET,
        bridge_agents={"a": agent},
        bridge_default=agent,
        api_token=TEXT_SECRET,
        vaults={"v": vault},
        vault=vault,
    )
    assert s.vault is not None and s.vault.tokens[0].get_secret_value() == TEXT_SECRET
    for shown in (json.dumps(s.masked()), repr(s), str(s)):
        assert TEXT_SECRET not in shown
