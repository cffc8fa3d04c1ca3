// `#/alerts` — firing and recent alerts, the rules, and a rule editor
// (create, edit, enable, delete) with validation messages; browser
// notifications once the user allows them.

import {
  ALERT_METRICS,
  BASELINE_METRICS,
  COMPARISONS,
  describeRule,
  emptyRuleForm,
  metricInfo,
  NAMED_METRICS,
  ruleToForm,
  splitCleared,
  validateRuleForm,
  type RuleErrors,
  type RuleForm,
} from "../state/alerts";
import { ApiError } from "../api/client";
import { h, replaceChildren, setAttrs, setText } from "../app/dom";
import type { AlertRule } from "../api/types";
import { alertList, errorMessage, every, type AppContext, type View } from "./common";
import { cannotLoad } from "./loading";

type FieldName = keyof RuleForm;

export class AlertsView implements View {
  readonly el: HTMLElement;
  private readonly ctx: AppContext;
  private readonly alertsBox: HTMLElement;
  /** Alerts that never fired (pending, cleared before the rule's `for`). */
  private readonly clearedBox: HTMLElement;
  private readonly clearedPanel: HTMLElement;
  private readonly rulesBox: HTMLElement;
  private readonly form: HTMLFormElement;
  /** The rule form's panel: shown to a token that may change rules (the admin's). */
  private readonly formPanel: HTMLElement;
  private readonly readOnlyNote: HTMLElement;
  private readonly formTitle: HTMLElement;
  private readonly formError: HTMLElement;
  private readonly submitButton: HTMLButtonElement;
  private readonly cancelButton: HTMLButtonElement;
  private readonly notifyButton: HTMLButtonElement;
  private readonly inputs: Record<string, HTMLInputElement | HTMLSelectElement> = {};
  private readonly errorEls: Record<string, HTMLElement> = {};
  private readonly fieldRows: Record<string, HTMLElement> = {};
  private readonly unitEl: HTMLElement;
  private readonly cleanups: (() => void)[] = [];
  private rules: AlertRule[] = [];
  private editing: AlertRule | null = null;
  private busy = false;
  private destroyed = false;

