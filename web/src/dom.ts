// A tiny DOM builder: enough for a handful of pages without a framework.

type Child = Node | string | number | null | undefined | false;
type Attrs = Record<string, string | number | boolean | EventListener | null | undefined>;

/** Creates an element. `on<event>` attributes become listeners; false/null attributes are omitted. */
export function h<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  attrs: Attrs = {},
  ...children: (Child | Child[])[]
): HTMLElementTagNameMap[K] {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === null || value === undefined || value === false) continue;
    if (key.startsWith("on") && typeof value === "function") {
      el.addEventListener(key.slice(2), value);
    } else if (key === "value" && "value" in el) {
      (el as HTMLInputElement).value = String(value);
    } else {
      el.setAttribute(key, value === true ? "" : String(value));
    }
  }
  append(el, ...children);
  return el;
}

/** Appends children (strings become text nodes; null/false are skipped). */
export function append(parent: Node, ...children: (Child | Child[])[]): void {
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    parent.appendChild(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

/** Replaces all children of `parent`. */
export function replace(parent: Node, ...children: (Child | Child[])[]): void {
  while (parent.firstChild) parent.removeChild(parent.firstChild);
  append(parent, ...children);
}

/** A two-column definition list from label/value pairs; empty values are skipped. */
export function facts(rows: [string, Child | Child[]][]): HTMLElement {
  const dl = h("dl", { class: "facts" });
  for (const [label, value] of rows) {
    if (isEmpty(value)) continue;
    append(dl, h("dt", {}, label), h("dd", {}, value));
  }
  return dl;
}

function isEmpty(value: Child | Child[]): boolean {
  if (Array.isArray(value)) return value.every(isEmpty);
  return value === "" || value === null || value === undefined || value === false;
}

export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const t = setTimeout(resolve, ms);
    signal?.addEventListener("abort", () => {
      clearTimeout(t);
      resolve();
    });
  });
}
