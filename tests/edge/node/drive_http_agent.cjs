// Drives @ag-ui/client's HttpAgent against the edge; prints one JSON report on stdout.
// Usage: node drive_http_agent.cjs <agent URL> <threadId>
"use strict";
const { HttpAgent } = require("@ag-ui/client");

const [url, threadId] = process.argv.slice(2);

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

async function main() {
  const agent = new HttpAgent({ url, threadId });
  const report = {};

  // 1. A first run: the agent asks for approval and the run ends in an interrupt.
  report.first = await attempt(agent, { runId: "run-1" });
  report.pendingAfterFirst = agent.pendingInterrupts.map((i) => i.id);
  const interruptId = report.pendingAfterFirst[0];

  // 2. The client's own guard: a run that leaves the interrupt uncovered is refused
  //    before anything is sent.
  report.uncovered = await attempt(agent, { runId: "run-2" });

  // 3. A resume covering the interrupt with a payload that breaks its responseSchema
  //    passes the client's guard; the gateway rejects it (422 with the record).
  report.badPayload = await attempt(agent, {
    runId: "run-3",
    resume: [{ interruptId, status: "resolved", payload: { approved: "yes, please" } }],
  });
  report.pendingAfterBad = agent.pendingInterrupts.map((i) => i.id);

  // 4. A resume that answers it properly: the run continues to completion.
  report.resumed = await attempt(agent, {
    runId: "run-4",
    resume: [{ interruptId, status: "resolved", payload: { approved: true } }],
  });
  report.pendingAfterResume = agent.pendingInterrupts.map((i) => i.id);
  report.lastMessage = agent.messages.length
    ? agent.messages[agent.messages.length - 1].content
    : null;

  process.stdout.write(JSON.stringify(report) + "\n");
}

main().catch((error) => {
  process.stderr.write(`driver failed: ${error && error.stack ? error.stack : error}\n`);
  process.exit(1);
});
