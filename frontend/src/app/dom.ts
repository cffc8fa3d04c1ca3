// Small DOM helpers. Text always goes in through text nodes / textContent:
// run names, tags, projects and config values are user-controlled, so no
// markup is ever built from strings.

import { keySegments } from "./format";

export type Child = Node | string | number | null | undefined | false;

export interface Props {
  class?: string;
  text?: string;
  /** Plain attributes (aria-*, data-*, href, type ...); null/false leave them out. */
  attrs?: Record<string, string | number | boolean | null | undefined>;
  on?: Partial<{ [K in keyof HTMLElementEventMap]: (ev: HTMLElementEventMap[K]) => void }>;
}

export function h<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  props: Props | null = null,
  ...children: Child[]
): HTMLElementTagNameMap[K] {
  const el = document.createElement(tag);
  if (props) {
    if (props.class) el.className = props.class;
    if (props.attrs) setAttrs(el, props.attrs);
    if (props.on) {
      for (const [type, fn] of Object.entries(props.on)) {
        if (fn) el.addEventListener(type, fn as EventListener);
      }
    }
    if (props.text !== undefined) el.textContent = props.text;
  }
  append(el, ...children);
  return el;
}

export function setAttrs(el: Element, attrs: Record<string, string | number | boolean | null | undefined>): void {
  for (const [name, value] of Object.entries(attrs)) {
    if (value === null || value === undefined || value === false) el.removeAttribute(name);
    else el.setAttribute(name, value === true ? "" : String(value));
  }
}

export function append(parent: Node, ...children: Child[]): void {
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    parent.appendChild(typeof c === "string" || typeof c === "number" ? document.createTextNode(String(c)) : c);
  }
}

/** Replace all children of `parent`. */
export function replaceChildren(parent: Element, ...children: Child[]): void {
  parent.replaceChildren();
  append(parent, ...children);
}

/** Set text only when it changed (avoids needless layout work on live updates). */
export function setText(el: Element, text: string): void {
  if (el.textContent !== text) el.textContent = text;
}

/** A dotted key's text with a line-break opportunity (<wbr>) after each dot (keySegments). */
export function breakableKey(key: string): Child[] {
  return keySegments(key).flatMap((piece, i) => (i === 0 ? [piece] : [document.createElement("wbr"), piece]));
}
