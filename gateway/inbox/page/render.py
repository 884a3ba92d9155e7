"""The page's HTML, built from the view's JSON answers (pure).

Every value that comes from a record (agent and thread names, messages, schemas,
reasons) passes through `esc` on its way into the HTML, text and attributes alike;
nothing is inserted unescaped except HTML this module built. The page carries no
inline script or style (the Content-Security-Policy allows only the page's own
files): the script reads what it needs from `data-` attributes.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlencode

import orjson

from gateway.core.values.identity import Identity
from gateway.inbox.items import iso
from gateway.inbox.page import form
from gateway.inbox.page.resume import expired

MESSAGE_CHARS = 300  # a message longer than this is cut in the list (whole on the thread)


def esc(value: object) -> str:
    """Text or an attribute value, escaped (quotes too)."""
    return html.escape("" if value is None else str(value), quote=True)


def document(base: str, title: str, body: str, refresh_s: float = 15.0) -> str:
    """A whole page around `body` (HTML this module built)."""
    return (
        "<!doctype html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{esc(title)}</title>"
        f'<link rel="icon" href="{esc(base)}/assets/icon.svg">'
        f'<link rel="stylesheet" href="{esc(base)}/assets/inbox.css">'
        f'<script defer src="{esc(base)}/assets/inbox.js"></script>'
        f'</head><body data-base="{esc(base)}" data-refresh="{refresh_s:g}">{body}</body></html>'
    )


def duration(seconds: float) -> str:
    """`1h 02m`, `3m 05s`, `12s`: how long, for a person."""
    whole = max(0, int(seconds))
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h {minutes:02d}m"
    if minutes:
        return f"{minutes}m {secs:02d}s"
    return f"{secs}s"


def expiry_text(item: Mapping[str, Any], now_ms: int) -> str:
    expires = item.get("expiresAtMs")
    if not isinstance(expires, int):
        return "never"
    if expires <= now_ms:
        return "expired"
    return "in " + duration((expires - now_ms) / 1000)


def thread_href(base: str, agent: object, thread: object) -> str:
    return f"{base}/thread?" + urlencode({"agent": str(agent), "thread": str(thread)})


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + "…"


def search_text(item: Mapping[str, Any]) -> str:
    """What the live filter's text search looks in (lower case)."""
    parts = (
        item.get(k) for k in ("agent", "thread", "interrupt", "reason", "message", "toolCallId")
    )
    return " ".join(str(p) for p in parts if p).lower()


def row(base: str, item: Mapping[str, Any], now_ms: int) -> str:
    """One open interrupt as a table row."""
    opened = item.get("openedAtMs")
    opened_ms = opened if isinstance(opened, int) else now_ms
    expires = item.get("expiresAtMs")
    expires_attr = str(expires) if isinstance(expires, int) else ""
    is_expired = expired(item, now_ms)
    message = item.get("message")
    subagent = item.get("subagent")
    who = ""
    if isinstance(subagent, dict) and subagent.get("name"):
        who = f' <span class="sub">via {esc(subagent.get("name"))}</span>'
    href = thread_href(base, item.get("agent"), item.get("thread"))
    return (
        f'<tr class="row{" expired" if is_expired else ""}" data-key="{esc(item.get("key"))}"'
        f' data-agent="{esc(item.get("agent"))}" data-reason="{esc(item.get("reason") or "")}"'
        f' data-opened="{opened_ms}" data-expires="{expires_attr}"'
        f' data-text="{esc(search_text(item))}">'
        f'<td class="agent">{esc(item.get("agent"))}</td>'
        f'<td class="thread"><a href="{esc(href)}">{esc(item.get("thread"))}</a></td>'
        f'<td class="interrupt">{esc(item.get("interrupt"))}{who}</td>'
        f'<td class="reason">{esc(item.get("reason") or "")}</td>'
        f'<td class="message">{esc(_cut(message, MESSAGE_CHARS) if isinstance(message, str) else "")}</td>'
        f'<td class="age" title="opened {esc(item.get("openedAt"))}">'
        f"{esc(duration((now_ms - opened_ms) / 1000))}</td>"
        f'<td class="expiry" title="{esc(item.get("expiresAt") or "")}">'
        f"{esc(expiry_text(item, now_ms))}</td>"
        f'<td><a class="answer" href="{esc(href)}">{"Abandon" if is_expired else "Answer"}</a></td>'
        "</tr>"
    )


