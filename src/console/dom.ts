// Small DOM helpers shared by the console's views (no framework).

/**
 * Creates an element with attributes and children: `el("td", { class: "value" }, "42")`.
 *
 * @param attrs - attribute name → value, set in order
 */
export function el<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  attrs: Record<string, string> = {},
  ...children: (Node | string)[]
): HTMLElementTagNameMap[K] {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs))
    node.setAttribute(name, value);
  node.append(...children);
  return node;
}