  constructor(ctx: AppContext) {
    this.ctx = ctx;
    this.alertsBox = h("div");
    this.clearedBox = h("div");
    this.clearedPanel = h(
      "section",
      { class: "panel alerts-cleared", attrs: { "aria-labelledby": "alerts-cleared-heading", "data-testid": "alerts-cleared", hidden: true } },
      h(
        "div",
        { class: "panel-head" },
        h("h2", { text: "Pending, cleared", attrs: { id: "alerts-cleared-heading" } }),
        h("span", { class: "muted small", text: "never fired: the condition stopped holding before the rule's “for”" }),
      ),
      this.clearedBox,
    );
    this.rulesBox = h("div", null, h("p", { class: "muted", text: "Loading rules…" }));
    this.formTitle = h("h2", { text: "New rule", attrs: { id: "rule-form-heading" } });
    this.formError = h("p", { class: "error", attrs: { role: "alert", "data-testid": "rule-form-error", hidden: true } });
    this.unitEl = h("span", { class: "unit muted", attrs: { "data-testid": "rule-unit" } });
    this.submitButton = h("button", { class: "primary", text: "Create rule", attrs: { type: "submit", "data-testid": "rule-submit" } });
    this.cancelButton = h("button", {
      text: "Cancel",
      attrs: { type: "button", hidden: true, "data-testid": "rule-cancel" },
      on: { click: () => this.startCreate() },
    });
    this.notifyButton = h("button", {
      attrs: { type: "button", "data-testid": "notify-button" },
      on: { click: () => void this.askNotifications() },
    });
    this.form = this.buildForm();
    this.formPanel = h("section", { class: "panel", attrs: { "aria-labelledby": "rule-form-heading" } }, h("div", { class: "panel-head" }, this.formTitle), this.form);
    this.readOnlyNote = h(
      "p",
      { class: "muted small", attrs: { "data-testid": "rules-read-only", hidden: true } },
      "Rules and their webhooks are changed with the admin token.",
    );
    this.el = h(
      "section",
      { class: "page alerts-page", attrs: { "data-testid": "alerts-view", "aria-labelledby": "alerts-heading" } },
      h("div", { class: "page-head" }, h("h1", { text: "Alerts", attrs: { id: "alerts-heading" } }), h("div", { class: "spacer" }), this.notifyButton),
      h(
        "section",
        { class: "panel", attrs: { "aria-labelledby": "alerts-recent-heading" } },
        h("div", { class: "panel-head" }, h("h2", { text: "Firing and recent", attrs: { id: "alerts-recent-heading" } })),
        this.alertsBox,
      ),
      h(
        "div",
        { class: "details alerts-columns" },
        h(
          "section",
          { class: "panel", attrs: { "aria-labelledby": "rules-heading" } },
          h("div", { class: "panel-head" }, h("h2", { text: "Rules", attrs: { id: "rules-heading" } })),
          this.rulesBox,
          this.readOnlyNote,
        ),
        this.formPanel,
      ),
      this.clearedPanel,
    );
    this.cleanups.push(ctx.alerts.subscribe(() => this.renderAlerts()));
    this.cleanups.push(ctx.runs.subscribe((changed) => changed === null && this.renderAlerts()));
    this.cleanups.push(every(15_000, () => this.renderAlerts()));
    // A token with other rights was entered: the rules are read again (webhook URLs are
    // shown in full to admins only) and the actions it may take offered.
    this.cleanups.push(ctx.access.subscribe(() => void this.loadRules()));
    this.showNotify();
    this.renderAlerts();
    // The same path as Cancel and after a save: sets `data-mode="create"`.
    this.startCreate();
    void this.loadRules();
  }

  destroy(): void {
    this.destroyed = true;
    for (const c of this.cleanups.splice(0)) c();
  }

  // ---- alerts ----

  private renderAlerts(): void {
    const store = this.ctx.alerts;
    const { recent, cleared } = splitCleared(store.list());
    const list = recent.slice(0, 200);
    const runName = (id: number) => this.ctx.runs.get(id)?.name ?? null;
    this.clearedPanel.hidden = cleared.length === 0 || store.status !== "loaded";
    replaceChildren(this.clearedBox, cleared.length ? alertList(cleared.slice(0, 200), this.ctx.now(), runName) : null);
    let body: Node;
    if (store.status === "error") body = h("p", { class: "error", text: cannotLoad("alerts", store.error, false) });
    else if (store.status === "loading") body = h("p", { class: "muted", text: "Loading alerts…" });
    else if (list.length === 0) body = h("p", { class: "muted", text: "No alerts yet. Alerts appear here when a rule fires.", attrs: { "data-testid": "alerts-empty" } });
    else body = alertList(list, this.ctx.now(), runName);
    replaceChildren(this.alertsBox, body);
  }

  private showNotify(): void {
    const supported = typeof Notification !== "undefined";
    const perm = supported ? Notification.permission : "unsupported";
    setAttrs(this.notifyButton, { "data-permission": perm, disabled: perm !== "default" });
    setText(
      this.notifyButton,
      perm === "granted"
        ? "Browser notifications on"
        : perm === "denied"
          ? "Notifications blocked by the browser"
          : perm === "unsupported"
            ? "Notifications not supported here"
            : "Enable browser notifications",
    );
  }

  private async askNotifications(): Promise<void> {
    if (typeof Notification === "undefined") return;
    try {
      await Notification.requestPermission();
    } catch {
      /* older browsers: callback form only */
    }
    this.showNotify();
  }

  // ---- rules ----

