// What reads badly on a page, from element measurements: see tests/harness/page_layout.py.
// Called by Playwright's page.evaluate with {longWord, scrollingOk}; returns short strings.
({longWord, scrollingOk}) => {
  const problems = [];
  const say = (kind, el, detail) => {
    const id = el.closest("[data-testid]")?.getAttribute("data-testid") ?? "";
    const cls = typeof el.className === "string" ? el.className.split(" ")[0] : "";
    const text = (el.textContent || "").trim().replace(/\s+/g, " ").slice(0, 60);
    problems.push(`${kind}: <${el.tagName.toLowerCase()}${cls ? "." + cls : ""}> in [${id}] "${text}" ${detail}`);
  };
  const root = document.documentElement;
  if (root.scrollWidth > root.clientWidth + 1) {
    problems.push(`page scrolls sideways: ${root.scrollWidth} > ${root.clientWidth}`);
  }
  const shown = (el) => {
    if (el.closest("[hidden], .visually-hidden, canvas, svg")) return false;
    const closed = el.closest("details:not([open])");
    if (closed && !el.closest("summary")) return false;
    const style = getComputedStyle(el);
    if (style.display === "none" || style.visibility === "hidden") return false;
    const box = el.getBoundingClientRect();
    // Off-screen on purpose (a skip link until it is focused) is not shown either.
    return box.width > 1 && box.height > 1 && box.right > 0 && box.left < root.clientWidth;
  };
  const chart = (el) => el.closest(".uplot, .u-wrap") !== null;
  for (const el of document.body.querySelectorAll("*")) {
    if (!(el instanceof HTMLElement) || !shown(el) || chart(el)) continue;
    const style = getComputedStyle(el);
    const scrolls = ["auto", "scroll"].includes(style.overflowX);
    if (el.clientWidth > 0 && el.scrollWidth > el.clientWidth + 1 && !(scrolls && scrollingOk)) {
      say("content wider than its box", el, `(${el.scrollWidth} > ${el.clientWidth} px)`);
    }
    const ownText = [...el.childNodes].some((n) => n.nodeType === 3 && n.textContent.trim());
    const parent = el.parentElement;
    if (ownText && parent && parent !== document.body && !["inline", "contents"].includes(getComputedStyle(parent).display)) {
      const box = el.getBoundingClientRect();
      const outer = parent.getBoundingClientRect();
      if (box.right > outer.right + 1 || box.left < outer.left - 1) {
        say("sticks out of its parent", el, `(${Math.round(box.left)}..${Math.round(box.right)} outside ${Math.round(outer.left)}..${Math.round(outer.right)})`);
      }
    }
    if (el.classList.contains("badge")) {
      const lineHeight = parseFloat(style.lineHeight) || parseFloat(style.fontSize) * 1.3;
      if (el.getBoundingClientRect().height > lineHeight * 1.6 + 4) say("badge on more than one line", el, "");
    }
  }
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  const range = document.createRange();
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    const el = node.parentElement;
    if (!el || !shown(el) || chart(el)) continue;
    // In running text (more than three words) a line may break after a hyphen, as in print;
    // names, keys, labels and badges (a few words) keep theirs whole.
    const prose = node.textContent.trim().split(/\s+/).length > 3;
    for (const word of node.textContent.matchAll(prose ? /[^\s-]+-?/g : /\S+/g)) {
      if (word[0].length < 2 || word[0].length > longWord) continue;
      range.setStart(node, word.index);
      range.setEnd(node, word.index + word[0].length);
      const tops = new Set([...range.getClientRects()].filter((r) => r.width > 0).map((r) => Math.round(r.top)));
      if (tops.size > 1) say("word broken across lines", el, `("${word[0]}")`);
    }
  }
  return problems;
}
