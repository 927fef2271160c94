// The Memory view: the signed-in user's notes (what its agents keep from one run for the next),
// searched with the store's full-text search, added and forgotten; and the skills its runs can
// find, each enabled or disabled for this user alone (over the operator's default). Everything
// is read from and written to the owner-scoped routes /memory and /skills.
"use strict";

const MemoryView = (() => {
  let query = "";

  function noteRow(note) {
    const who = note.agent ? ` · ${note.agent}'s own` : "";
    return el(
      "li",
      { class: "note", "data-note": String(note.id) },
      el("div", { class: "note-head small muted" }, `#${note.id} · ${note.scope}${who} · ${when(note.updated_at)}`),
      el("div", { class: "note-text", text: note.text }),
      el("button", { type: "button", class: "link forget", text: "Forget", onclick: () => forget(note.id) }),
    );
  }

  async function loadNotes() {
    const path = query ? `/memory?q=${encodeURIComponent(query)}` : "/memory";
    let notes;
    try {
      ({ notes } = await api("GET", path));
    } catch (err) {
      return showError("memory-error", err.message);
    }
    showError("memory-error", "");
    $("note-list").replaceChildren(...notes.map(noteRow));
    $("note-list-empty").textContent = query ? `No note matches “${query}”.` : "No notes yet: agents keep them with memory_write.";
    $("note-list-empty").hidden = notes.length > 0;
  }

  async function add(event) {
    event.preventDefault();
    const text = $("note-text").value.trim();
    if (!text) return;
    try {
      await api("POST", "/memory", { text });
    } catch (err) {
      return showError("memory-error", err.message);
    }
    $("note-text").value = "";
    await loadNotes();
  }

  async function forget(id) {
    try {
      await api("DELETE", `/memory/${id}`);
    } catch (err) {
      return showError("memory-error", err.message);
    }
    await loadNotes();
  }

  function skillRow(skill) {
    const box = el("input", {
      type: "checkbox",
      checked: skill.enabled,
      "aria-label": `Enable ${skill.name}`,
      onchange: (e) => choose(skill.name, e.target.checked),
    });
    const whose = skill.choice === null ? "the default" : "your choice";
    return el(
      "tr",
      { "data-skill": skill.name },
      el("td", {}, box),
      el("td", { class: "mono", text: skill.name }),
      el("td", { text: skill.description }),
      el("td", { class: "small muted whose", text: whose }),
      el("td", {}, skill.choice === null ? null : el("button", { type: "button", class: "link", text: "Use default", onclick: () => reset(skill.name) })),
    );
  }

  async function loadSkills() {
    let skills;
    try {
      ({ skills } = await api("GET", "/skills"));
    } catch (err) {
      return showError("skills-error", err.message);
    }
    showError("skills-error", "");
    $("skill-table").querySelector("tbody").replaceChildren(...skills.map(skillRow));
    $("skill-empty").hidden = skills.length > 0;
  }

  async function choose(name, enabled) {
    try {
      await api("PUT", `/skills/${encodeURIComponent(name)}`, { enabled });
    } catch (err) {
      showError("skills-error", err.message);
    }
    await loadSkills();
  }

  async function reset(name) {
    try {
      await api("DELETE", `/skills/${encodeURIComponent(name)}`);
    } catch (err) {
      showError("skills-error", err.message);
    }
    await loadSkills();
  }

  function show() {
    return Promise.all([loadNotes(), loadSkills()]);
  }

  document.addEventListener("DOMContentLoaded", () => {
    $("note-form").addEventListener("submit", add);
    $("note-search").addEventListener("submit", (e) => {
      e.preventDefault();
      query = $("note-query").value.trim();
      loadNotes();
    });
  });

  return { show };
})();
