// The run view: the run's agents as a tree and a timeline, the calls of the agent picked, the
// files its subagents delivered, and the final answer. All of it is rebuilt from the run's
// events (the same stream live and after a reload) and its stored record (GET /runs/{id}).
"use strict";

async function loadRuns() {
  const { runs } = await api("GET", "/runs?limit=30");
  const list = $("run-list");
  list.replaceChildren(
    ...runs.map((r) =>
      el(
        "li",
        {},
        el(
          "a",
          { href: `#/runs/${encodeURIComponent(r.run_id)}`, class: r.run_id === current.id ? "active" : "" },
          el("span", { class: "title", text: r.prompt }),
          el("span", { class: "sub" }, badge(r.status), el("span", { text: when(r.created_at) })),
        ),
      ),
    ),
  );
  $("run-list-empty").hidden = runs.length > 0;
}

function showRuns(runId, agentId) {
  loadRuns().catch(() => {});
  $("run-empty").hidden = Boolean(runId);
  if (!runId) loadRunTable().catch(() => {});
  $("run-detail").hidden = !runId;
  if (runId) openRun(runId, agentId);
}

// The run on screen, rebuilt from its events.
let tree = null;

function newTree(runId, selected) {
  closeRun();
  tree = {
    runId,
    agents: new Map(),
    input: 0,
    output: 0,
    cost: 0, // US dollars, null once a request of an unpriced model is in it
    subagents: 0,
    start: null,
    end: null,
    last: null,
    done: false,
    selected: selected || "lead",
    byCall: new Map(), // the lead's task call id -> the subagent it started
    open: pickAgent, // how a `task` call's button opens the subagent it started (turns.js)
    phases: new Map(), // a workflow's phases by name: their node and agents
    preview: null,
    final: "",
    drawing: false,
    detailStale: false,
    timer: null,
    recordTimer: null,
  };
  $("agent-tree").replaceChildren();
  $("timeline").replaceChildren();
  $("event-log").replaceChildren();
  $("event-count").textContent = "0";
  $("run-final").replaceChildren(el("span", { class: "muted", text: "The answer appears when the run ends." }));
  $("run-workflow").hidden = true;
  setStats();
}

// Stop what keeps the run on screen up to date (its clock and record refresh).
function closeRun() {
  if (!tree) return;
  clearInterval(tree.timer);
  clearTimeout(tree.recordTimer);
  tree.timer = null;
}

function agentNode(id, parentId) {
  let agent = tree.agents.get(id);
  if (agent) return agent;
  agent = {
    id,
    type: "",
    description: "",
    model: "",
    requests: 0, // its model requests so far: a turn's index in GET .../agents/{id}/calls
    pending: null, // the turn waiting for its model's answer
    status: "running",
    steps: 0,
    usage: null,
    summary: "",
    result: undefined,
    error: "",
    started: null,
    ended: null,
    entries: [],
    calls: new Map(),
    artifacts: [],
    background: false,
    messages: 0,
    depth: id === "lead" ? 0 : 1,
  };
  const li = el("li", { "data-agent": id });
  const row = el("div", { class: "node", tabindex: "0", role: "button", onclick: () => pickAgent(id) });
  row.addEventListener("keydown", (e) => {
    if (e.key === "Enter" || e.key === " ") {
      e.preventDefault();
      pickAgent(id);
    }
  });
  const summary = el("div", { class: "node-summary", hidden: true });
  const children = el("ul");
  li.append(row, summary, children);
  agent.dom = { li, row, summary, children };
  const parent = parentId && tree.agents.get(parentId);
  (parent ? parent.dom.children : $("agent-tree")).append(li);
  tree.agents.set(id, agent);
  return agent;
}

