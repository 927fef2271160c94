// A small Markdown renderer for text the page did not write (final answers, subagent summaries).
// It builds DOM nodes and sets text with textContent only: raw HTML in the text stays text, no
// attribute is ever taken from the text except a link's href, kept only for http, https and
// mailto URLs. Supported: headings, paragraphs, emphasis, strong, strikethrough, code spans,
// fenced and indented code, block quotes, ordered and bullet lists (nested), tables, rules, links.
"use strict";

const Markdown = (() => {
  const MAX_DEPTH = 8; // block quotes and lists nested deeper render as plain text
  const SAFE_SCHEMES = new Set(["http:", "https:", "mailto:"]);

  const FENCE = /^ {0,3}(`{3,}|~{3,})\s*([^`]*)$/;
  const HEADING = /^ {0,3}(#{1,6})(?=\s|$)(.*)$/;
  const RULE = /^ {0,3}([-*_])(?:\s*\1){2,}\s*$/;
  const QUOTE = /^ {0,3}> ?(.*)$/;
  const ITEM = /^( {0,12})([-*+]|\d{1,9}[.)])(\s+|$)(.*)$/;
  const TABLE_RULE = /^\s*\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?\s*$/;
  const INDENTED = /^( {4}|\t)/;

  function node(tag, text) {
    const n = document.createElement(tag);
    if (text !== undefined) n.textContent = text;
    return n;
  }

  // The href of a link, or null when its scheme is not one we allow (javascript:, data:, ...).
  function safeHref(raw) {
    const url = raw.trim().replace(/^<(.*)>$/, "$1");
    if (!/^(https?:|mailto:)/i.test(url)) return null;
    try {
      const parsed = new URL(url);
      return SAFE_SCHEMES.has(parsed.protocol) ? parsed.href : null;
    } catch {
      return null;
    }
  }

  function link(href, children) {
    const a = node("a");
    a.setAttribute("href", href);
    a.setAttribute("rel", "noopener noreferrer nofollow");
    a.setAttribute("target", "_blank");
    a.append(...children);
    return a;
  }

  // -- inline ----------------------------------------------------------------------------------

  const EMPHASIS = [
    ["**", "strong"],
    ["__", "strong"],
    ["~~", "del"],
    ["*", "em"],
    ["_", "em"],
  ];
  const BARE_URL = /^(https?:\/\/[^\s<>()]*[^\s<>().,;:!?'"\]])/;
  const WORD = /[\p{L}\p{N}]/u;
  const WINDOW = 4096;

  // Find the `]` that closes the `[` at `open` (brackets nest), or -1.
  function closingBracket(text, open) {
    let depth = 0;
    for (let i = open; i < text.length && i < open + WINDOW; i++) {
      const c = text[i];
      if (c === "\\") i++;
      else if (c === "[") depth++;
      else if (c === "]" && --depth === 0) return i;
    }
    return -1;
  }

  // `(url "title")` right after a link's text, at `at`: [url, end index] or null.
  function destination(text, at) {
    if (text[at] !== "(") return null;
    let depth = 0;
    for (let i = at; i < text.length && i < at + 2048; i++) {
      const c = text[i];
      if (c === "\\") i++;
      else if (c === "(") depth++;
      else if (c === ")" && --depth === 0) {
        const inner = text.slice(at + 1, i).trim();
        const url = inner.split(/\s+/)[0] || "";
        return [url, i + 1];
      }
    }
    return null;
  }

  // A closing delimiter for emphasis opened at `from`: not after a space, and for `_` not inside a word.
  // Looked for within `WINDOW` characters, so text full of unmatched delimiters stays fast.
  function closer(text, delim, from) {
    let at = text.indexOf(delim, from);
    while (at >= 0 && at < from + WINDOW) {
      const before = text[at - 1];
      const after = text[at + delim.length] || "";
      const doubled = delim.length === 1 && (after === delim || before === delim);
      const ok = before !== undefined && !/\s/.test(before) && before !== "\\" && !doubled;
      if (ok && !(delim[0] === "_" && WORD.test(after))) return at;
      at = text.indexOf(delim, at + (doubled ? 2 : 1));
    }
    return -1;
  }

  function inline(text, depth = 0) {
    const out = [];
    let plain = "";
    const flush = () => {
      if (plain) out.push(document.createTextNode(plain));
      plain = "";
    };
    let i = 0;
    while (i < text.length) {
      const c = text[i];
      const rest = text.slice(i, i + 16);
      if (c === "\\" && i + 1 < text.length) {
        if (text[i + 1] === "\n") {
          flush();
          out.push(node("br"));
          i += 2;
          continue;
        }
        if (/[!-/:-@[-`{-~]/.test(text[i + 1])) {
          plain += text[i + 1];
          i += 2;
          continue;
        }
      }
      if (c === "\n" && plain.endsWith("  ")) {
        plain = plain.replace(/ +$/, "");
        flush();
        out.push(node("br"));
        i += 1;
        continue;
      }
      if (c === "`") {
        let n = i;
        while (text[n] === "`") n++;
        const run = text.slice(i, n);
        const end = text.indexOf(run, i + run.length);
        if (end >= 0 && end < i + WINDOW && text[end + run.length] !== "`") {
          let code = text.slice(i + run.length, end).replace(/\n/g, " ");
          if (/^ .*[^ ].* $/.test(code)) code = code.slice(1, -1);
          flush();
          out.push(node("code", code));
          i = end + run.length;
          continue;
        }
        plain += run;
        i += run.length;
        continue;
      }
      if (c === "[" || (c === "!" && text[i + 1] === "[")) {
        const open = c === "!" ? i + 1 : i;
        const close = closingBracket(text, open);
        const dest = close > 0 ? destination(text, close + 1) : null;
        if (dest) {
          const label = text.slice(open + 1, close);
          const href = safeHref(dest[0]);
          const children = depth < MAX_DEPTH ? inline(label, depth + 1) : [document.createTextNode(label)];
          flush();
          // An image is shown as a link to it: the page loads nothing from elsewhere.
          out.push(href ? link(href, children) : node("span", label));
          i = dest[1];
          continue;
        }
      }
      if (c === "<") {
        const auto = /^<((?:https?|mailto):[^\s<>]+)>/i.exec(text.slice(i, i + 2048));
        const href = auto && safeHref(auto[1]);
        if (href) {
          flush();
          out.push(link(href, [document.createTextNode(auto[1])]));
          i += auto[0].length;
          continue;
        }
      }
      if ((c === "h" || c === "H") && /^https?:\/\//i.test(rest) && !WORD.test(text[i - 1] || "")) {
        const bare = BARE_URL.exec(text.slice(i, i + 2048));
        const href = bare && safeHref(bare[1]);
        if (href) {
          flush();
          out.push(link(href, [document.createTextNode(bare[1])]));
          i += bare[1].length;
          continue;
        }
      }
      const emphasis = depth < MAX_DEPTH && EMPHASIS.find(([d]) => text.startsWith(d, i));
      if (emphasis) {
        const [delim, tag] = emphasis;
        const next = text[i + delim.length] || "";
        const intraword = delim[0] === "_" && WORD.test(text[i - 1] || "");
        const end = next && !/\s/.test(next) && !intraword ? closer(text, delim, i + delim.length + 1) : -1;
        if (end > 0) {
          flush();
          const wrapped = node(tag);
          wrapped.append(...inline(text.slice(i + delim.length, end), depth + 1));
          out.push(wrapped);
          i = end + delim.length;
          continue;
        }
        plain += delim;
        i += delim.length;
        continue;
      }
      plain += c;
      i += 1;
    }
    flush();
    return out;
  }

  // -- blocks ----------------------------------------------------------------------------------

  function cells(line) {
    let row = line.trim();
    if (row.startsWith("|")) row = row.slice(1);
    if (row.endsWith("|") && !row.endsWith("\\|")) row = row.slice(0, -1);
    const out = [];
    let cell = "";
    for (let i = 0; i < row.length; i++) {
      if (row[i] === "\\" && row[i + 1] === "|") {
        cell += "|";
        i++;
      } else if (row[i] === "|") {
        out.push(cell.trim());
        cell = "";
      } else cell += row[i];
    }
    out.push(cell.trim());
    return out;
  }

  function table(lines, depth) {
    const head = cells(lines[0]);
    const aligns = cells(lines[1]).map((c) =>
      c.startsWith(":") && c.endsWith(":") ? "center" : c.endsWith(":") ? "right" : c.startsWith(":") ? "left" : "",
    );
    const t = node("table");
    const row = (values, tag) => {
      const tr = node("tr");
      for (let k = 0; k < head.length; k++) {
        const cell = node(tag);
        if (aligns[k]) cell.style.textAlign = aligns[k];
        cell.append(...inline(values[k] || "", depth + 1));
        tr.append(cell);
      }
      return tr;
    };
    const thead = node("thead");
    thead.append(row(head, "th"));
    const tbody = node("tbody");
    for (const line of lines.slice(2)) tbody.append(row(cells(line), "td"));
    t.append(thead, tbody);
    const wrap = node("div");
    wrap.className = "md-table";
    wrap.append(t);
    return wrap;
  }

  function startsBlock(line, next) {
    return (
      FENCE.test(line) ||
      HEADING.test(line) ||
      RULE.test(line) ||
      QUOTE.test(line) ||
      ITEM.test(line) ||
      (line.includes("|") && next !== undefined && TABLE_RULE.test(next) && next.includes("-"))
    );
  }

  // The lines of the list that starts at `lines[i]`, split into items: [{ordered, start, lines}].
  function listItems(lines, i) {
    const first = ITEM.exec(lines[i]);
    const ordered = /\d/.test(first[2]);
    const base = first[1].length;
    const items = [];
    let current = null;
    let blank = false;
    for (; i < lines.length; i++) {
      const line = lines[i];
      const m = ITEM.exec(line);
      if (m && m[1].length <= base + 1 && /\d/.test(m[2]) === ordered) {
        const width = m[1].length + m[2].length + Math.min(Math.max(m[3].length, 1), 4);
        current = { width, lines: [m[4]], loose: blank && items.length > 0 };
        items.push(current);
        blank = false;
        continue;
      }
      if (!line.trim()) {
        blank = true;
        current.lines.push("");
        continue;
      }
      const indent = /^ */.exec(line)[0].length;
      if (indent >= current.width || indent > base + 1) {
        current.lines.push(line.slice(Math.min(indent, current.width)));
        if (blank) current.loose = true;
        blank = false;
        continue;
      }
      if (!blank && !startsBlock(line, lines[i + 1])) {
        current.lines.push(line.trim()); // a lazy continuation of the item's paragraph
        continue;
      }
      break;
    }
    while (current.lines.length && !current.lines[current.lines.length - 1].trim()) current.lines.pop();
    return { ordered, start: Number.parseInt(first[2], 10), items, end: i };
  }

  function blocks(lines, depth) {
    const out = [];
    let i = 0;
    while (i < lines.length) {
      const line = lines[i];
      if (!line.trim()) {
        i++;
        continue;
      }
      const fence = FENCE.exec(line);
      if (fence) {
        const code = [];
        i++;
        while (i < lines.length && !new RegExp(`^ {0,3}${fence[1][0]}{${fence[1].length},}\\s*$`).test(lines[i])) {
          code.push(lines[i]);
          i++;
        }
        i++; // the closing fence (or the end of the text)
        const pre = node("pre");
        const codeNode = node("code", code.join("\n"));
        const lang = fence[2].trim().split(/\s+/)[0];
        if (lang) pre.dataset.lang = lang;
        pre.append(codeNode);
        out.push(pre);
        continue;
      }
      if (INDENTED.test(line)) {
        const code = [];
        while (i < lines.length && (INDENTED.test(lines[i]) || !lines[i].trim())) {
          code.push(lines[i].replace(INDENTED, ""));
          i++;
        }
        while (code.length && !code[code.length - 1].trim()) code.pop();
        const pre = node("pre");
        pre.append(node("code", code.join("\n")));
        out.push(pre);
        continue;
      }
      const heading = HEADING.exec(line);
      if (heading) {
        const h = node(`h${heading[1].length}`);
        h.append(...inline(heading[2].trim().replace(/(^|\s)#+$/, "").trim(), depth));
        out.push(h);
        i++;
        continue;
      }
      if (RULE.test(line)) {
        out.push(node("hr"));
        i++;
        continue;
      }
      if (QUOTE.test(line)) {
        const quoted = [];
        while (i < lines.length && lines[i].trim()) {
          const m = QUOTE.exec(lines[i]);
          quoted.push(m ? m[1] : lines[i]);
          i++;
        }
        const q = node("blockquote");
        if (depth < MAX_DEPTH) q.append(...blocks(quoted, depth + 1));
        else q.textContent = quoted.join("\n");
        out.push(q);
        continue;
      }
      if (ITEM.test(line)) {
        const list = listItems(lines, i);
        const l = node(list.ordered ? "ol" : "ul");
        if (list.ordered && list.start !== 1) l.setAttribute("start", String(list.start));
        const loose = list.items.some((item) => item.loose);
        for (const item of list.items) {
          const li = node("li");
          if (depth >= MAX_DEPTH) li.textContent = item.lines.join("\n");
          else {
            const inner = blocks(item.lines, depth + 1);
            // A tight list shows its items' paragraphs without paragraph spacing.
            for (const child of inner) {
              if (!loose && child.tagName === "P") li.append(...child.childNodes);
              else li.append(child);
            }
          }
          l.append(li);
        }
        out.push(l);
        i = list.end;
        continue;
      }
      if (line.includes("|") && i + 1 < lines.length && TABLE_RULE.test(lines[i + 1]) && lines[i + 1].includes("-")) {
        const rows = [line, lines[i + 1]];
        i += 2;
        while (i < lines.length && lines[i].trim() && lines[i].includes("|")) {
          rows.push(lines[i]);
          i++;
        }
        out.push(table(rows, depth));
        continue;
      }
      const para = [];
      while (i < lines.length && lines[i].trim() && !(para.length && startsBlock(lines[i], lines[i + 1]))) {
        para.push(lines[i].replace(/^ {1,3}/, ""));
        i++;
      }
      const p = node("p");
      p.append(...inline(para.join("\n"), depth));
      out.push(p);
    }
    return out;
  }

  // A <div class="md"> holding `text` rendered; never anything the text could make run.
  function render(text) {
    const root = node("div");
    root.className = "md";
    root.append(...blocks(String(text || "").replace(/\r\n?/g, "\n").split("\n"), 0));
    return root;
  }

  return { render };
})();
