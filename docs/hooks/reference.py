"""The docs site's reference, generated from the code at build time (an MkDocs hook).

A page asks for a generated part with a marker on a line of its own:

    <!-- generated: settings -->

and the hook replaces it with Markdown built from the code: the settings model, the
public codes and their meanings, the metrics registries, the command line parser, the
record schemas, the alert rules and the benchmark's result files. A part that cannot be
written whole (a setting, code, metric, option or alert without a meaning) fails the
build with the names that lack one, so the reference never goes out incomplete.

The functions are plain Python (`tests/docs` imports this file and calls them).
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Callable, Iterable, Iterator
from enum import Enum
from pathlib import Path
from typing import Any, NamedTuple

ROOT = Path(__file__).resolve().parents[2]
MARKER = re.compile(r"^<!-- generated: ([a-z0-9_:-]+) -->$", re.MULTILINE)


class Undocumented(ValueError):
    """Something public has no meaning written."""


def _cell(text: object) -> str:
    """Text fit for one Markdown table cell."""
    return " ".join(str(text).split()).replace("|", "\\|")


def _code(text: object) -> str:
    shown = str(text)
    tick = "``" if "`" in shown else "`"
    pad = " " if tick == "``" else ""
    return f"{tick}{pad}{shown}{pad}{tick}"


def _table(header: Iterable[str], rows: Iterable[Iterable[object]]) -> str:
    head = list(header)
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(_cell(value) for value in row) + " |" for row in rows]
    return "\n".join(lines)


def _missing(what: str, names: list[str]) -> None:
    if names:
        raise Undocumented(f"{what} without a meaning: {', '.join(sorted(names))}")


# --- settings ------------------------------------------------------------------------


def _type_name(annotation: Any) -> str:
    text = getattr(annotation, "__name__", None) if isinstance(annotation, type) else None
    if text is None:
        text = str(annotation)
    text = re.sub(r"\b(?:typing|pydantic\.types|pathlib|gateway\.settings)\.", "", text)
    text = text.replace("NoneType", "None")
    text = re.sub(r"Literal\[(.*)\]", lambda m: " | ".join(m.group(1).split(", ")), text)
    # "or", not "|": a table cell's code span would show the escaped pipe's backslash
    return text.replace(" | ", " or ")


def _default(field: Any) -> str:
    factory = field.default_factory
    if factory is not None:
        name = getattr(factory, "__name__", "")
        if name == "gethostname":
            return "the host name"
        return _code(factory())
    default = field.get_default()
    if default is None:
        return "none"
    if isinstance(default, str | int | float | bool | list | dict):
        return _code(json.dumps(default) if not isinstance(default, str) else default)
    return _code(default)


def settings() -> str:
    """Every setting of `gateway/settings.py`: name, environment variable, type, default,
    meaning; then the fields of the nested models (a bridge endpoint, an agent group, an
    approver rule)."""
    from gateway.settings import (
        AgentGroup,
        ApproverSetting,
        BridgeAgent,
        Settings,
        field_docs,
        setting_fields,
    )

    fields = Settings.model_fields
    rows, missing = [], []
    for name, env, _default_value, description in setting_fields():
        top = name.split(".")[0]
        field = fields[top]
        if not description.strip():
            missing.append(name)
        rows.append(
            (
                _code(name),
                _code(env),
                _code(_type_name(field.annotation)),
                _default(field),
                description,
            )
        )
    parts = [_table(("setting", "environment variable", "type", "default", "meaning"), rows)]
    for model, title in (
        (BridgeAgent, "A bridge endpoint (`bridge_agents` values, `bridge_default`)"),
        (AgentGroup, "An agent group (`groups` values)"),
        (ApproverSetting, "An approver rule (`approvers` items)"),
    ):
        nested = []
        docs = field_docs(model)
        for name, field in model.model_fields.items():
            if not docs.get(name, "").strip():
                missing.append(f"{model.__name__}.{name}")
            nested.append(
                (
                    _code(name),
                    _code(_type_name(field.annotation)),
                    "required" if field.is_required() else _default(field),
                    docs.get(name, ""),
                )
            )
        parts.append(f"### {title}\n\n" + (model.__doc__ or "").strip().replace("\n    ", " "))
        parts.append(_table(("field", "type", "default", "meaning"), nested))
    _missing("settings", missing)
    return "\n\n".join(parts)


# --- codes ---------------------------------------------------------------------------


def code_tables() -> dict[str, tuple[type[Enum], dict[Any, str]]]:
    from gateway.core.values import meanings
    from gateway.core.values.codes import Reason, Rule, Verdict, Warn

    return {
        "verdict": (Verdict, dict(meanings.VERDICTS)),
        "rejection reason": (Reason, dict(meanings.REASONS)),
        "warning code": (Warn, dict(meanings.WARNINGS)),
        "violation `rule`": (Rule, dict(meanings.RULES)),
    }


def undocumented_codes() -> list[str]:
    """Codes with no meaning, and meanings that name no code of their enum."""
    problems = []
    for _, (enum, table) in code_tables().items():
        problems += [f"{enum.__name__}.{m.name}" for m in enum if not table.get(m, "").strip()]
        problems += [
            f"{enum.__name__}: {key!r} (no such code)" for key in table if not isinstance(key, enum)
        ]
    return problems


def codes() -> str:
    """A table per enum of `gateway/core/values/codes.py`, every member with its meaning."""
    _missing("codes", undocumented_codes())
    parts = []
    for title, (enum, table) in code_tables().items():
        parts.append(_table((title, "when"), ((_code(m.value), table[m]) for m in enum)))
    return "\n\n".join(parts)


# --- metrics -------------------------------------------------------------------------


class MetricDoc(NamedTuple):
    name: str
    kind: str
    labels: tuple[str, ...]
    help: str


def _walk(registry: Any) -> Iterator[MetricDoc]:
    """Every metric family a registry holds, read from its collectors (labels included
    for families that have no sample yet)."""
    from prometheus_client import Info
    from prometheus_client.metrics import MetricWrapperBase

    for collector in list(registry._collector_to_names):
        if isinstance(collector, Info):
            labels = tuple(
                sorted(
                    {
                        key
                        for metric in collector.collect()
                        for s in metric.samples
                        for key in s.labels
                    }
                )
            )
            yield MetricDoc(collector._name + "_info", "info", labels, collector._documentation)
        elif isinstance(collector, MetricWrapperBase):
            name = collector._name + ("_total" if collector._type == "counter" else "")
            yield MetricDoc(
                name, collector._type, tuple(collector._labelnames), collector._documentation
            )
        else:
            for family in collector.describe():
                labels = tuple(getattr(family, "_labelnames", ()))
                yield MetricDoc(family.name, family.type, labels, family.documentation)


def metric_docs() -> dict[str, list[tuple[MetricDoc, tuple[str, ...]]]]:
    """The gateway's (with the labels kept under the default `dashboard` policy), the
    bridge's, the edge's and the inbox's metrics, each read from a registry built as the service does."""
    from prometheus_client import CollectorRegistry

    from gateway.bridge.metrics import BridgeMetrics
    from gateway.edge.metrics import EdgeMetrics
    from gateway.inbox.reader import InboxMetrics
    from gateway.inbox.view import InboxView
    from gateway.observe.detail import AgentDetail
    from gateway.observe.metrics import Metrics

    def build(make: Callable[[CollectorRegistry], object]) -> list[MetricDoc]:
        registry = CollectorRegistry()
        make(registry)
        return sorted(_walk(registry), key=lambda m: m.name)

    full = build(lambda r: Metrics(r, AgentDetail.FULL))
    dashboard = {m.name: m.labels for m in build(lambda r: Metrics(r, AgentDetail.DASHBOARD))}
    return {
        "gateway": [(m, dashboard.get(m.name, m.labels)) for m in full],
        "bridge": [(m, m.labels) for m in build(BridgeMetrics)],
        "edge": [(m, m.labels) for m in build(EdgeMetrics)],
        "inbox": [(m, m.labels) for m in build(lambda r: InboxMetrics(r, InboxView(1)))],
    }