function drawAgent(agent) {
  const meta = [plural(agent.steps, "step"), `${fmt.format(tokens(agent.usage))} tokens`];
  if (agent.usage) meta.push(money(agent.usage.cost_usd));
  if (agent.artifacts.length) meta.push(plural(agent.artifacts.length, "file"));
  if (agent.messages) meta.push(plural(agent.messages, "follow-up"));
  const stoppable = agent.id !== "lead" && agent.status === "running" && !tree.done;
  const parts = [
    el("span", { class: `dot ${agent.status}`, title: agent.status }),
    el("span", { class: "name", text: agent.id }),
    agent.type ? el("span", { class: "type", text: agent.type }) : null,
    agent.background ? el("span", { class: "badge background", text: "background" }) : null,
    agent.depth > 1 ? el("span", { class: "badge depth", text: `depth ${agent.depth}` }) : null,
    el("span", { class: "desc", text: agent.description }),
    el("span", { class: "meta", text: meta.join(" · ") }),
    badge(agent.status),
    stoppable
      ? el("button", {
          type: "button",
          class: "stop-agent",
          "data-stop": agent.id,
          title: `Stop ${agent.id}: it ends cancelled, and the lead gets what it did so far`,
          text: "Stop",
          onclick: (e) => stopAgent(e, agent.id),
        })
      : null,
  ];
  agent.dom.row.replaceChildren(...parts.filter(Boolean));
  agent.dom.row.classList.toggle("selected", agent.id === tree.selected);
  if (agent.phase) drawPhase(agent.phase);
  drawSummary(agent);
  redraw(agent.id === tree.selected);
}

// The summary under a subagent in the tree: its Markdown, then its typed result as JSON, or why
// it failed. Drawn again only when it changed.
function drawSummary(agent) {
  const key = JSON.stringify([agent.summary, agent.result ?? null]);
  if (agent.summaryKey === key) return;
  agent.summaryKey = key;
  const parts = [];
  if (agent.summary) parts.push(Markdown.render(agent.summary));
  if (agent.result !== null && agent.result !== undefined) {
    parts.push("\n", el("div", { class: "node-result mono", text: `Result: ${JSON.stringify(agent.result)}` }));
  }
  agent.dom.summary.replaceChildren(...parts);
  agent.dom.summary.hidden = !parts.length;
}

function setStats() {
  $("stat-in").textContent = fmt.format(tree.input);
  $("stat-out").textContent = fmt.format(tree.output);
  $("stat-total").textContent = fmt.format(tree.input + tree.output);
  $("stat-subagents").textContent = fmt.format(tree.subagents);
  $("stat-cost").textContent = money(tree.cost);
  const end = tree.end ?? (tree.done ? tree.last : Date.now() / 1000);
  $("stat-time").textContent = tree.start === null ? "–" : Timeline.seconds(Math.max(0, end - tree.start));
}

function setStatus(status) {
  const node = $("run-status");
  node.className = `badge ${status}`;
  node.textContent = status.replace("_", " ");
  $("cancel-run").hidden = status !== "running" && status !== "waiting";
}

// -- events --------------------------------------------------------------------------------