FILTERS = (
    ("agent", "Agent", "billing, support"),
    ("reason", "Reason", "tool_approval"),
    ("olderThan", "Older than (s)", "300"),
    ("expiringBefore", "Expiring before", "2026-12-03T14:00:00Z"),
    ("q", "Text", "words in the message"),
)


def _seconds(value: object) -> str:
    return "–" if not isinstance(value, int | float) else f"{value:.2f} s"


def summary_table(summary: Mapping[str, Any]) -> str:
    agents = summary.get("agents") or []
    rows = []
    for entry in agents:
        if not isinstance(entry, dict):
            continue
        by_reason = entry.get("byReason") or {}
        reasons = ", ".join(
            f"{esc(reason or '(none)')}: {esc(count)}"
            for reason, count in sorted(by_reason.items())
        )
        latency = entry.get("latency") or {}
        rows.append(
            f'<tr data-agent="{esc(entry.get("agent"))}"><td>{esc(entry.get("agent"))}</td>'
            f'<td class="num">{esc(entry.get("open"))}</td><td>{reasons}</td>'
            f'<td class="num">{_seconds(latency.get("p50Seconds"))}</td>'
            f'<td class="num">{_seconds(latency.get("p95Seconds"))}</td>'
            f'<td class="num">{esc(entry.get("unrecognisedEntries"))}</td>'
            f'<td class="num">{esc(entry.get("uncoveredInterrupts"))}</td></tr>'
        )
    body = "".join(rows) or '<tr><td colspan="7">No agent has open interrupts.</td></tr>'
    return (
        '<table class="summary"><thead><tr><th>Agent</th><th>Open</th><th>By reason</th>'
        "<th>Response p50</th><th>Response p95</th><th>Unrecognised entries</th>"
        f"<th>Uncovered interrupts</th></tr></thead><tbody>{body}</tbody></table>"
    )


def lag_text(lag: object) -> str:
    if not isinstance(lag, int | float):
        return "view lag: unknown"
    return f"view lag: {lag:.1f} s"


def inbox(
    base: str,
    listing: Mapping[str, Any],
    summary: Mapping[str, Any],
    filters: Mapping[str, str],
    now_ms: int,
    refresh_s: float = 15.0,
    signout: bool = False,
    who: str = "",
) -> str:
    """The inbox: filters, the summary per agent, and the open interrupts, oldest first
    (with `signout`, a button that ends the browser's session: `POST <base>/logout`;
    `who`: who is signed in, from `signed_in`)."""
    items = [i for i in listing.get("items") or [] if isinstance(i, dict)]
    inputs = "".join(
        f'<label>{esc(label)} <input name="{name}" value="{esc(filters.get(name, ""))}"'
        f' placeholder="{esc(hint)}"></label>'
        for name, label, hint in FILTERS
    )
    total = listing.get("total")
    shown = f"{len(items)} of {esc(total)}" if isinstance(total, int) else str(len(items))
    rows = "".join(row(base, item, now_ms) for item in items)
    body = (
        '<header><h1>Interrupt inbox</h1><span class="lag" id="lag">'
        f"{esc(lag_text(listing.get('lagSeconds')))}</span>"
        '<span class="live" id="live">connecting…</span>'
        + who
        + (
            f'<form class="signout" method="post" action="{esc(base)}/logout">'
            '<button type="submit" id="signout">Sign out</button></form>'
            if signout
            else ""
        )
        + "</header>"
        f'<form class="filters" id="filters" method="get" action="{esc(base)}">{inputs}'
        f'<button type="submit">Filter</button> <a href="{esc(base)}">clear</a></form>'
        + (
            f'<p class="refused">The view refused the filters: {esc(listing["refused"])}</p>'
            if listing.get("refused")
            else ""
        )
        + f"<section><h2>Per agent, last hour</h2>{summary_table(summary)}</section>"
        f'<section><h2>Open interrupts <span id="count">{shown}</span></h2>'
        '<table class="interrupts" id="interrupts"><thead><tr><th>Agent</th><th>Thread</th>'
        "<th>Interrupt</th><th>Reason</th><th>Message</th><th>Age</th><th>Expires</th><th></th>"
        f"</tr></thead><tbody>{rows}</tbody></table>"
        + (
            '<p class="more">More match than are shown: narrow the filters.</p>'
            if listing.get("next")
            else ""
        )
        + "</section>"
    )
    return document(base, "Interrupt inbox", body, refresh_s)


