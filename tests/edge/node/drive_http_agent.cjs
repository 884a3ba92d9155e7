// Drives @ag-ui/client's HttpAgent against the edge; prints one JSON report on stdout.
// Usage: node drive_http_agent.cjs <agent URL> <threadId> <JSON: initial messages>
"use strict";
const { HttpAgent } = require("@ag-ui/client");

const [url, threadId, initialMessagesJson] = process.argv.slice(2);

async function attempt(agent, params) {
  const types = [];
  try {
    await agent.runAgent(params, { onEvent: ({ event }) => { types.push(event.type); } });
    return { ok: true, types };
  } catch (error) {
    return {
      ok: false,
      types,
      name: error.name,
      message: String(error.message),
      status: error.status ?? null,
      payload: error.payload ?? null,
    };
  }
}

function pending(agent) {
  return agent.pendingInterrupts.map((i) => ({
    id: i.id,
    reason: i.reason ?? null,
    responseSchema: i.responseSchema ?? null,
  }));
}

async function main() {
  const agent = new HttpAgent({
    url,
    threadId,
    initialMessages: JSON.parse(initialMessagesJson || "[]"),
  });
  const report = {};

  // 1. A first run: the agent asks for approval and the run ends in an interrupt.
  report.first = await attempt(agent, { runId: "run-1" });
  report.pendingAfterFirst = pending(agent);
  report.messagesAfterFirst = agent.messages.map((m) => ({
    role: m.role,
    toolCalls: (m.toolCalls || []).map((c) => c.function.name),
  }));
  const interruptId = report.pendingAfterFirst.length ? report.pendingAfterFirst[0].id : null;

  // 2. The client's own guard: a run that leaves the interrupt uncovered is refused
  //    before anything is sent.
  report.uncovered = await attempt(agent, { runId: "run-2" });

  // 3. A resume covering the interrupt with a payload that breaks its responseSchema
  //    (`approved` must be a boolean) passes the client's guard; the gateway rejects
  //    it (422 with the rejection record).
  report.badPayload = await attempt(agent, {
    runId: "run-3",
    resume: [{ interruptId, status: "resolved", payload: { approved: "yes, please" } }],
  });
  report.pendingAfterBad = pending(agent);

  // 4. A resume that approves it: the run continues to completion.
  report.resumed = await attempt(agent, {
    runId: "run-4",
    resume: [{ interruptId, status: "resolved", payload: { approved: true } }],
  });
  report.pendingAfterResume = pending(agent);
  const last = agent.messages.length ? agent.messages[agent.messages.length - 1] : null;
  report.lastMessage = last ? { role: last.role, content: last.content ?? null } : null;

  process.stdout.write(JSON.stringify(report) + "\n");
}

main().catch((error) => {
  process.stderr.write(`driver failed: ${error && error.stack ? error.stack : error}\n`);
  process.exit(1);
});
