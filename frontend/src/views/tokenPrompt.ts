// The token form shown when the server answers 401, or when a reader asks to act as admin.

import { h } from "../app/dom";

/** Show a modal form asking for the access token; resolves with what was entered (null when
 * the user cancelled asking for the admin token; the other prompts cannot be cancelled). */
export function promptForToken(reason: "required" | "rejected" | "admin"): Promise<string | null> {
  return new Promise((resolve) => {
    const input = h("input", {
      attrs: {
        id: "stoker-token",
        name: "token",
        type: "password",
        autocomplete: "off",
        required: true,
        spellcheck: "false",
      },
    });
    const message =
      reason === "rejected"
        ? "The server rejected that token. Enter a valid one."
        : reason === "admin"
          ? "Enter the admin token to edit or delete runs, change alert rules and start profiles."
          : "This Stoker server requires an access token.";
    const form = h(
      "form",
      { class: "token-form" },
      h("h2", { text: "Access token", attrs: { id: "stoker-token-title" } }),
      h("p", { class: reason === "rejected" ? "error" : "muted", text: message, attrs: { id: "stoker-token-desc" } }),
      h("label", { text: "Token", attrs: { for: "stoker-token" } }),
      input,
      h("p", { class: "muted small", text: "Kept for this browser tab only (session storage)." }),
      h(
        "div",
        { class: "form-actions" },
        h("button", { class: "primary", text: "Continue", attrs: { type: "submit" } }),
        reason === "admin"
          ? h("button", {
              text: "Cancel",
              attrs: { type: "button", "data-testid": "token-cancel" },
              on: {
                click: () => {
                  overlay.remove();
                  resolve(null);
                },
              },
            })
          : null,
      ),
    );
    const overlay = h(
      "div",
      {
        class: "overlay",
        attrs: {
          role: "dialog",
          "aria-modal": "true",
          "aria-labelledby": "stoker-token-title",
          "aria-describedby": "stoker-token-desc",
          "data-testid": "token-dialog",
        },
      },
      form,
    );
    form.addEventListener("submit", (ev) => {
      ev.preventDefault();
      const token = input.value.trim();
      if (!token) {
        input.focus();
        return;
      }
      overlay.remove();
      resolve(token);
    });
    document.body.append(overlay);
    input.focus();
  });
}