function onRunEvent(type, ev) {
  if (!tree || ev.run_id !== tree.runId) return;
  for (const part of [Approvals, Todos]) part.onEvent(type, ev); // approvals.js, todos.js
  const data = ev.data || {};
  const log = $("event-log");
  log.append(el("li", { text: `${type}  ${ev.agent_id}${ev.tool_call_id ? "  " + ev.tool_call_id : ""}` }));
  $("event-count").textContent = String(log.childElementCount);
  if (type !== "run.completed" || data.status !== "interrupted") tree.last = Math.max(tree.last ?? ev.ts, ev.ts);
  const parent = ev.parent_agent_id || "lead";
  switch (type) {
    case "run.started": {
      const lead = agentNode("lead");
      lead.description = "the agent you asked";
      if (tree.start === null) tree.start = lead.started = ev.ts;
      lead.model = data.model || lead.model;
      $("stat-model").textContent = data.model || "–";
      drawAgent(lead);
      break;
    }
    case "subagent.started": {
      const agent = agentNode(ev.agent_id, parent);
      agent.type = data.type || "";
      agent.description = data.description || "";
      agent.background = Boolean(data.background);
      agent.depth = data.depth || 1;
      placeInPhase(agent, data.phase, parent);
      agent.started = ev.ts;
      if (ev.tool_call_id) tree.byCall.set(ev.tool_call_id, ev.agent_id);
      tree.subagents += 1;
      setStats();
      drawAgent(agent);
      break;
    }
    case "workflow.phase": {
      phaseNode(data.name, ev.agent_id);
      break;
    }
    case "agent.started": {
      const agent = agentNode(ev.agent_id, parent);
      if (agent.started === null) agent.started = ev.ts;
      agent.model = data.model || agent.model;
      drawAgent(agent);
      break;
    }
    case "model.request": {
      const agent = agentNode(ev.agent_id, parent);
      const turn = { kind: "turn", ts: ev.ts, end: null, step: data.step, index: agent.requests, text: "", usage: null };
      agent.requests += 1;
      agent.pending = turn;
      agent.entries.push(turn);
      drawAgent(agent);
      break;
    }
    case "model.response": {
      const agent = agentNode(ev.agent_id, parent);
      agent.steps = data.step || agent.steps + 1;
      const usage = data.usage || {};
      const before = agent.usage || { input_tokens: 0, output_tokens: 0, cost_usd: 0 };
      agent.usage = {
        input_tokens: (before.input_tokens || 0) + (usage.input_tokens || 0),
        output_tokens: (before.output_tokens || 0) + (usage.output_tokens || 0),
        cost_usd: addCost(before.cost_usd, usage.cost_usd),
      };
      const turn = agent.pending || { kind: "turn", ts: ev.ts, step: data.step, index: null };
      if (!agent.pending) agent.entries.push(turn);
      Object.assign(turn, { end: ev.ts, text: data.text || "", usage, tools: data.tool_calls });
      agent.pending = null;
      tree.input += usage.input_tokens || 0;
      tree.output += usage.output_tokens || 0;
      tree.cost = addCost(tree.cost, usage.cost_usd);
      setStats();
      drawAgent(agent);
      break;
    }
    case "tool.started": {
      const agent = agentNode(ev.agent_id, parent);
      const call = { kind: "call", id: ev.tool_call_id, ts: ev.ts, name: data.name, args: data.arguments, end: null };
      agent.entries.push(call);
      if (ev.tool_call_id) agent.calls.set(ev.tool_call_id, call);
      drawAgent(agent);
      break;
    }
    case "tool.completed": {
      const agent = agentNode(ev.agent_id, parent);
      const call = agent.calls.get(ev.tool_call_id);
      if (call) Object.assign(call, { end: ev.ts, content: data.content, size: data.size, error: data.is_error });
      drawAgent(agent);
      break;
    }
    case "compaction":
    case "warning": {
      const agent = agentNode(ev.agent_id, parent);
      const text =
        type === "warning"
          ? data.reason || JSON.stringify(data)
          : `context compacted: ${data.messages_before} → ${data.messages_after} messages`;
      agent.entries.push({ kind: "note", ts: ev.ts, text });
      drawAgent(agent);
      break;
    }
    case "subagent.message": {
      const agent = agentNode(ev.agent_id, parent);
      agent.status = "running";
      agent.ended = null;
      agent.messages = data.messages || agent.messages + 1;
      agent.entries.push({ kind: "note", ts: ev.ts, text: `follow-up ${agent.messages}: ${data.message || ""}` });
      drawAgent(agent);
      break;
    }
    case "subagent.heartbeat": {
      const agent = agentNode(ev.agent_id, parent);
      if (data.usage) agent.usage = data.usage;
      drawAgent(agent);
      break;
    }
    case "subagent.completed":
    case "agent.completed": {
      const agent = agentNode(ev.agent_id, parent);
      agent.status = data.status || agent.status;
      if (type === "subagent.completed" || agent.id === "lead") agent.ended = ev.ts;
      if (typeof data.steps === "number") agent.steps = data.steps;
      if (typeof data.messages === "number") agent.messages = data.messages;
      if (data.usage) agent.usage = data.usage;
      if (data.error) agent.summary = agent.error = data.error;
      if (Array.isArray(data.artifacts) && !agent.artifacts.length) {
        agent.artifacts = data.artifacts.map((path) => ({ relative_path: path, size: null }));
      }
      if (type === "subagent.completed") soonRecord();
      drawAgent(agent);
      break;
    }
    case "run.completed": {
      tree.done = true;
      const lead = agentNode("lead");
      lead.status = data.status || "completed";
      tree.end = lead.ended = data.status === "interrupted" ? tree.last : ev.ts;
      setStatus(lead.status);
      showFinal(data.final, data.error);
      if (data.usage) {
        tree.input = data.usage.input_tokens || 0;
        tree.output = data.usage.output_tokens || 0;
        if ("cost_usd" in data.usage) tree.cost = data.usage.cost_usd;
      }
      setStats();
      drawAgent(lead);
      clearInterval(tree.timer);
      loadRecord(tree.runId);
      loadRuns().catch(() => {});
      ThreadView.refresh(tree.runId);
      break;
    }
  }
}

