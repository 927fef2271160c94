// Markdown for text the page did not write (final answers, subagent summaries), rendered by
// markdown-it and sanitised by DOMPurify, both vendored in static/vendor/ (its README.md names the
// versions). markdown-it is set to take no HTML from the text (raw HTML stays text) and to make
// links only of http, https and mailto URLs; DOMPurify then keeps only the elements and attributes
// below, so what reaches the page is inert even if a parser bug let something through. An image is
// shown as a link to it: the page loads nothing from elsewhere. Links open in a new tab, with
// rel="noopener noreferrer nofollow".
"use strict";

const Markdown = (() => {
  const SAFE_URL = /^(?:https?:|mailto:)/i;
  const ALIGN = /^text-align:(left|right|center)$/;
  // markdown-it drops what nests past its maxNesting (100 block quotes or list levels): text that
  // nests past DEEPEST is shown whole as plain text instead.
  const DEEPEST = 32;

  const md = window.markdownit({ html: false, linkify: true, typographer: false });
  md.linkify.set({ fuzzyLink: false, fuzzyEmail: false }); // only URLs written with their scheme: `notes.md` stays a name
  md.validateLink = (url) => SAFE_URL.test(url);

  const escape = md.utils.escapeHtml;
  md.renderer.rules.image = (tokens, i, options, env, self) => {
    const src = tokens[i].attrGet("src");
    const alt = self.renderInlineAsText(tokens[i].children, options, env);
    return `<a href="${escape(src)}">${escape(alt || src)}</a>`;
  };
  // A table scrolls on its own in a narrow box; a column's alignment is a class, since the page's
  // Content-Security-Policy does not apply style attributes.
  md.renderer.rules.table_open = () => '<div class="md-table"><table>\n';
  md.renderer.rules.table_close = () => "</table></div>\n";
  md.core.ruler.push("align_class", (state) => {
    for (const token of state.tokens) {
      const align = ALIGN.exec((token.type === "th_open" || token.type === "td_open") && token.attrGet("style"));
      if (!align) continue;
      token.attrs = token.attrs.filter(([name]) => name !== "style");
      token.attrSet("class", `md-align-${align[1]}`);
    }
  });

  md.core.ruler.after("block", "too_deep", (state) => {
    state.env.tooDeep = state.tokens.some((token) => token.level > DEEPEST);
  });

  const PURIFY = {
    ALLOWED_TAGS: ["p", "h1", "h2", "h3", "h4", "h5", "h6", "ul", "ol", "li", "pre", "code", "blockquote", "hr",
      "a", "strong", "em", "s", "br", "div", "table", "thead", "tbody", "tr", "th", "td"],
    ALLOWED_ATTR: ["href", "class", "start"],
    ALLOWED_URI_REGEXP: SAFE_URL,
    RETURN_DOM_FRAGMENT: true,
  };

  // A <div class="md"> holding `text` rendered; never anything the text could make run.
  function render(text) {
    const root = document.createElement("div");
    root.className = "md";
    const env = {};
    const html = md.render(String(text || ""), env);
    if (env.tooDeep) {
      const plain = document.createElement("p");
      plain.className = "md-plain";
      plain.textContent = String(text);
      root.append(plain);
      return root;
    }
    root.append(DOMPurify.sanitize(html, PURIFY));
    for (const a of root.querySelectorAll("a")) {
      a.setAttribute("rel", "noopener noreferrer nofollow");
      a.setAttribute("target", "_blank");
    }
    return root;
  }

  return { render };
})();