def metrics(which: str) -> str:
    docs = metric_docs()[which]
    _missing("metrics", [m.name for m, _ in docs if not m.help.strip()])
    rows = []
    for metric, kept in docs:
        labels = ", ".join(
            label if label in kept or which != "gateway" else f"*{label}*"
            for label in metric.labels
        )
        rows.append((_code(metric.name), metric.kind, labels, metric.help))
    return _table(("metric", "type", "labels", "meaning"), rows)


# --- the command line ----------------------------------------------------------------


def _commands(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser, str]]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
            for name, sub in action.choices.items():
                here = (*path, name)
                if any(isinstance(a, argparse._SubParsersAction) for a in sub._actions):
                    yield here, sub, helps.get(name, "")
                    yield from _commands(sub, here)
                else:
                    yield here, sub, helps.get(name, "")


def _options(parser: argparse.ArgumentParser) -> Iterator[tuple[str, str, str, str]]:
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction | argparse._SubParsersAction):
            continue
        names = ", ".join(action.option_strings) or action.dest
        if action.nargs == 0:
            shown = names
        else:
            shown = f"{names} {action.metavar or action.dest.upper()}"
        if action.required:
            default = "required"
        elif action.default in (None, False, argparse.SUPPRESS) or action.nargs == 0:
            default = ""
        else:
            default = _code(action.default)
        yield shown, default, action.help or "", action.dest