  private async loadRules(): Promise<void> {
    try {
      const page = await this.ctx.api.listAlertRules();
      if (this.destroyed) return;
      this.rules = Array.isArray(page?.data) ? page.data : [];
    } catch (err) {
      if (this.destroyed) return;
      this.showFormError(cannotLoad("the alert rules", err, false));
    }
    this.renderRules();
  }

  private renderRules(): void {
    const canEdit = this.ctx.access.canAdmin;
    this.formPanel.hidden = !canEdit;
    this.readOnlyNote.hidden = canEdit;
    this.submitButton.disabled = this.busy;
    if (this.rules.length === 0) {
      replaceChildren(this.rulesBox, h("p", { class: "muted", text: "No rules. Create one with the form.", attrs: { "data-testid": "alert-rules" } }));
      return;
    }
    const rows = this.rules.map((r) => {
      const toggle = h("input", {
        attrs: { type: "checkbox", "aria-label": `Enable rule ${r.name}`, "data-testid": "rule-enabled", disabled: !canEdit },
        on: { change: (ev) => void this.setEnabled(r, (ev.target as HTMLInputElement).checked) },
      });
      toggle.checked = r.enabled !== false;
      return h(
        "tr",
        { attrs: { "data-testid": "alert-rule-row", "data-rule-id": r.id, "data-enabled": r.enabled !== false ? "true" : "false" } },
        h("td", null, toggle),
        h("td", null, h("div", { class: "rule-name", text: r.name }), h("div", { class: "muted small", text: describeRule(r) })),
        h(
          "td",
          { class: "rule-actions" },
          canEdit
            ? h("button", { text: "Edit", attrs: { type: "button", "aria-label": `Edit rule ${r.name}`, "data-testid": "rule-edit" }, on: { click: () => this.startEdit(r) } })
            : null,
          canEdit
            ? h("button", { class: "danger", text: "Delete", attrs: { type: "button", "aria-label": `Delete rule ${r.name}`, "data-testid": "rule-delete" }, on: { click: () => void this.remove(r) } })
            : null,
        ),
      );
    });
    replaceChildren(
      this.rulesBox,
      h(
        "table",
        { class: "rules-table", attrs: { "data-testid": "alert-rules" } },
        h("caption", { class: "visually-hidden", text: "Alert rules" }),
        h("thead", null, h("tr", null, h("th", { text: "On", attrs: { scope: "col" } }), h("th", { text: "Rule", attrs: { scope: "col" } }), h("th", { text: "", attrs: { scope: "col" } }))),
        h("tbody", null, ...rows),
      ),
    );
  }

  private async setEnabled(rule: AlertRule, enabled: boolean): Promise<void> {
    try {
      const updated = await this.ctx.api.updateAlertRule(rule.id, { enabled });
      this.replaceRule(updated && typeof updated === "object" ? updated : { ...rule, enabled });
    } catch (err) {
      this.showFormError(`Cannot ${enabled ? "enable" : "disable"} "${rule.name}": ${errorMessage(err)}`);
      this.renderRules();
    }
  }

  private async remove(rule: AlertRule): Promise<void> {
    if (!window.confirm(`Delete the rule "${rule.name}"?`)) return;
    try {
      await this.ctx.api.deleteAlertRule(rule.id);
      this.rules = this.rules.filter((r) => r.id !== rule.id);
      if (this.editing?.id === rule.id) this.startCreate();
      this.renderRules();
    } catch (err) {
      this.showFormError(`Cannot delete "${rule.name}": ${errorMessage(err)}`);
    }
  }

  private replaceRule(rule: AlertRule): void {
    const i = this.rules.findIndex((r) => r.id === rule.id);
    if (i >= 0) this.rules[i] = rule;
    else this.rules.push(rule);
    this.renderRules();
  }

  // ---- form ----

