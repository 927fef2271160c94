// The thread of the run on screen, as a conversation: each turn's prompt, its subagents folded
// under it, its answer (the run on screen's is the final answer above it, shown once; a thread
// of one turn lists no turns); the thread's uploads; and a reply box under the last answer, which starts
// a run that continues the thread's last run (POST /runs with "continue"). Read from
// GET /threads/{id}; drawn again when a run of the thread ends.
"use strict";

const ThreadView = (() => {
  let shown = null; // { threadId, runId }: what is on screen
  const ENDED = ["completed", "aborted", "error", "timed_out", "cancelled"];

  function subagents(run) {
    const subs = run.subagents || [];
    if (!subs.length) return null;
    const items = subs.map((s) =>
      el(
        "li",
        { class: "thread-sub" },
        el("span", { class: `dot ${s.status}`, title: s.status }),
        el("span", { class: "type", text: s.type }),
        el("span", { class: "desc", text: s.description }),
        badge(s.status),
        s.summary ? el("div", { class: "thread-sub-summary" }, Markdown.render(s.summary)) : null,
      ),
    );
    return el(
      "details",
      { class: "thread-subs" },
      el("summary", { text: `${plural(subs.length, "subagent")}` }),
      el("ul", {}, ...items),
    );
  }

  function turn(run, index, onScreen) {
    const usage = run.usage || {};
    const tok = (usage.input_tokens || 0) + (usage.output_tokens || 0);
    // The run on screen has its answer once, in the final answer above the conversation.
    const answer = onScreen
      ? el("p", { class: "muted small", text: "Its answer is the final answer above." })
      : run.final
      ? Markdown.render(run.final)
      : el("p", { class: "muted", text: ENDED.includes(run.status) ? `No answer: ${run.error || run.status}` : "…" });
    return el(
      "li",
      { class: `thread-turn${onScreen ? " on-screen" : ""}`, "data-run": run.run_id },
      el(
        "div",
        { class: "thread-meta" },
        el("a", { href: `#/runs/${encodeURIComponent(run.run_id)}`, class: "mono", text: `turn ${index + 1}` }),
        badge(run.status),
        el("span", { class: "muted small", text: `${fmt.format(tok)} tokens` }),
      ),
      el("div", { class: "thread-prompt", text: run.prompt }),
      subagents(run),
      el("div", { class: "thread-answer" }, answer),
    );
  }

  function replyBox(thread) {
    const last = thread.runs[thread.runs.length - 1];
    const ended = ENDED.includes(last.status);
    const input = el("textarea", {
      id: "reply-prompt",
      rows: "3",
      placeholder: ended ? "Reply: the lead goes on from this conversation" : `Wait for ${last.run_id} to end`,
    });
    input.disabled = !ended;
    const error = el("p", { class: "error", id: "reply-error", role: "alert", hidden: true });
    const button = el("button", { type: "submit", class: "primary", id: "reply-send", text: "Reply" });
    button.disabled = !ended;
    const form = el("form", { class: "thread-reply", id: "reply-form" }, input, error, button);
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      if (!input.value.trim()) return;
      button.disabled = true;
      error.hidden = true;
      try {
        const { run_id } = await api("POST", "/runs", { prompt: input.value, continue: last.run_id });
        location.hash = `#/runs/${encodeURIComponent(run_id)}`;
      } catch (err) {
        error.textContent = err.message;
        error.hidden = false;
        button.disabled = false;
      }
    });
    return form;
  }

  function draw(thread, runId) {
    const box = $("thread");
    const usage = thread.usage || {};
    const tok = (usage.input_tokens || 0) + (usage.output_tokens || 0);
    const parts = [
      el(
        "div",
        { class: "card-head" },
        el("h3", { text: `Conversation (${plural(thread.runs.length, "turn")})` }),
        el("span", { class: "muted small", id: "thread-usage", text: `${fmt.format(tok)} tokens in this thread` }),
      ),
    ];
    const uploads = thread.uploaded_files || [];
    if (uploads.length) {
      parts.push(
        el(
          "p",
          { class: "thread-uploads small", id: "thread-uploads" },
          "Uploads in this thread: ",
          ...uploads.map((f) => el("span", { class: "mono upload", text: f.filename })),
        ),
      );
    }
    if (thread.runs.length > 1) {
      // A conversation of one turn is the run on screen: its prompt and answer are above already.
      parts.push(el("ol", { class: "thread-turns" }, ...thread.runs.map((r, i) => turn(r, i, r.run_id === runId))));
    }
    parts.push(replyBox(thread));
    box.replaceChildren(...parts);
    box.hidden = false;
  }

  // Show the thread of `run` (a GET /runs/{id} answer) under its final answer.
  async function show(run) {
    const threadId = run.thread_id || run.run_id;
    shown = { threadId, runId: run.run_id };
    $("thread").hidden = true;
    let thread;
    try {
      thread = await api("GET", `/threads/${encodeURIComponent(threadId)}`);
    } catch {
      return; // the run's own view still shows it
    }
    if (!shown || shown.runId !== run.run_id) return; // another run was opened meanwhile
    draw(thread, run.run_id);
  }

  // A run of the thread on screen ended: its answer, status and the reply box change.
  function refresh(runId) {
    if (shown && shown.runId === runId) show({ run_id: runId, thread_id: shown.threadId });
  }

  return { show, refresh };
})();
