// A workflow in the run view: its phases in the agent tree, each with its agents counted by
// status (live, from the events), and its record (count line, phases, script with the lines that
// started agents). Uses the run view's `tree` (run.js).
"use strict";

// A workflow phase in the tree: a line with its name and its agents counted by status, its agents
// under it.
function phaseNode(name, parentId) {
  let phase = tree.phases.get(name);
  if (phase) return phase;
  const row = el("div", { class: "node phase-node" });
  const children = el("ul");
  const li = el("li", { "data-phase": name }, row, children);
  const parent = parentId && tree.agents.get(parentId);
  (parent ? parent.dom.children : $("agent-tree")).append(li);
  phase = { name, row, children, agents: [] };
  tree.phases.set(name, phase);
  drawPhase(phase);
  return phase;
}

function drawPhase(phase) {
  const counts = new Map();
  for (const agent of phase.agents) counts.set(agent.status, (counts.get(agent.status) || 0) + 1);
  const said = [...counts].map(([status, n]) => `${fmt.format(n)} ${status.replace("_", " ")}`).join(", ");
  phase.row.replaceChildren(
    el("span", { class: "type", text: "phase" }),
    el("span", { class: "name", text: phase.name }),
    el("span", { class: "meta", text: plural(phase.agents.length, "agent") + (said ? `: ${said}` : "") }),
  );
}

// The workflow's record: how it ended with its count line, its phases, and its script with each
// line that started agents marked with what they did.
function drawWorkflow(record, script) {
  const box = $("run-workflow");
  box.hidden = false;
  const parts = [
    el("p", { class: "workflow-line" }, el("strong", { text: `Script ${record.status}. ` }), record.line || ""),
  ];
  if (record.diverged_at_line) {
    parts.push(el("p", { class: "muted", text: `The script changed before a resume: from line ${record.diverged_at_line} on, calls ran again.` }));
  }
  const phases = record.phases || [];
  if (phases.length) {
    const rows = phases.map((p) =>
      el("tr", {},
        el("td", { text: p.name || "(none)" }),
        ...["agents", "completed", "holding", "not_holding", "failed"].map((k) => el("td", { text: fmt.format(p[k] || 0) })),
      ),
    );
    const head = el("tr", {}, ...["phase", "agents", "completed", "criteria hold", "a criterion does not hold", "failed"].map((t) => el("th", { text: t })));
    parts.push(el("table", { class: "workflow-phases" }, el("thead", {}, head), el("tbody", {}, ...rows)));
  }
  if (script) {
    const byLine = new Map();
    for (const agent of record.agents || []) {
      if (agent.line) byLine.set(agent.line, [...(byLine.get(agent.line) || []), agent]);
    }
    const lines = script.replace(/\n$/, "").split("\n").map((text, i) => {
      const agents = byLine.get(i + 1);
      const note = agents ? el("span", { class: "workflow-agents", text: `  ← ${agentsSaid(agents)}` }) : null;
      return el("div", { class: agents ? "script-line started" : "script-line" }, el("span", { class: "line-no", text: String(i + 1) }), text, note);
    });
    parts.push(el("div", { class: "workflow-script mono" }, ...lines));
  }
  box.replaceChildren(el("h3", { text: "Workflow" }), ...parts);
}

function agentsSaid(agents) {
  const counts = new Map();
  for (const a of agents) counts.set(a.status, (counts.get(a.status) || 0) + 1);
  const holding = agents.filter((a) => a.verdict === "holds").length;
  const failing = agents.filter((a) => a.verdict === "does not hold").length;
  let said = `${plural(agents.length, "agent")}: ${[...counts].map(([s, n]) => `${n} ${s}`).join(", ")}`;
  if (holding || failing) said += `; ${holding} with every criterion holding, ${failing} with a criterion not holding`;
  return said;
}

// Put a workflow's agent under its phase (once).
function placeInPhase(agent, name, parentId) {
  if (agent.phase || !name) return;
  const phase = phaseNode(name, parentId);
  agent.phase = phase;
  phase.agents.push(agent);
  phase.children.append(agent.dom.li);
}