def undocumented_options() -> list[str]:
    from gateway.cli import _parser

    problems = []
    for path, sub, help_text in _commands(_parser()):
        if not (help_text or sub.description or "").strip():
            problems.append(" ".join(path))
        problems += [
            f"{' '.join(path)} {shown}" for shown, _, text, _ in _options(sub) if not text.strip()
        ]
    return problems


def cli() -> str:
    """Every command of `agui-gateway` (from `gateway/cli.py`'s parser) with its options."""
    from gateway.cli import _parser

    _missing("command line options", undocumented_options())
    parts = []
    for path, sub, help_text in _commands(_parser()):
        if any(isinstance(a, argparse._SubParsersAction) for a in sub._actions):
            continue
        usage = " ".join(sub.format_usage().split())
        usage = usage.removeprefix("usage: ")
        parts.append(f"### `agui-gateway {' '.join(path)}`")
        parts.append(_cell(help_text[:1].upper() + help_text[1:]) + ".")
        if sub.description and sub.description.strip() != help_text.strip():
            parts.append(_cell(sub.description))
        parts.append(f"```\n{usage}\n```")
        options = [(_code(o), d, h) for o, d, h, _ in _options(sub)]
        if options:
            parts.append(_table(("option", "default", "meaning"), options))
        if path == ("run",):
            parts.append(
                "Its settings: [Settings](settings.md) (`agui-gateway run --help` "
                "prints the same list)."
            )
    return "\n\n".join(parts)


# --- record schemas ------------------------------------------------------------------


def _json_type(spec: dict[str, Any]) -> str:
    if "const" in spec:
        return _code(json.dumps(spec["const"]))
    if "enum" in spec:
        return "one of " + ", ".join(_code(v) for v in spec["enum"])
    if "$ref" in spec:
        return spec["$ref"].rsplit("/", 1)[-1]
    if "oneOf" in spec or "anyOf" in spec:
        return " or ".join(_json_type(s) for s in spec.get("oneOf", spec.get("anyOf", [])))
    kind = spec.get("type", "any JSON")
    if isinstance(kind, list):
        kind = " or ".join(kind)
    if kind == "array" and isinstance(spec.get("items"), dict):
        kind = f"array of {_json_type(spec['items'])}"
    return str(kind)


def _object_table(spec: dict[str, Any]) -> str:
    required = set(spec.get("required", []))
    rows = [
        (
            _code(name),
            "yes" if name in required else "",
            _json_type(member),
            member.get("description", ""),
        )
        for name, member in spec.get("properties", {}).items()
    ]
    return _table(("member", "required", "type", "description"), rows)


def _avro_type(kind: Any) -> str:
    if isinstance(kind, list):
        return " or ".join(_avro_type(k) for k in kind)
    if isinstance(kind, dict):
        if kind.get("type") == "array":
            return f"array of {_avro_type(kind['items'])}"
        return str(kind.get("name", kind.get("type")))
    return str(kind)


