// Entry point: wire the REST client, the live socket and the runs store to the shell.

import "uplot/dist/uPlot.min.css";
import "./style.css";
import { AlertsStore } from "../state/alerts";
import { DiskStore } from "../state/disk";
import { ApiClient, sessionTokenStore } from "../api/client";
import { App } from "./app";
import { LiveClient, liveUrl } from "../api/liveClient";
import { RunsStore } from "../state/runs";
import { promptForToken } from "../views/tokenPrompt";
import { AccessStore, takeTokenFromUrl } from "../state/access";

function sessionStorageOrNull(): Storage | null {
  try {
    return window.sessionStorage;
  } catch {
    return null;
  }
}

const tokens = sessionTokenStore(sessionStorageOrNull());
// The URL `stoker serve` prints carries the viewer token (as Jupyter's does): kept for this
// tab, and dropped from the address bar and the history.
const fromUrl = takeTokenFromUrl(location.href);
if (fromUrl.token !== null) {
  tokens.set(fromUrl.token);
  history.replaceState(history.state, "", fromUrl.cleaned);
}
const live = new LiveClient({ url: () => liveUrl(location, tokens.get()) });
const access = new AccessStore();
let app: App | null = null;
const api = new ApiClient({
  tokens,
  prompt: promptForToken,
  // The socket may have been refused for lack of a token: retry with it at once. A new token
  // may grant other actions.
  onToken: () => {
    live.reconnectNow();
    void app?.loadAccess();
  },
});
const runs = new RunsStore();

const root = document.getElementById("app");
if (!root) throw new Error("stoker: #app element missing from index.html");
app = new App(root, { api, live, runs, alerts: new AlertsStore(), disk: new DiskStore(), access, now: () => Date.now() });
app.start();
