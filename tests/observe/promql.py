"""Reading metric names out of PromQL, and the expressions out of our deploy files.

Not a PromQL parser: a tokenizer that is exact about the places where a bare
identifier is NOT a metric name (functions and aggregations, label names in
`{...}` and in `by`/`without`/`on`/`ignoring`/`group_*` lists, keywords,
durations and strings), so every other identifier is taken for a metric name.
`promtool check rules` is the syntax check; this is the vocabulary check.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = REPO_ROOT / "deploy" / "grafana" / "dashboards" / "agui-gateway.json"
ALERTS = REPO_ROOT / "deploy" / "prometheus" / "alerts.yml"
ALERTS_TEST = REPO_ROOT / "deploy" / "prometheus" / "alerts_test.yml"
PROMETHEUS_YML = REPO_ROOT / "deploy" / "prometheus" / "prometheus.yml"

AGGREGATIONS = frozenset(
    {
        "sum",
        "min",
        "max",
        "avg",
        "group",
        "stddev",
        "stdvar",
        "count",
        "count_values",
        "bottomk",
        "topk",
        "quantile",
        "limitk",
        "limit_ratio",
    }
)
KEYWORDS = frozenset(
    {"and", "or", "unless", "atan2", "bool", "offset", "inf", "nan", "start", "end"}
)
LABEL_LISTS = frozenset({"by", "without", "on", "ignoring", "group_left", "group_right"})

# Grafana's variables: `$name`, `${name}`, `${name:format}`, `[[name]]`.
_GRAFANA_VAR = re.compile(r"\$\{[^}]*\}|\$[A-Za-z_][A-Za-z0-9_]*|\[\[[^\]]*\]\]")
_STRING_OR_VAR = re.compile(
    r"""(?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`)|""" + _GRAFANA_VAR.pattern
)
_TOKEN = re.compile(
    r"""
    (?P<space>\s+)
  | (?P<comment>\#[^\n]*)
  | (?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`)
  | (?P<number>(?:0x[0-9a-fA-F]+|\d+(?:\.\d*)?(?:[eE][+-]?\d+)?|\.\d+)(?:[a-zA-Z]+\d*)*)
  | (?P<ident>[A-Za-z_:][A-Za-z0-9_:]*)
  | (?P<op>=~|!~|!=|==|<=|>=|[-+*/%^<>=,(){}\[\]@])
    """,
    re.VERBOSE,
)


@dataclass(frozen=True)
class Token:
    kind: str
    text: str


class PromQLTokenError(ValueError):
    pass


def substitute_grafana_variables(expr: str) -> str:
    """Replace Grafana variables with a harmless duration so the text tokenizes as PromQL.

    Variables inside strings (label matcher values) are kept as they are; outside
    strings they can only stand for durations or numbers.
    """
    return _STRING_OR_VAR.sub(lambda m: m.group() if m.group("string") else "5m", expr)


def tokenize(expr: str) -> list[Token]:
    tokens: list[Token] = []
    pos = 0
    while pos < len(expr):
        match = _TOKEN.match(expr, pos)
        if match is None:
            raise PromQLTokenError(f"cannot tokenize {expr[pos : pos + 20]!r} in {expr!r}")
        kind = match.lastgroup
        assert kind is not None
        if kind not in ("space", "comment"):
            tokens.append(Token(kind, match.group()))
        pos = match.end()
    return tokens


@dataclass(frozen=True)
class Selector:
    """A metric name as used in an expression, with its label matchers' text."""

    name: str
    matchers: str  # the text between `{` and `}`, "" if there are none


def selectors(expr: str) -> list[Selector]:
    """Every metric name `expr` selects, in order of appearance."""
    tokens = tokenize(substitute_grafana_variables(expr))
    found: list[Selector] = []
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        nxt = tokens[i + 1] if i + 1 < len(tokens) else None
        if tok.kind == "op" and tok.text == "{":
            i = _skip_to(tokens, i, "{", "}")  # a bare `{...}` selector: label names only
            continue
        if tok.kind == "op" and tok.text == "[":
            i = _skip_to(tokens, i, "[", "]")  # a range or a subquery's step: durations
            continue
        if tok.kind != "ident":
            i += 1
            continue
        lowered = tok.text.lower()
        if lowered in LABEL_LISTS:
            # `by (a, b)`, `on (a)`, `group_left (a)`: labels; a bare group_left has none
            if nxt is not None and nxt.text == "(":
                i = _skip_to(tokens, i + 1, "(", ")")
            else:
                i += 1
            continue
        if lowered in AGGREGATIONS or lowered in KEYWORDS:
            i += 1
            continue
        if nxt is not None and nxt.text == "(":
            i += 1  # a function call: its arguments are read as they come
            continue
        matchers = ""
        if nxt is not None and nxt.text == "{":
            end = _skip_to(tokens, i + 1, "{", "}")
            matchers = "".join(t.text for t in tokens[i + 2 : end - 1])
            i = end
        else:
            i += 1
        found.append(Selector(tok.text, matchers))
    return found


