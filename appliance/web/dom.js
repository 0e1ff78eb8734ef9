// DOM helpers every panel page shares. Elements are found by data-testid,
// the same names the end-to-end tests use.

// $ finds the element with data-testid id under root (the document).
export const $ = (id, root = document) => root.querySelector(`[data-testid="${id}"]`);

// setStatus shows text on the page's status line (red when isError).
export function setStatus(text, isError = false) {
  const line = $("status-line");
  if (!line) return;
  line.textContent = text;
  line.classList.toggle("error", isError);
}

// statusOf is what the status line shows now, to put it back later.
export function statusOf() {
  const line = $("status-line");
  return { text: line?.textContent ?? "", error: !!line?.classList.contains("error") };
}

// el builds an element: props testid, class and text are shorthands, the
// rest are attributes; children are nodes or strings. Never HTML.
export function el(tag, props = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(props)) {
    if (k === "testid") e.dataset.testid = v;
    else if (k === "class") e.className = v;
    else if (k === "text") e.textContent = v;
    else e.setAttribute(k, v);
  }
  for (const c of children) e.append(c);
  return e;
}
