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