def metric_names(expr: str) -> set[str]:
    return {s.name for s in selectors(expr)}


def _skip_to(tokens: list[Token], start: int, open_: str, close: str) -> int:
    """Index after the `close` that balances the `open_` at `start`."""
    depth = 0
    for j in range(start, len(tokens)):
        if tokens[j].text == open_:
            depth += 1
        elif tokens[j].text == close:
            depth -= 1
            if depth == 0:
                return j + 1
    raise PromQLTokenError(f"unbalanced {open_!r}: {' '.join(t.text for t in tokens)}")


# --- where the expressions live -------------------------------------------------------


def load_dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text())


def dashboard_panels(dashboard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every panel, rows' nested panels included (rows themselves too)."""
    for panel in dashboard.get("panels", []):
        yield panel
        yield from panel.get("panels", [])


_LABEL_VALUES = re.compile(r"^\s*label_values\(\s*(?:(?P<expr>.+?)\s*,\s*)?(?P<label>\w+)\s*\)\s*$")
_QUERY_RESULT = re.compile(r"^\s*query_result\((?P<expr>.*)\)\s*$", re.S)


def variable_expression(query: str) -> str | None:
    """The PromQL inside a Grafana Prometheus variable query, or None (label_names(), ...)."""
    match = _LABEL_VALUES.match(query)
    if match:
        return match.group("expr")
    match = _QUERY_RESULT.match(query)
    if match:
        return match.group("expr")
    if re.match(r"^\s*(label_names|metrics)\(", query):
        return None
    return query


def dashboard_expressions(dashboard: dict[str, Any]) -> list[tuple[str, str]]:
    """(where, PromQL) for every panel target and every query variable."""
    out: list[tuple[str, str]] = []
    for panel in dashboard_panels(dashboard):
        for target in panel.get("targets", []):
            if "expr" in target:
                out.append((f"panel {panel.get('title')!r} {target.get('refId')}", target["expr"]))
    for variable in dashboard.get("templating", {}).get("list", []):
        if variable.get("type") != "query":
            continue
        query = variable.get("query")
        text = query.get("query") if isinstance(query, dict) else query
        expr = variable_expression(text or "")
        if expr:
            out.append((f"variable {variable['name']!r}", expr))
    return out


_RULE = re.compile(r"^(?P<indent>\s*)-\s+(?P<kind>alert|record):\s*(?P<name>\S+)\s*$")
_EXPR = re.compile(r"^(?P<indent>\s*)expr:\s*(?P<value>.*?)\s*$")


def rule_expressions(text: str | None = None) -> list[tuple[str, str]]:
    """(where, PromQL) for every rule of deploy/prometheus/alerts.yml.

    The project has no YAML library, so this reads the subset of YAML the rules
    file is written in: `- alert: NAME` / `- record: NAME` items, each with an
    `expr:` that is inline or a `|` / `>` block scalar. The tests cross-check
    the count against promtool's and the text against what Prometheus loaded.
    """
    text = ALERTS.read_text() if text is None else text
    lines = text.splitlines()
    out: list[tuple[str, str]] = []
    name: str | None = None
    i = 0
    while i < len(lines):
        line = lines[i]
        rule = _RULE.match(line)
        if rule:
            name = f"{rule.group('kind')} {rule.group('name')}"
            i += 1
            continue
        expr = _EXPR.match(line)
        if expr and name is not None:
            value = expr.group("value")
            if value[:1] in ("|", ">"):
                indent = len(expr.group("indent"))
                block: list[str] = []
                i += 1
                while i < len(lines) and (
                    not lines[i].strip() or len(lines[i]) - len(lines[i].lstrip()) > indent
                ):
                    block.append(lines[i].strip())
                    i += 1
                joiner = "\n" if value[0] == "|" else " "
                out.append((name, joiner.join(b for b in block if b)))
            else:
                if value[:1] == "'" and value[-1:] == "'":
                    value = value[1:-1].replace("''", "'")
                elif value[:1] == '"' and value[-1:] == '"':
                    value = json.loads(value)
                out.append((name, value))
                i += 1
            name = None
            continue
        i += 1
    return out