  private buildForm(): HTMLFormElement {
    const field = (name: FieldName, label: string, control: HTMLInputElement | HTMLSelectElement, extra?: Node) => {
      const id = `rule-${name}`;
      control.id = id;
      control.setAttribute("name", name);
      control.setAttribute("data-testid", `rule-${name.replace(/_/g, "-")}`);
      const err = h("p", { class: "field-error", attrs: { id: `${id}-error`, "data-testid": `rule-error-${name}`, hidden: true } });
      this.inputs[name] = control;
      this.errorEls[name] = err;
      const row = h("div", { class: "field" }, h("label", { text: label, attrs: { for: id } }), h("div", { class: "control" }, control, extra ?? null), err);
      this.fieldRows[name] = row;
      return row;
    };
    const select = (options: [string, string][], onChange?: () => void) =>
      h("select", { on: onChange ? { change: onChange } : {} }, ...options.map(([v, t]) => h("option", { text: t, attrs: { value: v } })));
    const input = (type: string, attrs: Record<string, string> = {}) => h("input", { attrs: { type, autocomplete: "off", ...attrs } });
    const enabled = input("checkbox");
    const form = h(
      "form",
      { class: "rule-form", attrs: { "data-testid": "alert-rule-form", novalidate: true, "aria-labelledby": "rule-form-heading" } },
      field("name", "Name", input("text", { maxlength: "200", placeholder: "GPU starving" })),
      field("metric", "Metric", select(ALERT_METRICS.map((m) => [m.metric, m.label]), () => this.onMetricChange())),
      h(
        "div",
        { class: "field-row" },
        field("comparison", "Condition", select(COMPARISONS.map((c) => [c, c]))),
        field("threshold", "Threshold", input("number", { step: "any", inputmode: "decimal" }), this.unitEl),
      ),
      field("metric_name", "Batch or epoch metric", input("text", { maxlength: "100", placeholder: "loss" })),
      h(
        "div",
        { class: "field-row" },
        field("baseline_run_id", "Baseline run id (optional)", input("number", { min: "1", step: "1" })),
        field("baseline_s", "Else its own first (seconds)", input("number", { step: "any", min: "0", placeholder: "120" })),
      ),
      field("for_s", "For (seconds it must hold)", input("number", { step: "any", min: "0", max: "86400" })),
      field("scope", "Applies to", select([["all", "all runs"], ["project", "one project"], ["run", "one run"]], () => this.onScopeChange())),
      field("project", "Project", input("text", { maxlength: "200" })),
      field("run_id", "Run id", input("number", { min: "1", step: "1" })),
      h(
        "div",
        { class: "field-row" },
        field("webhook_url", "Webhook URL (optional)", input("url", { placeholder: "https://hooks.slack.com/…" })),
        field("webhook_format", "Payload", select([["json", "JSON"], ["slack", "Slack"]])),
      ),
      field("profile_steps", "When it fires, profile this many steps (optional)", input("number", { min: "1", step: "1" })),
      field("enabled", "Enabled", enabled),
      this.formError,
      h("div", { class: "form-actions" }, this.cancelButton, this.submitButton),
    );
    form.addEventListener("submit", (ev) => {
      ev.preventDefault();
      void this.submit();
    });
    return form;
  }

  private readForm(): RuleForm {
    const v = (k: FieldName) => (this.inputs[k] as HTMLInputElement | HTMLSelectElement).value;
    return {
      name: v("name"),
      metric: v("metric"),
      comparison: v("comparison"),
      threshold: v("threshold"),
      for_s: v("for_s"),
      scope: v("scope"),
      project: v("project"),
      run_id: v("run_id"),
      webhook_url: v("webhook_url"),
      webhook_format: v("webhook_format"),
      enabled: (this.inputs.enabled as HTMLInputElement).checked,
      metric_name: v("metric_name"),
      baseline_run_id: v("baseline_run_id"),
      baseline_s: v("baseline_s"),
      profile_steps: v("profile_steps"),
    };
  }