function showFinal(final, error) {
  tree.final = final || "";
  const box = $("run-final");
  if (final) box.replaceChildren(Markdown.render(final));
  else box.replaceChildren(el("span", { class: "muted", text: error || "The run ended without an answer." }));
}

// Read the stored records again a moment after subagents finish (their files' sizes, summaries):
// at most once in that moment, which grows with the run, as the record does.
function soonRecord() {
  if (tree.recordTimer || tree.done) return;
  const runId = tree.runId;
  tree.recordTimer = setTimeout(
    () => {
      if (!tree || tree.runId !== runId) return;
      tree.recordTimer = null;
      loadRecord(runId);
    },
    Math.min(10_000, 700 + 5 * tree.subagents),
  );
}

// The stored record of the run: each finished subagent's summary, typed result, files and final
// status, in the order the lead called them.
async function loadRecord(runId) {
  try {
    const run = await api("GET", `/runs/${encodeURIComponent(runId)}`);
    if (!tree || tree.runId !== runId) return;
    for (const s of run.subagents || []) {
      const agent = agentNode(s.id, s.parent_agent_id || "lead");
      if (agent.messages > (s.messages || 0)) continue; // a follow-up runs: the record is older
      Object.assign(agent, {
        background: Boolean(s.background),
        depth: s.depth || 1,
        messages: s.messages || 0,
        type: s.type,
        description: s.description,
        status: s.status,
        steps: s.steps,
        usage: s.usage,
        result: s.result,
        error: s.error || "",
        artifacts: s.artifacts || [],
        skipped: s.skipped || [],
        record: s,
      });
      agent.summary = s.summary || s.error || "";
      if (agent.started === null && s.started_at) agent.started = Date.parse(s.started_at) / 1000;
      if (agent.ended === null && s.completed_at) agent.ended = Date.parse(s.completed_at) / 1000;
      if (run.status !== "running") agent.dom.li.parentNode.append(agent.dom.li); // in call order, once all are in
      drawAgent(agent);
    }
    if (run.workflow) {
      for (const a of run.workflow.agents || []) {
        const agent = a.id && tree.agents.get(a.id);
        if (agent) placeInPhase(agent, a.phase, "lead"); // a workflow's agents are the lead's (or the run's)
      }
      for (const phase of tree.phases.values()) drawPhase(phase);
      drawWorkflow(run.workflow, run.workflow_script);
    }
    if (run.status !== "running" && run.final && run.final !== tree.final) {
      showFinal(run.final, run.error); // an answer longer than an event holds
    }
    if (run.error) showError("run-detail-error", run.error);
  } catch (err) {
    showError("run-detail-error", err.message);
  }
}

// -- timeline and drill-down ----------------------------------------------------------------

function pickAgent(id) {
  if (!tree || !tree.agents.has(id)) return;
  const hash = `#/runs/${encodeURIComponent(tree.runId)}/${encodeURIComponent(id)}`;
  if (location.hash !== hash) history.replaceState(null, "", hash);
  selectAgent(id);
}

