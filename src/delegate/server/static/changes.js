// What an overlay subagent changed (docs/isolation.md): each path with its operation and size, a
// diff per file (lines added and removed coloured), and the conflicts that kept it from merging.
// Built from the stored record ({isolation, changes, conflicts, layer, status}); text as text.
"use strict";

// The "Changes" box of a subagent's record, or null when it changed nothing and nothing conflicted.
function changesBox(record) {
  const changes = record.changes || [];
  const conflicts = record.conflicts || [];
  if (!changes.length && !conflicts.length) return null;
  const box = el("div", { class: "changes" }, el("h4", { text: `Changes (${changesState(record)})` }));
  if (conflicts.length) {
    const rows = conflicts.map((c) =>
      el(
        "li",
        { class: "conflict", "data-path": c.path },
        el("span", { class: "file-path mono", text: c.path }),
        el("span", { class: "muted small", text: c.reason }),
        c.version ? el("span", { class: "small", text: `its version: ${c.version}` }) : null,
      ),
    );
    box.append(el("ul", { class: "conflict-list" }, ...rows));
  }
  for (const change of changes) box.append(changeNode(change));
  return box;
}

function changesState(record) {
  const conflicts = record.conflicts || [];
  if (record.isolation === "read-only") return "refused: its type is read-only";
  if (conflicts.length) return "not merged: the workspace changed these files meanwhile";
  if (record.layer) return `not applied, kept in ${record.layer}`;
  return "merged into the workspace";
}

function changeNode(change) {
  const size = change.op === "delete" ? "" : bytes(change.bytes || 0);
  const head = el(
    "summary",
    {},
    el("span", { class: `op op-${change.op}`, text: change.op }),
    el("span", { class: "file-path mono", text: change.path }),
    el("span", { class: "file-size", text: size }),
  );
  const body = change.diff
    ? el("pre", { class: "diff" }, ...change.diff.split("\n").map(diffLine))
    : el("p", { class: "muted small", text: change.op === "delete" ? "deleted" : "no diff (not text, or too large)" });
  return el("details", { class: "change", "data-path": change.path }, head, body);
}

function diffLine(line) {
  let kind = "same";
  if (line.startsWith("+++") || line.startsWith("---")) kind = "file";
  else if (line.startsWith("@@")) kind = "hunk";
  else if (line.startsWith("+")) kind = "add";
  else if (line.startsWith("-")) kind = "del";
  return el("span", { class: `diff-${kind}`, text: `${line}\n` });
}