def _avro_records(schema: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield schema
    for field in schema.get("fields", []):
        stack = [field["type"]]
        while stack:
            kind = stack.pop()
            if isinstance(kind, list):
                stack += kind
            elif isinstance(kind, dict):
                if kind.get("type") == "record":
                    yield from _avro_records(kind)
                elif kind.get("type") == "array":
                    stack.append(kind["items"])


def schemas() -> str:
    """The JSON Schemas of the records the gateway writes, and the changelog's Avro
    schemas (versions 1-3), from `schemas/`."""
    parts = []
    for path in sorted((ROOT / "schemas").glob("*.schema.json")):
        schema = json.loads(path.read_text())
        parts.append(f"### {schema.get('title', path.stem)}: `schemas/{path.name}`")
        parts.append(_cell(schema.get("description", "")))
        if "oneOf" in schema or "anyOf" in schema:
            parts.append("One of: " + _json_type(schema) + ".")
        if "properties" in schema:
            parts.append(_object_table(schema))
        for name, spec in schema.get("$defs", {}).items():
            if "properties" in spec:
                parts.append(f"`{name}`: {_cell(spec.get('description', ''))}")
                parts.append(_object_table(spec))
    for path in sorted((ROOT / "schemas").glob("*.avsc")):
        schema = json.loads(path.read_text())
        parts.append(f"### Changelog, Avro: `schemas/{path.name}`")
        parts.append(_cell(schema.get("doc", "")))
        for record in _avro_records(schema):
            rows = [
                (_code(f["name"]), _avro_type(f["type"]), f.get("doc", ""))
                for f in record.get("fields", [])
            ]
            parts.append(f"Record `{record['name']}`:")
            parts.append(_table(("field", "type", "doc"), rows))
    return "\n\n".join(parts)


# --- alerts --------------------------------------------------------------------------


def alert_rules() -> list[dict[str, Any]]:
    import yaml

    loaded = yaml.safe_load((ROOT / "deploy/prometheus/alerts.yml").read_text())
    return [rule for group in loaded["groups"] for rule in group["rules"] if "alert" in rule]


def alert(name: str) -> str:
    """One alert rule of `deploy/prometheus/alerts.yml`: severity, delay, what it says,
    its expression."""
    rules = {rule["alert"]: rule for rule in alert_rules()}
    if name not in rules:
        raise Undocumented(f"no alert named {name} in deploy/prometheus/alerts.yml")
    rule = rules[name]
    notes = rule.get("annotations", {})
    if not str(notes.get("description", "")).strip():
        raise Undocumented(f"alert {name} without a description")
    severity = rule.get("labels", {}).get("severity", "none")
    held = f", after {rule['for']}" if "for" in rule else ", at once"
    return "\n\n".join(
        (
            f"**Severity** {severity}{held}. **Says** “{_cell(notes.get('summary', ''))}”.",
            _cell(notes["description"]),
            f"```promql\n{rule['expr'].strip()}\n```",
        )
    )


# --- benchmark results ---------------------------------------------------------------


class Measured(NamedTuple):
    figure: str
    value: str
    target: str
    met: str
    date: str
    source: str


def _reports(text: str) -> Iterator[tuple[str, list[list[str]]]]:
    """Each report in a result file (a run's Markdown summary): its date and the rows
    of its headline table."""
    for chunk in re.split(r"^# agui-gateway benchmark", text, flags=re.MULTILINE)[1:]:
        date = re.search(r"^- Date: (\S+)", chunk, re.MULTILINE)
        table = re.search(r"^## Headline figures\n\n(.*?)(?:\n\n|\Z)", chunk, re.S | re.M)
        if not date or not table:
            continue
        rows = [
            [cell.strip() for cell in line.strip().strip("|").split("|")]
            for line in table.group(1).splitlines()[2:]
        ]
        yield date.group(1), [row for row in rows if len(row) >= 4]


def current_figures(results: Path | None = None) -> list[Measured]:
    """Each headline figure at its latest measurement across the result files."""
    results = results or ROOT / "bench/results"
    latest: dict[str, Measured] = {}
    for path in sorted([*results.glob("*.md"), *results.glob("*.log")]):
        for date, rows in _reports(path.read_text(errors="replace")):
            for row in rows:
                figure, value, target, met = row[:4]
                key = figure.split("; ")[0]  # a note after the label is the same figure
                seen = latest.get(key)
                if (
                    seen is None
                    or date > seen.date
                    or (date == seen.date and path.suffix == ".log")
                ):
                    latest[key] = Measured(figure, value, target, met, date, path.name)
    return sorted(latest.values(), key=lambda m: m.figure)


def bench_results() -> str:
    figures = current_figures()
    if not figures:
        raise Undocumented("no benchmark report found in bench/results/")
    rows = [
        (m.figure, m.value, m.target, m.met.replace("**", "").lower(), m.date[:10], _code(m.source))
        for m in figures
    ]
    return _table(("figure", "value", "target", "met", "measured", "result file"), rows)


# --- the hook ------------------------------------------------------------------------

PARTS: dict[str, Callable[[], str]] = {
    "settings": settings,
    "codes": codes,
    "metrics:gateway": lambda: metrics("gateway"),
    "metrics:bridge": lambda: metrics("bridge"),
    "metrics:edge": lambda: metrics("edge"),
    "metrics:inbox": lambda: metrics("inbox"),
    "cli": cli,
    "schemas": schemas,
    "bench-results": bench_results,
}


def render(markdown: str) -> str:
    """The page with each marker replaced by its generated part."""

    def part(match: re.Match[str]) -> str:
        name = match.group(1)
        if name.startswith("alert:"):
            return alert(name.removeprefix("alert:"))
        if name not in PARTS:
            raise Undocumented(f"unknown generated part {name!r}")
        return PARTS[name]()

    return MARKER.sub(part, markdown)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    from mkdocs.exceptions import PluginError

    try:
        return render(markdown)
    except Undocumented as exc:
        raise PluginError(f"{page.file.src_uri}: {exc}") from exc