function selectAgent(id) {
  if (!tree) return;
  const before = tree.agents.get(tree.selected);
  tree.selected = id || "lead";
  tree.preview = null;
  if (before) before.dom.row.classList.remove("selected");
  const agent = tree.agents.get(tree.selected);
  if (agent) agent.dom.row.classList.add("selected");
  if (agent && agent.id !== "lead" && !agent.record && agent.status !== "running") soonRecord();
  redraw();
}

// Draw the timeline (and, if `detail`, the picked agent) again, once per frame however many
// events came.
function redraw(detail = true) {
  tree.detailStale = tree.detailStale || detail;
  if (tree.drawing) return;
  tree.drawing = true;
  const shown = tree;
  requestAnimationFrame(() => {
    if (tree !== shown) return;
    tree.drawing = false;
    drawTimeline();
    if (tree.detailStale) drawDetail();
    tree.detailStale = false;
  });
}

function drawTimeline() {
  const agents = [...tree.agents.values()];
  const from = tree.start ?? Math.min(...agents.map((a) => a.started ?? Infinity));
  if (!Number.isFinite(from)) return;
  const to = tree.end ?? (tree.done ? tree.last : Math.max(Date.now() / 1000, tree.last ?? from));
  const rows = agents.map((a) => ({
    id: a.id,
    label: a.id,
    sub: [a.type, a.background ? "background" : "", a.messages ? plural(a.messages, "follow-up") : ""]
      .filter(Boolean)
      .join(" · "),
    start: a.started,
    end: a.ended ?? (tree.done ? to : null),
    status: a.status,
    note: `${fmt.format(tokens(a.usage))} tok`,
    spans: spansOf(a),
  }));
  Timeline.draw($("timeline"), rows, { from, to, selected: tree.selected, onPick: pickAgent, attr: "data-agent" });
  if (!tree.done && !tree.timer) tree.timer = setInterval(tick, 1000);
}

// When the agent waited for its model (a turn: its request to its answer) and ran tools (a call:
// started to completed), for its bar in the timeline.
function spansOf(agent) {
  const spans = [];
  for (const e of agent.entries) {
    if (e.kind === "turn" && e.index !== null) spans.push({ kind: "model", start: e.ts, end: e.end });
    else if (e.kind === "call") spans.push({ kind: "tool", start: e.ts, end: e.end });
  }
  return spans;
}

// Once a second while the run goes on: running bars and times grow.
function tick() {
  if (!tree || tree.done) return;
  setStats();
  const picked = tree.agents.get(tree.selected);
  redraw(Boolean(picked && picked.status === "running"));
}

function drawDetail() {
  const agent = tree.agents.get(tree.selected);
  const box = $("agent-detail");
  if (!agent) {
    const hint = "Pick an agent in the timeline or the tree: its calls show here.";
    box.replaceChildren(el("p", { class: "muted", text: hint }));
    return;
  }
  const list = box.querySelector(".calls");
  const scroll = list ? list.scrollTop : 0;
  const usage = agent.usage || {};
  const end = agent.ended ?? (tree.done ? tree.end : Date.now() / 1000);
  const facts = [
    agent.started === null ? "" : Timeline.seconds(Math.max(0, end - agent.started)),
    plural(agent.steps, "step"),
    `${fmt.format(usage.input_tokens || 0)} in · ${fmt.format(usage.output_tokens || 0)} out tokens`,
    agent.usage ? `cost ${money(usage.cost_usd)}` : "",
  ].filter(Boolean);
  const parts = [
    el(
      "div",
      { class: "detail-head" },
      el("span", { class: `dot ${agent.status}` }),
      el("span", { class: "name", text: agent.id }),
      agent.type ? el("span", { class: "type", text: agent.type }) : null,
      badge(agent.status),
      el("span", { class: "meta", text: facts.join(" · ") }),
    ),
    agent.description ? el("p", { class: "detail-desc", text: agent.description }) : null,
  ];
  const record = agent.record;
  if (record && record.summary) parts.push(el("h4", { text: "Summary" }), Markdown.render(record.summary));
  if (agent.error) parts.push(el("p", { class: "error", text: agent.error }));
  if (record && record.result !== null && record.result !== undefined) {
    const result = bounded(JSON.stringify(record.result, null, 2), ARG_CHARS);
    parts.push(el("h4", { text: "Result" }), el("pre", { class: "call-args", text: result }));
  }
  if (agent.artifacts.length || (agent.skipped && agent.skipped.length)) parts.push(drawFiles(agent));
  if (record) parts.push(changesBox(record));
  const calls = agent.entries.map((e) => entryNode(tree, agent, e));
  parts.push(
    el("h4", { text: `Turns (${plural(agent.entries.filter((e) => e.kind === "call").length, "tool call")})` }),
    calls.length ? el("ol", { class: "calls" }, ...calls) : el("p", { class: "muted small", text: "No turn yet." }),
  );
  box.replaceChildren(...parts.filter(Boolean));
  const again = box.querySelector(".calls");
  if (again) again.scrollTop = scroll;
}

