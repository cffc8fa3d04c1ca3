// The run page's config and raw-environment tables (flattened dotted keys),
// redrawn only when their content changes.

import { breakableKey, h, replaceChildren } from "../../app/dom";
import { flattenEntries } from "../../state/runs";
import type { Run } from "../../api/types";

export class ConfigPanel {
  readonly el = h("div", { class: "details" });
  private key = "";

  update(run: Run): void {
    const config = flattenEntries(run.config);
    const env = flattenEntries(run.environment, 8);
    const key = JSON.stringify([config, env]);
    if (key === this.key) return;
    this.key = key;
    replaceChildren(
      this.el,
      kvTable("Config", config, "No config was recorded. Pass config={...} to StokerCallback.", true, "config-panel"),
      kvTable("Environment (raw)", env, "No environment was recorded.", false, "env-raw"),
    );
  }
}

function kvTable(caption: string, rows: [string, string][], empty: string, open: boolean, testId: string): HTMLElement {
  return h(
    "details",
    { class: "panel kv-panel", attrs: { open, "data-testid": testId } },
    h("summary", null, h("h2", { text: caption }), h("span", { class: "muted", text: `${rows.length}` })),
    rows.length === 0
      ? h("p", { class: "muted", text: empty })
      : h(
          "table",
          { class: "kv" },
          h("caption", { class: "visually-hidden", text: caption }),
          h("tbody", null, ...rows.map(([k, v]) => h("tr", null, h("th", { attrs: { scope: "row" } }, ...breakableKey(k)), h("td", { text: v })))),
        ),
  );
}
