// Each agent's todo list on the run view, under its line in the tree: the steps it planned with
// todo_write, the one in progress marked, as the terminal's live tree shows them. Kept apart from
// run.js, which calls Todos.onEvent(type, ev) for each of a run's events; a list is drawn from
// the agent's latest `todo.updated` event, so a reload (the events replayed) shows it again.
"use strict";

const Todos = (() => {
  const MARKS = { completed: "[x]", in_progress: "[>]", pending: "[ ]" };

  function draw(li, todos) {
    let list = li.querySelector(":scope > .todos");
    if (!list) {
      list = el("ul", { class: "todos", "aria-label": "todo list" });
      li.querySelector(":scope > .node").after(list);
    }
    list.replaceChildren(
      ...todos.map((t) =>
        el("li", { class: `todo ${t.status}` }, el("span", { class: "mark mono", text: MARKS[t.status] || "[ ]" }), ` ${t.content}`),
      ),
    );
    list.hidden = todos.length === 0;
  }

  function onEvent(type, ev) {
    if (type !== "todo.updated") return;
    const li = document.querySelector(`#agent-tree li[data-agent="${CSS.escape(ev.agent_id)}"]`);
    if (li) draw(li, (ev.data && ev.data.todos) || []);
  }

  return { onEvent };
})();