function drawFiles(agent) {
  const shown = tree.preview && tree.preview.agent === agent.id ? tree.preview : null;
  return filesBox(agent.artifacts, agent.skipped, shown, (path) => previewFile(agent.id, path));
}

function previewFile(agentId, path) {
  const runId = tree.runId;
  loadPreview(path, (shown) => {
    if (!tree || tree.runId !== runId || tree.selected !== agentId) return;
    if (shown.file || shown.error) {
      if (!tree.preview || tree.preview.path !== path) return; // another file was picked since
    }
    tree.preview = { agent: agentId, ...shown };
    redraw();
  }, runId);
}

// -- open, start, cancel --------------------------------------------------------------------

async function openRun(runId, agentId) {
  newTree(runId, agentId);
  showError("run-detail-error", "");
  $("run-id").textContent = runId;
  $("run-prompt").textContent = "";
  let run;
  try {
    run = await api("GET", `/runs/${encodeURIComponent(runId)}`);
  } catch (err) {
    showError("run-detail-error", err.message);
    return;
  }
  if (!tree || tree.runId !== runId) return;
  $("run-prompt").textContent = run.prompt;
  $("stat-model").textContent = run.model || "–";
  setStatus(run.status);
  Approvals.open(runId);
  ThreadView.show(run);
  following = new AbortController();
  followEvents(
    `/runs/${encodeURIComponent(runId)}/events`,
    onRunEvent,
    (type) => type === "run.completed",
    following.signal,
  );
}

async function startRun(event) {
  event.preventDefault();
  showError("run-error", "");
  const body = { prompt: $("prompt").value };
  const model = $("model").value.trim();
  const parallel = $("max-parallel").value.trim();
  if (model) body.model = model;
  if (parallel) body.max_parallel = Number(parallel);
  const button = $("start-run");
  button.disabled = true;
  try {
    const { run_id } = await api("POST", "/runs", body);
    $("prompt").value = "";
    location.hash = `#/runs/${encodeURIComponent(run_id)}`;
  } catch (err) {
    showError("run-error", err.message);
  } finally {
    button.disabled = false;
  }
}

// Stop one running subagent (its row's Stop button): the lead gets its result and goes on.
async function stopAgent(event, agentId) {
  event.stopPropagation();
  if (!tree) return;
  const button = event.currentTarget;
  button.disabled = true;
  button.textContent = "Stopping…";
  try {
    await api("POST", `/runs/${encodeURIComponent(tree.runId)}/agents/${encodeURIComponent(agentId)}/stop`, {
      reason: "stopped from the web page",
    });
  } catch (err) {
    showError("run-detail-error", err.message);
    button.disabled = false;
    button.textContent = "Stop";
  }
}

async function cancelRun() {
  if (!tree) return;
  $("cancel-run").disabled = true;
  try {
    const run = await api("POST", `/runs/${encodeURIComponent(tree.runId)}/cancel`);
    setStatus(run.status);
  } catch (err) {
    showError("run-detail-error", err.message);
  } finally {
    $("cancel-run").disabled = false;
  }
}