# --- the answer form ---------------------------------------------------------------------


def _hint(w: form.Widget) -> str:
    hints = [f"{key} {orjson.dumps(value).decode()}" for key, value in w.constraints]
    parts = ([w.description] if w.description else []) + hints
    return f'<small class="hint">{esc("; ".join(parts))}</small>' if parts else ""


def _input_attrs(w: form.Widget) -> str:
    attrs = dict(w.constraints)
    out = []
    if w.kind in ("number", "integer"):
        out.append('inputmode="decimal"' if w.kind == "number" else 'inputmode="numeric"')
        for key, attr in (("minimum", "min"), ("maximum", "max")):
            if isinstance(attrs.get(key), int | float):
                out.append(f'{attr}="{esc(attrs[key])}"')
    else:
        for key, attr in (("minLength", "minlength"), ("maxLength", "maxlength")):
            if isinstance(attrs.get(key), int):
                out.append(f'{attr}="{esc(attrs[key])}"')
    return " ".join(out)


def widget_html(w: form.Widget, prefix: str, values: Mapping[str, str] | None = None) -> str:
    """The inputs of `w`, named `prefix` + their JSON Pointer."""
    values = values or {}
    name = esc(prefix + w.path)
    label = esc(w.label or w.path.rsplit("/", 1)[-1] or "answer")
    mark = ' <abbr title="required">*</abbr>' if w.required else ""
    value = values.get(w.path, "")
    if w.kind in ("approval", "boolean"):
        choices = "".join(
            f'<label class="decision"><input type="radio" name="{name}" value="{v}"'
            f"{' checked' if value == v else ''}> {text}</label>"
            for v, text in (("approve", "Approve"), ("deny", "Deny"))
        )
        extra = ""
        if w.kind == "approval":
            extra = (
                '<label class="json">JSON payload instead (optional)'
                f'<textarea name="{esc(prefix)}/json" rows="3" spellcheck="false">'
                f"{esc(values.get('/json', ''))}</textarea></label>"
            )
        return f'<div class="widget decision">{choices}{_hint(w)}{extra}</div>'
    if w.kind == "choice":
        options = ['<option value="">choose…</option>'] + [
            f'<option value="{i}"{" selected" if value == str(i) else ""}>'
            f"{esc(c if isinstance(c, str) else orjson.dumps(c).decode())}</option>"
            for i, c in enumerate(w.choices)
        ]
        return (
            f'<label class="widget">{label}{mark} <select name="{name}">{"".join(options)}'
            f"</select>{_hint(w)}</label>"
        )
    if w.kind == "yesno":
        yesno = "".join(
            f'<option value="{v}"{" selected" if value == v else ""}>{t}</option>'
            for v, t in (("", "–"), ("yes", "yes"), ("no", "no"))
        )
        return (
            f'<label class="widget">{label}{mark} <select name="{name}">{yesno}</select>'
            f"{_hint(w)}</label>"
        )
    if w.kind in ("string", "number", "integer"):
        return (
            f'<label class="widget">{label}{mark} <input name="{name}" value="{esc(value)}"'
            f" {_input_attrs(w)}>{_hint(w)}</label>"
        )
    if w.kind == "object":
        inner = "".join(widget_html(child, prefix, values) for child in w.children)
        legend = f"<legend>{label}</legend>" if w.path else ""
        return f'<fieldset class="widget object">{legend}{_hint(w) if w.path else ""}{inner}</fieldset>'
    schema = orjson.dumps(w.schema, option=orjson.OPT_INDENT_2).decode()
    return (
        f'<label class="widget json">JSON payload{mark}'
        f'<textarea name="{name}" rows="6" spellcheck="false">{esc(value)}</textarea></label>'
        f'<details><summary>responseSchema</summary><pre class="schema">{esc(schema)}</pre></details>'
    )