  private applyForm(f: RuleForm): void {
    for (const [k, el] of Object.entries(this.inputs)) {
      if (k === "enabled") (el as HTMLInputElement).checked = f.enabled;
      else el.value = String(f[k as FieldName] ?? "");
    }
    this.showErrors({});
    this.onScopeChange();
    this.showUnit();
  }

  private onMetricChange(): void {
    const info = metricInfo(this.inputs.metric!.value);
    if (info && !this.editing) {
      this.inputs.comparison!.value = info.comparison;
      this.inputs.threshold!.value = String(info.threshold);
    }
    this.showUnit();
  }

  private showUnit(): void {
    const metric = this.inputs.metric!.value;
    const info = metricInfo(metric);
    setText(this.unitEl, info?.unit ?? "");
    // The fields only some metrics take.
    this.fieldRows.metric_name!.hidden = !NAMED_METRICS.includes(metric);
    this.fieldRows.baseline_run_id!.hidden = !BASELINE_METRICS.includes(metric);
    this.fieldRows.baseline_s!.hidden = !BASELINE_METRICS.includes(metric);
  }

  private onScopeChange(): void {
    const scope = this.inputs.scope!.value;
    this.fieldRows.project!.hidden = scope !== "project";
    this.fieldRows.run_id!.hidden = scope !== "run";
  }

  private showErrors(errors: RuleErrors): void {
    for (const [k, el] of Object.entries(this.errorEls)) {
      const msg = errors[k as FieldName];
      el.hidden = !msg;
      setText(el, msg ?? "");
      const input = this.inputs[k];
      if (input) setAttrs(input, { "aria-invalid": msg ? "true" : null, "aria-describedby": msg ? el.id : null });
    }
    if (errors.form) this.showFormError(errors.form);
    else this.formError.hidden = true;
  }

  private showFormError(message: string): void {
    setText(this.formError, message);
    this.formError.hidden = false;
  }

  private startCreate(): void {
    this.editing = null;
    setText(this.formTitle, "New rule");
    setText(this.submitButton, "Create rule");
    this.cancelButton.hidden = true;
    this.form.setAttribute("data-mode", "create");
    this.applyForm(emptyRuleForm());
  }

  private startEdit(rule: AlertRule): void {
    this.editing = rule;
    setText(this.formTitle, `Edit rule #${rule.id}`);
    setText(this.submitButton, "Save rule");
    this.cancelButton.hidden = false;
    this.form.setAttribute("data-mode", "edit");
    this.applyForm(ruleToForm(rule));
    (this.inputs.name as HTMLInputElement).focus();
  }

  private async submit(): Promise<void> {
    if (this.busy) return;
    const { rule, errors } = validateRuleForm(this.readForm());
    this.showErrors(errors);
    if (!rule) {
      const first = Object.keys(errors)[0];
      if (first && this.inputs[first]) this.inputs[first]!.focus();
      return;
    }
    this.busy = true;
    this.submitButton.disabled = true;
    try {
      const saved = this.editing ? await this.ctx.api.updateAlertRule(this.editing.id, rule) : await this.ctx.api.createAlertRule(rule);
      if (this.destroyed) return;
      if (saved && typeof saved === "object" && typeof saved.id === "number") this.replaceRule(saved);
      else await this.loadRules();
      this.startCreate();
      this.form.setAttribute("data-saved", String(saved?.id ?? ""));
    } catch (err) {
      // Server validation: put each message next to its field.
      if (err instanceof ApiError && err.fieldErrors.length > 0) {
        const mapped: RuleErrors = {};
        for (const fe of err.fieldErrors) {
          const k = fe.field in this.inputs ? (fe.field as FieldName) : "form";
          mapped[k] = mapped[k] ? `${mapped[k]} ${fe.message}` : fe.message;
        }
        this.showErrors(mapped);
      } else {
        this.showFormError(`Cannot save the rule: ${errorMessage(err)}`);
      }
    } finally {
      this.busy = false;
      this.submitButton.disabled = false;
    }
  }
}
