// "Prove it", under a diagnosis's advice: the `stoker tune` command to paste, which measures
// that advice on the run's own script (its first fit, N steps per change) before anyone edits
// a line. The command is the run's own command line, as its agent recorded it.

import { h, replaceChildren, setAttrs } from "../../app/dom";
import { TUNE_HREF } from "../../app/router";
import type { Run } from "../../api/types";
import { proveItCommand } from "../../state/tune";

export class ProveIt {
  readonly el: HTMLElement;
  private readonly button: HTMLButtonElement;
  private readonly box: HTMLElement;
  private open = false;

  constructor() {
    this.button = h("button", {
      class: "prove-it-button",
      text: "Prove it",
      attrs: { type: "button", "aria-expanded": "false", "data-testid": "prove-it-button", title: "Measure this advice on your own script before you edit it" },
      on: { click: () => this.toggle() },
    });
    this.box = h("div", { class: "prove-it-box", attrs: { hidden: true, "data-testid": "prove-it-box" } });
    this.el = h(
      "div",
      { class: "prove-it verdict-wide", attrs: { "data-testid": "prove-it" } },
      this.button,
      h("span", { class: "muted small", text: " measure this advice on your own script before you edit a line" }),
      this.box,
    );
  }

  update(run: Run | null): void {
    const prove = proveItCommand(run);
    const command = h("pre", { class: "code", text: prove.command, attrs: { "data-testid": "prove-it-command" } });
    const copy = h("button", {
      text: "Copy",
      attrs: { type: "button", "data-testid": "prove-it-copy" },
      on: { click: () => copyText(prove.command, command) },
    });
    replaceChildren(
      this.box,
      h(
        "p",
        { class: "small" },
        prove.cwd ? `In ${prove.cwd}, run:` : "Where the script runs, run:",
      ),
      command,
      copy,
      prove.note ? h("p", { class: "small warn-text", text: prove.note, attrs: { "data-testid": "prove-it-note" } }) : null,
      h(
        "p",
        { class: "muted small" },
        "It runs the script's first fit for 200 steps as it is, then once per change Stoker advises (applied inside the process: the script file is never touched), repeats the best, and prints steps/s, input wait, speed-up and the line to edit. The trials appear under ",
        h("a", { text: "Tune", attrs: { href: TUNE_HREF } }),
        ".",
      ),
    );
  }

  private toggle(): void {
    this.open = !this.open;
    this.box.hidden = !this.open;
    setAttrs(this.button, { "aria-expanded": this.open ? "true" : "false" });
  }
}

/** Copy to the clipboard where the browser allows it; else select the text to copy by hand. */
function copyText(text: string, shown: HTMLElement): void {
  const select = () => {
    const range = document.createRange();
    range.selectNodeContents(shown);
    const selection = window.getSelection();
    selection?.removeAllRanges();
    selection?.addRange(range);
  };
  if (navigator.clipboard?.writeText) navigator.clipboard.writeText(text).catch(select);
  else select();
}