def part(
    n: int, item: Mapping[str, Any], now_ms: int, values: Mapping[str, str] | None = None
) -> str:
    """One open interrupt of the thread, with its answer-or-abandon inputs."""
    interrupt = item.get("interrupt")
    is_expired = expired(item, now_ms)
    expires = item.get("expiresAtMs")
    opened = item.get("openedAtMs")
    facts = [
        ("Interrupt", interrupt),
        ("Reason", item.get("reason")),
        ("Tool call", item.get("toolCallId")),
        ("Run", item.get("run")),
    ]
    subagent = item.get("subagent")
    if isinstance(subagent, dict):
        facts.append(("Subagent", f"{subagent.get('name') or ''} ({subagent.get('runId') or ''})"))
    listed = "".join(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>" for k, v in facts if v)
    message = item.get("message")
    head = (
        f'<dl class="facts">{listed}</dl>'
        + (f'<p class="message">{esc(message)}</p>' if isinstance(message, str) else "")
        + f'<p class="times">open for <span class="age">{esc(duration((now_ms - (opened if isinstance(opened, int) else now_ms)) / 1000))}</span>'
        f' · expires <span class="expiry">{esc(expiry_text(item, now_ms))}</span></p>'
    )
    hidden = f'<input type="hidden" name="{n}.id" value="{esc(interrupt)}">'
    if is_expired:
        choice = (
            f'<input type="hidden" name="{n}.status" value="cancelled">'
            '<p class="expired-note">Expired: it can only be abandoned.</p>'
        )
        inputs = ""
    else:
        choice = (
            '<div class="status">'
            f'<label><input type="radio" name="{n}.status" value="resolved" checked> Answer</label>'
            f'<label><input type="radio" name="{n}.status" value="cancelled"> Abandon</label></div>'
        )
        inputs = (
            '<div class="inputs">'
            + widget_html(form.widget(item.get("responseSchema")), f"{n}:", values)
            + "</div>"
        )
    return (
        f'<fieldset class="part{" expired" if is_expired else ""}" data-interrupt="{esc(interrupt)}"'
        f' data-key="{esc(item.get("key"))}"'
        f' data-opened="{opened if isinstance(opened, int) else ""}"'
        f' data-expires="{expires if isinstance(expires, int) else ""}">'
        f"<legend>{esc(interrupt)}</legend>{head}{hidden}{choice}{inputs}"
        '<ul class="issues"></ul></fieldset>'
    )


def signed_in(identity: Identity | None, via: str | None, attests: bool) -> str:
    """Who is signed in, for the pages' heads: a verified person (subject, groups,
    issuer), and whether their answers are attested; or the inbox token, or an open
    inbox (answers unattested). Empty when the authorizer does not say."""
    if identity is not None:
        groups = ", ".join(identity.groups) or "none"
        text = (
            f'<span class="who" id="who" data-subject="{esc(identity.subject)}">Signed in as '
            f"<strong>{esc(identity.subject)}</strong> (groups: {esc(groups)}; issuer: "
            f"{esc(identity.issuer or 'unknown')})</span>"
        )
        if attests:
            return text + (
                '<span class="attested" id="attested">answers are attested as you</span>'
            )
        return text + (
            '<p class="warn unattested" id="unattested">Your identity is verified, but this '
            "inbox has no signing key (attest_key_id, attest_private_key_file): your answers "
            "reach the gateway <strong>unattested</strong>, and where the approver policy "
            "wants a verified approver they are rejected (approver_unverified).</p>"
        )
    if via == "token":
        return (
            '<span class="who" id="who" data-subject="">Signed in with the inbox token '
            "(no personal identity: answers are unattested)</span>"
        )
    if via == "open":
        return (
            '<span class="who" id="who" data-subject="">Open inbox (inbox_open): answers '
            "are unattested</span>"
        )
    return ""


def thread_page(
    base: str,
    agent: str,
    thread: str,
    answer: Mapping[str, Any] | None,
    now_ms: int,
    who: str = "",
) -> str:
    """A thread's open interrupts, answered together in one form (`who`: who is signed
    in, from `signed_in`)."""
    title = f"{agent} / {thread}"
    back = f'<p><a href="{esc(base)}">← inbox</a></p>{who}'
    if answer is None:
        body = f"{back}<h1>{esc(title)}</h1><p>The inbox knows no such thread.</p>"
        return document(base, title, body)
    items = [i for i in answer.get("open") or [] if isinstance(i, dict)]
    if items:
        parts = "".join(part(n, item, now_ms) for n, item in enumerate(items))
        many = (
            f"<p>The run left {len(items)} interrupts open: answer or abandon each; "
            "they are sent together.</p>"
            if len(items) > 1
            else ""
        )
        body_form = (
            f'<form id="answer" class="answer" method="post" action="{esc(base)}/answer"'
            f' data-check="{esc(base)}/check" novalidate>'
            f'<input type="hidden" name="agent" value="{esc(agent)}">'
            f'<input type="hidden" name="thread" value="{esc(thread)}">'
            f'<input type="hidden" name="confirm" value="0">{many}{parts}'
            '<ul class="issues form-issues"></ul>'
            '<button type="submit" id="send">Send</button></form>'
            '<div id="result" class="result" aria-live="polite"></div>'
        )
    else:
        body_form = "<p>No interrupt of this thread is open.</p>"
    history = runs_html(answer) + verdicts_html(answer)
    body = (
        f'{back}<h1 data-agent="{esc(agent)}" data-thread="{esc(thread)}">{esc(title)}</h1>'
        f'<span class="live" id="live">connecting…</span>{body_form}{history}'
    )
    return document(base, title, body)


UNKNOWN_VERDICTS = {
    "audit_disabled": "the audit trail is off (audit_enabled=false)",
    "starting": "the inbox has not read the audit topic yet",
    "topic_missing": "the inbox cannot read this agent's audit topic (missing, or no Read ACL)",
}


def _at(ms: object) -> str:
    """Epoch milliseconds as `2026-12-03 14:02:11Z`, for a person."""
    if not isinstance(ms, int):
        return ""
    text = iso(ms) or ""
    return text[:19].replace("T", " ") + "Z" if text else ""


def runs_html(answer: Mapping[str, Any]) -> str:
    """The thread's runs the view knows of, each with how its interrupts stand."""
    rows = []
    for run in answer.get("runs") or []:
        if not isinstance(run, dict):
            continue
        when = []
        if run.get("startedAtMs") is not None:
            when.append(f"forwarded {_at(run.get('startedAtMs'))}")
        if run.get("closedAtMs") is not None:
            when.append(f"closed {_at(run.get('closedAtMs'))}")
        interrupts = ", ".join(
            f"{i.get('interrupt')}: {i.get('status')}"
            for i in run.get("interrupts") or []
            if isinstance(i, dict)
        )
        rows.append(
            f'<li class="run"><code>{esc(run.get("run"))}</code> {esc(run.get("status"))}'
            f"{esc(' (' + ', '.join(when) + ')' if when else '')}"
            f"{esc(' — ' + interrupts if interrupts else '')}</li>"
        )
    for close in answer.get("closesWithoutRun") or []:
        if isinstance(close, dict):
            rows.append(
                f'<li class="run">run not known — {esc(close.get("interrupt"))}: '
                f"{esc(close.get('status'))} {esc(_at(close.get('closedAtMs')))}</li>"
            )
    return f'<section class="runs"><h2>Runs</h2><ul>{"".join(rows)}</ul></section>' if rows else ""


def verdicts_html(answer: Mapping[str, Any]) -> str:
    """The thread's last verdicts, newest first, or why they are not known."""
    listed = answer.get("verdicts")
    if listed is None:
        why = UNKNOWN_VERDICTS.get(str(answer.get("verdictsUnknownReason")), "not read")
        return (
            '<section class="verdicts"><h2>Last verdicts</h2>'
            f'<p class="unknown">Not known: {esc(why)}.</p></section>'
        )
    rows = []
    for v in listed if isinstance(listed, list) else []:
        if not isinstance(v, dict):
            continue
        who = v.get("subject") if v.get("attestation") == "verified" else "unattested"
        codes = ", ".join(str(c) for c in v.get("reasons") or [])
        entries = ", ".join(
            f"{e.get('interrupt')}: {e.get('status')}"
            for e in v.get("interrupts") or []
            if isinstance(e, dict)
        )
        facts = [f"by {who}"]
        if entries:
            facts.append(entries)
        if v.get("forwardedRun"):
            facts.append(f"started {v.get('forwardedRun')}")
        if v.get("correlationId"):
            facts.append(f"correlation {v.get('correlationId')}")
        rows.append(
            f'<li class="verdict {esc(v.get("verdict"))}">{esc(_at(v.get("atMs")))} '
            f"<strong>{esc(v.get('verdict'))}</strong>"
            f"{' <code>' + esc(codes) + '</code>' if codes else ''} · {esc(' · '.join(facts))}</li>"
        )
    since = answer.get("verdictsSinceMs")
    note = "None" + (f" since {_at(since)}" if isinstance(since, int) else "") + "."
    body = f"<ol>{''.join(rows)}</ol>" if rows else f'<p class="none">{esc(note)}</p>'
    return f'<section class="verdicts"><h2>Last verdicts</h2>{body}</section>'


def issues_json(issues: Sequence[Any]) -> list[dict[str, Any]]:
    return [issue.as_json() for issue in issues]
