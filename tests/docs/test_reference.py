"""The reference pages are generated from the code, and every public thing in them has
its meaning written: settings, codes, metrics, command line options, alerts."""

from __future__ import annotations

import argparse
import re

import pytest
from prometheus_client import CollectorRegistry, Counter

import gateway.cli
from gateway.core.values import meanings
from gateway.core.values.codes import Reason, Rule, Verdict, Warn
from gateway.settings import AgentGroup, BridgeAgent, Settings, field_docs, setting_fields
from tests.docs.hook import ROOT, load

ref = load()


def test_every_code_has_a_meaning_and_every_meaning_a_code():
    assert ref.undocumented_codes() == []
    page = ref.render("<!-- generated: codes -->")
    for enum in (Verdict, Reason, Warn, Rule):
        for member in enum:
            assert f"| `{member.value}` |" in page, member


def test_a_code_without_a_meaning_fails_the_generation(monkeypatch):
    reasons = dict(meanings.REASONS)
    del reasons[Reason.EVENTS_LAGGING]
    monkeypatch.setattr(meanings, "REASONS", reasons)
    assert ref.undocumented_codes() == ["Reason.EVENTS_LAGGING"]
    with pytest.raises(ref.Undocumented, match="EVENTS_LAGGING"):
        ref.codes()


def test_a_meaning_naming_no_code_fails_the_generation(monkeypatch):
    monkeypatch.setattr(meanings, "RULES", {**meanings.RULES, "no_such_rule": "never"})
    assert ref.undocumented_codes() == ["Rule: 'no_such_rule' (no such code)"]


def test_every_setting_is_listed_with_its_variable_type_default_and_meaning():
    page = ref.render("<!-- generated: settings -->")
    for name, env, _, description in setting_fields():
        row = next(line for line in page.splitlines() if line.startswith(f"| `{name}` |"))
        assert f"`{env}`" in row
        assert " ".join(description.split()).replace("|", "\\|") in row
    for model in (BridgeAgent, AgentGroup):
        for name in model.model_fields:
            assert field_docs(model).get(name, "").strip(), f"{model.__name__}.{name}"
            assert f"| `{name}` |" in page
    assert "| `instance_name` | `AGUI_GATEWAY_INSTANCE_NAME` | `str` | the host name |" in page
    assert set(Settings.model_fields) <= {name for name, *_ in setting_fields()}


def test_every_metric_of_each_registry_is_listed_with_its_help():
    docs = ref.metric_docs()
    for which, metrics in docs.items():
        assert metrics, which
        page = ref.render(f"<!-- generated: metrics:{which} -->")
        for metric, _ in metrics:
            assert metric.help.strip(), metric.name
            assert f"| `{metric.name}` | {metric.kind} |" in page
    names = {m.name for m, _ in docs["gateway"]}
    assert {
        "agui_gateway_requests_total",
        "agui_gateway_threads",
        "agui_gateway_build_info",
    } <= names
    # the label policy: under `dashboard` the counters lose `agent`, the state gauges keep it
    page = ref.render("<!-- generated: metrics:gateway -->")
    assert "| `agui_gateway_requests_total` | counter | *agent*, verdict |" in page
    assert "| `agui_gateway_threads` | gauge | agent |" in page


def test_a_metric_without_help_is_found():
    registry = CollectorRegistry()
    Counter("agui_gateway_undocumented", "", ["agent"], registry=registry)
    (metric,) = ref._walk(registry)
    assert metric.name == "agui_gateway_undocumented_total"
    assert metric.labels == ("agent",) and metric.help == ""


def test_every_command_and_option_has_help_and_is_listed():
    assert ref.undocumented_options() == []
    page = ref.render("<!-- generated: cli -->")
    for command in ("check", "run", "demo", "bridge", "edge", "topics create", "acls"):
        assert f"### `agui-gateway {command}`" in page
    for option in ("--events", "--strict", "--real-agent", "--shared-partitions", "--apply"):
        assert f"`{option}" in page


def test_an_option_without_help_fails_the_generation(monkeypatch):
    def parser() -> argparse.ArgumentParser:
        top = argparse.ArgumentParser(prog="agui-gateway")
        commands = top.add_subparsers(dest="command")
        run = commands.add_parser("run", help="run it")
        run.add_argument("--quiet", action="store_true")
        return top

    monkeypatch.setattr(gateway.cli, "_parser", parser)
    assert ref.undocumented_options() == ["run --quiet"]
    with pytest.raises(ref.Undocumented, match="run --quiet"):
        ref.cli()


def test_every_record_schema_and_member_is_listed():
    import json

    page = ref.render("<!-- generated: schemas -->")
    for path in sorted((ROOT / "schemas").glob("*.schema.json")):
        assert f"`schemas/{path.name}`" in page
        for member in json.loads(path.read_text()).get("properties", {}):
            assert f"| `{member}` |" in page
    for path in sorted((ROOT / "schemas").glob("*.avsc")):
        assert f"`schemas/{path.name}`" in page


def test_every_alert_has_its_section_and_what_to_do():
    page = (ROOT / "docs" / "operations" / "alerts.md").read_text()
    rules = [rule["alert"] for rule in ref.alert_rules()]
    assert rules
    documented = re.findall(r"^<!-- generated: alert:(\w+) -->$", page, re.MULTILINE)
    assert sorted(documented) == sorted(rules)
    for name in rules:
        section = page.split(f"## {name}\n", 1)[1].split("\n## ", 1)[0]
        assert "**What to do.**" in section, name
    with pytest.raises(ref.Undocumented, match="NoSuchAlert"):
        ref.alert("NoSuchAlert")


REPORT = """# agui-gateway benchmark (full)

- Date: {date}
- Command: `python -m bench`

## Headline figures

| Figure | Value | Target | Met | Measured as |
|---|---|---|---|---|
| Decisions: gateway ÷ copy | {value} | >= 0.7 | **NOT met** | best of 3 |
| Memory per idle thread | 252 B | <= 256 | met | RSS |

## Supporting figures
"""


def test_the_current_figures_are_each_figures_latest_measurement(tmp_path):
    (tmp_path / "latest.md").write_text(
        REPORT.format(date="2026-12-01T09:00:00+00:00", value="0.5")
    )
    (tmp_path / "run.log").write_text(
        "noise\n" + REPORT.format(date="2026-12-02T10:00:00+00:00", value="0.6")
    )
    (tmp_path / "old.log").write_text(REPORT.format(date="2026-11-30T10:00:00+00:00", value="0.1"))
    figures = {m.figure: m for m in ref.current_figures(tmp_path)}
    assert figures["Decisions: gateway ÷ copy"].value == "0.6"
    assert figures["Decisions: gateway ÷ copy"].source == "run.log"
    assert figures["Memory per idle thread"].date.startswith("2026-12-02")
    assert len(figures) == 2


def test_the_current_figures_come_from_the_result_files():
    page = ref.render("<!-- generated: bench-results -->")
    assert "Event ingest: gateway ÷ raw consumer" in page
    assert "Fleet of 1,000 agents" in page
