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
