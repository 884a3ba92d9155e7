"""The page's script and style sheet, served as files of its own (no inline code: the
Content-Security-Policy allows only these). Plain JavaScript, no build step.

The script: ticks each row's age and countdown every second (an expired one is marked
and can only be abandoned); follows `GET /inbox/events` (rows added in order of
opening and removed on close, the page's filters applied as rows arrive); refreshes
the summary; on a thread, checks the form as it is filled (`POST /inbox/check`), and
sends it (`POST /inbox/answer`), showing the issues, the rejection's reasons or the
run that follows. Text from the server is set as text; the only HTML inserted is the
row the server rendered and escaped.
"""

from __future__ import annotations

SCRIPT = r"""
"use strict";
(function () {
  const base = document.body.dataset.base || "/inbox";

  function duration(seconds) {
    const whole = Math.max(0, Math.floor(seconds));
    const h = Math.floor(whole / 3600), m = Math.floor((whole % 3600) / 60), s = whole % 60;
    const two = (n) => String(n).padStart(2, "0");
    if (h) return h + "h " + two(m) + "m";
    if (m) return m + "m " + two(s) + "s";
    return s + "s";
  }

  function tick(el, now) {
    const opened = Number(el.dataset.opened);
    const age = el.querySelector(".age");
    if (age && el.dataset.opened) age.textContent = duration((now - opened) / 1000);
    const expiry = el.querySelector(".expiry");
    if (!el.dataset.expires) return false;
    const left = Number(el.dataset.expires) - now;
    if (left <= 0) {
      if (expiry) expiry.textContent = "expired";
      if (!el.classList.contains("expired")) {
        el.classList.add("expired");
        return true;
      }
      return false;
    }
    if (expiry) expiry.textContent = "in " + duration(left / 1000);
    return false;
  }

  // --- the list -------------------------------------------------------------------------
  const table = document.getElementById("interrupts");
  const filters = document.getElementById("filters");
  function filterValue(name) {
    const input = filters ? filters.querySelector('[name="' + name + '"]') : null;
    return input ? input.value.trim() : "";
  }
  function parseWhen(text) {
    if (!text) return null;
    if (/^\d+$/.test(text)) return Number(text);
    const t = Date.parse(text);
    return Number.isNaN(t) ? null : t;
  }
  const wanted = {
    agents: filterValue("agent").split(",").map((a) => a.trim()).filter(Boolean),
    reason: filterValue("reason"),
    olderThan: Number(filterValue("olderThan")) || 0,
    expiringBefore: parseWhen(filterValue("expiringBefore")),
    q: filterValue("q").toLowerCase(),
  };
  function matches(tr, now) {
    if (wanted.agents.length && !wanted.agents.includes(tr.dataset.agent)) return false;
    if (wanted.reason && tr.dataset.reason !== wanted.reason) return false;
    if (wanted.olderThan && (now - Number(tr.dataset.opened)) / 1000 < wanted.olderThan) return false;
    if (wanted.expiringBefore !== null) {
      if (!tr.dataset.expires || Number(tr.dataset.expires) >= wanted.expiringBefore) return false;
    }
    if (wanted.q && !(tr.dataset.text || "").includes(wanted.q)) return false;
    return true;
  }
  function rows() {
    return table ? Array.from(table.tBodies[0].rows) : [];
  }
  function count() {
    const el = document.getElementById("count");
    if (el) el.textContent = String(rows().filter((r) => !r.hidden).length);
  }
  function findRow(key) {
    return rows().find((r) => r.dataset.key === key) || null;
  }
  function addRow(data) {
    const holder = document.createElement("tbody");
    holder.innerHTML = data.html;  // rendered and escaped by the server
    const tr = holder.querySelector("tr");
    if (!tr) return;
    const old = findRow(data.key);
    if (old) old.remove();
    const opened = Number(tr.dataset.opened);
    const after = rows().find((r) => Number(r.dataset.opened) > opened);
    table.tBodies[0].insertBefore(tr, after || null);
    tr.hidden = !matches(tr, Date.now());
    count();
  }
  function removeRow(key) {
    const tr = findRow(key);
    if (tr) tr.remove();
    count();
  }

  // --- the thread's form ----------------------------------------------------------------
  const answerForm = document.getElementById("answer");
  function parts() {
    return answerForm ? Array.from(answerForm.querySelectorAll("fieldset.part")) : [];
  }
  function setStatus(part) {
    const abandon = part.querySelector('input[value="cancelled"]');
    const inputs = part.querySelector(".inputs");
    if (inputs) inputs.disabled = !!(abandon && abandon.checked);
    if (inputs) inputs.hidden = !!(abandon && abandon.checked);
  }
  function expire(part) {
    const resolved = part.querySelector('input[value="resolved"]');
    const abandon = part.querySelector('input[value="cancelled"]');
    if (resolved) { resolved.checked = false; resolved.disabled = true; }
    if (abandon) abandon.checked = true;
    const note = document.createElement("p");
    note.className = "expired-note";
    note.textContent = "Expired: it can only be abandoned.";
    part.insertBefore(note, part.querySelector(".issues"));
    setStatus(part);
  }
  function showIssues(issues) {
    for (const list of answerForm.querySelectorAll("ul.issues")) list.replaceChildren();
    for (const issue of issues) {
      const part = parts().find((p) => p.dataset.interrupt === issue.interruptId);
      const list = part ? part.querySelector("ul.issues") : answerForm.querySelector("ul.form-issues");
      const li = document.createElement("li");
      li.className = issue.schema ? "schema" : "unreadable";
      li.textContent = (issue.path ? issue.path + ": " : "") + issue.message;
      list.appendChild(li);
    }
  }
  function body() {
    return new URLSearchParams(new FormData(answerForm));
  }
  let checkTimer = null;
  async function check() {
    const response = await fetch(answerForm.dataset.check, { method: "POST", body: body() });
    if (!response.ok) return;
    const answer = await response.json();
    showIssues(answer.issues || []);
    const confirm = answerForm.querySelector('[name="confirm"]');
    confirm.value = "0";
    document.getElementById("send").textContent = "Send";
  }
  function line(text, className) {
    const el = document.createElement(className === "code" ? "li" : "p");
    if (className) el.className = className;
    el.textContent = text;
    return el;
  }
  function showResult(answer, status) {
    const result = document.getElementById("result");
    result.replaceChildren();
    result.dataset.verdict = answer.verdict || answer.error || "";
    if (answer.sent === false && answer.issues) {
      showIssues(answer.issues);
      if (answer.confirmable) {
        answerForm.querySelector('[name="confirm"]').value = "1";
        document.getElementById("send").textContent = "Send anyway (the gateway will judge it)";
        result.appendChild(line("The answer breaks its responseSchema (above). Send anyway and the gateway will reject it, or correct it.", "warn"));
      } else {
        result.appendChild(line("Nothing was sent: correct the fields above.", "warn"));
      }
      return;
    }
    if (answer.verdict === "forward") {
      result.appendChild(line("Forwarded: run " + answer.runId + " follows.", "forward"));
      answerForm.querySelector("#send").disabled = true;
    } else if (answer.verdict === "reject") {
      result.appendChild(line("Rejected by the gateway (run " + answer.runId + " did not start):", "reject"));
      const list = document.createElement("ul");
      list.className = "reasons";
      for (const r of answer.reasons || []) {
        const where = [r.interruptId, r.path].filter(Boolean).join(" ");
        list.appendChild(line(r.code + (where ? " (" + where + ")" : "") + ": " + (r.detail || ""), "code"));
      }
      result.appendChild(list);
    } else if (answer.verdict === "duplicate") {
      result.appendChild(line("Already forwarded before: no new run follows.", "warn"));
    } else {
      result.appendChild(line((answer.error || ("HTTP " + status)) + (answer.detail ? ": " + answer.detail : ""), "reject"));
    }
    for (const w of answer.warnings || []) {
      result.appendChild(line("warning " + w.code + ": " + (w.detail || ""), "warn"));
    }
    if (answer.sent && answer.attestedAs) {
      result.appendChild(line("Sent attested as " + answer.attestedAs + ".", "attested"));
    }
    if (answer.unattested) {
      result.appendChild(line("Sent unattested: " + answer.unattested + ".", "warn unattested"));
    }
  }
  if (answerForm) {
    for (const part of parts()) {
      for (const radio of part.querySelectorAll(".status input")) {
        radio.addEventListener("change", () => setStatus(part));
      }
      setStatus(part);
    }
    answerForm.addEventListener("input", () => {
      clearTimeout(checkTimer);
      checkTimer = setTimeout(check, 300);
    });
    answerForm.addEventListener("change", () => {
      clearTimeout(checkTimer);
      checkTimer = setTimeout(check, 300);
    });
    answerForm.addEventListener("submit", async (event) => {
      event.preventDefault();
      clearTimeout(checkTimer);
      const send = document.getElementById("send");
      send.disabled = true;
      let answer = {}, status = 0;
      try {
        const response = await fetch(answerForm.action, { method: "POST", body: body() });
        status = response.status;
        answer = await response.json();
      } catch (e) {
        answer = { error: "network", detail: String(e) };
      }
      send.disabled = false;
      showResult(answer, status);
    });
  }

  // --- live -----------------------------------------------------------------------------
  setInterval(() => {
    const now = Date.now();
    for (const tr of rows()) {
      if (tick(tr, now)) {
        const link = tr.querySelector("a.answer");
        if (link) link.textContent = "Abandon";
      }
      tr.hidden = !matches(tr, now);
    }
    for (const part of parts()) {
      if (tick(part, now)) expire(part);
    }
    count();
  }, 1000);

  const live = document.getElementById("live");
  if (live) {
    const source = new EventSource(base + "/events");
    source.onopen = () => { live.textContent = "live"; live.className = "live on"; };
    source.onerror = () => { live.textContent = "reconnecting…"; live.className = "live off"; };
    source.addEventListener("interrupt-open", (e) => {
      if (table) addRow(JSON.parse(e.data));
    });
    source.addEventListener("interrupt-close", (e) => {
      const data = JSON.parse(e.data);
      if (table) removeRow(data.key);
      const part = parts().find((p) => p.dataset.key === data.key);
      if (part) {
        part.classList.add("closed");
        part.insertBefore(line("Closed: " + data.status + ".", "closed-note"), part.querySelector(".issues"));
      }
    });
  }

  const summary = document.querySelector("table.summary");
  if (summary) {
    setInterval(async () => {
      const response = await fetch(base + "/summary");
      if (!response.ok) return;
      const data = await response.json();
      const lag = document.getElementById("lag");
      if (lag) lag.textContent = typeof data.lagSeconds === "number" ? "view lag: " + data.lagSeconds.toFixed(1) + " s" : "view lag: unknown";
      const body = summary.tBodies[0];
      const fresh = document.createElement("tbody");
      const secs = (v) => typeof v === "number" ? v.toFixed(2) + " s" : "–";
      for (const a of data.agents || []) {
        const tr = document.createElement("tr");
        tr.dataset.agent = a.agent;
        const reasons = Object.keys(a.byReason || {}).sort().map((k) => (k || "(none)") + ": " + a.byReason[k]).join(", ");
        const latency = a.latency || {};
        const cells = [a.agent, a.open, reasons, secs(latency.p50Seconds), secs(latency.p95Seconds), a.unrecognisedEntries, a.uncoveredInterrupts];
        cells.forEach((text, i) => {
          const td = document.createElement("td");
          if (i !== 0 && i !== 2) td.className = "num";
          td.textContent = String(text);
          tr.appendChild(td);
        });
        fresh.appendChild(tr);
      }
      if (fresh.rows.length) summary.replaceChild(fresh, body);
    }, 1000 * (Number(document.body.dataset.refresh) || 15));
  }
})();
"""

STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 1.5rem; color: #1d232a; }
header { display: flex; gap: 1rem; align-items: baseline; }
h1 { font-size: 1.4rem; margin: 0 0 .5rem; }
h2 { font-size: 1.1rem; margin: 1.2rem 0 .4rem; }
table { border-collapse: collapse; width: 100%; }
th, td { text-align: left; padding: .3rem .5rem; border-bottom: 1px solid #dde2e8; vertical-align: top; }
th { background: #f3f5f8; font-weight: 600; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
td.age, td.expiry { white-space: nowrap; font-variant-numeric: tabular-nums; }
tr.expired td { color: #8a1f11; }
tr.expired td.expiry { font-weight: 600; }
.lag, .live, .who, .attested { color: #5a6472; font-size: .9rem; }
.who, .attested { margin-left: .75rem; }
.warn.unattested { color: #8a5a00; }
.live.on { color: #1a7f37; }
.live.off { color: #8a1f11; }
form.filters { display: flex; flex-wrap: wrap; gap: .6rem; align-items: end; margin: .6rem 0; }
form.filters label { display: flex; flex-direction: column; font-size: .85rem; }
input, select, textarea, button { font: inherit; }
textarea { width: 100%; font-family: ui-monospace, monospace; }
fieldset.part { border: 1px solid #c9d1da; border-radius: 6px; margin: 1rem 0; padding: .6rem 1rem; }
fieldset.part.expired { border-color: #d9a39b; background: #fff6f4; }
fieldset.part.closed { opacity: .6; }
fieldset.object { border: 1px dashed #c9d1da; }
.widget { display: block; margin: .4rem 0; }
.decision label { margin-right: 1rem; }
.status label { margin-right: 1rem; font-weight: 600; }
.hint { display: block; color: #5a6472; }
dl.facts { display: grid; grid-template-columns: max-content 1fr; gap: .1rem .8rem; margin: 0; }
dl.facts dt { color: #5a6472; }
dl.facts dd { margin: 0; }
ul.issues li { color: #8a1f11; }
ul.issues li.schema::before { content: "schema: "; font-weight: 600; }
.result .forward { color: #1a7f37; font-weight: 600; }
.result .reject { color: #8a1f11; font-weight: 600; }
.result .warn, .expired-note { color: #8a5a00; }
.refused { color: #8a1f11; font-weight: 600; }
pre.schema { background: #f3f5f8; padding: .5rem; overflow: auto; }
"""

ICON = (
    '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 16 16">'
    '<rect x="1" y="3" width="14" height="10" rx="2" fill="#3b6fb6"/>'
    '<path d="M1 6h5l2 2 2-2h5" stroke="#fff" fill="none"/></svg>'
)

# name -> (media type, text); finite: the page's three files
ASSETS: dict[str, tuple[str, str]] = {
    "inbox.js": ("text/javascript; charset=utf-8", SCRIPT),
    "inbox.css": ("text/css; charset=utf-8", STYLE),
    "icon.svg": ("image/svg+xml", ICON),
}
