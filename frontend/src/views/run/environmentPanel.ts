// The run page's environment panel: the doctor's warnings, the environment
// the agent reported (TF/CUDA builds, precision, strategy, …) and its GPUs.
// Redrawn only when what it shows changes.

import { h, replaceChildren } from "../../app/dom";
import { environmentSummary } from "./environment";
import type { Run } from "../../api/types";

export class EnvironmentPanel {
  readonly el = h("div");
  private key = "";

  update(run: Run): void {
    const env = environmentSummary(run.environment);
    const key = JSON.stringify(env);
    if (key === this.key) return;
    this.key = key;
    const empty = env.rows.length === 0 && env.gpus.length === 0 && env.warnings.length === 0;
    replaceChildren(
      this.el,
      h(
        "section",
        { class: "panel env-panel", attrs: { "data-testid": "env-panel", "aria-labelledby": "env-heading" } },
        h("div", { class: "panel-head" }, h("h2", { text: "Environment", attrs: { id: "env-heading" } })),
        env.warnings.length > 0
          ? h(
              "ul",
              { class: "doctor-warnings", attrs: { "data-testid": "doctor-warnings", "aria-label": "Doctor warnings" } },
              ...env.warnings.map((w) => h("li", { text: w })),
            )
          : null,
        empty ? h("p", { class: "muted", text: "The agent reported no environment for this run." }) : null,
        env.rows.length > 0
          ? h(
              "table",
              { class: "kv" },
              h("caption", { class: "visually-hidden", text: "Environment" }),
              h(
                "tbody",
                null,
                ...env.rows.map((r) =>
                  h("tr", { attrs: { "data-env": r.key } }, h("th", { text: r.label, attrs: { scope: "row" } }), h("td", { text: r.value })),
                ),
              ),
            )
          : null,
        env.gpus.length > 0
          ? h(
              "table",
              { class: "kv gpus", attrs: { "data-testid": "env-gpus" } },
              h("caption", { class: "visually-hidden", text: "GPUs" }),
              h(
                "thead",
                null,
                h("tr", null, ...["GPU", "name", "memory", "compute capability"].map((t) => h("th", { text: t, attrs: { scope: "col" } }))),
              ),
              h(
                "tbody",
                null,
                ...env.gpus.map((g) => h("tr", null, h("td", { text: g.index }), h("td", { text: g.name }), h("td", { text: g.memory }), h("td", { text: g.capability }))),
              ),
            )
          : null,
      ),
    );
  }
}
