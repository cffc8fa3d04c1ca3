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

function sessionStorageOrNull(): Storage | null {
  try {
    return window.sessionStorage;
  } catch {
    return null;
  }
}

const tokens = sessionTokenStore(sessionStorageOrNull());
const live = new LiveClient({ url: () => liveUrl(location, tokens.get()) });
const api = new ApiClient({
  tokens,
  prompt: promptForToken,
  // The socket may have been refused for lack of a token: retry with it at once.
  onToken: () => live.reconnectNow(),
});
const runs = new RunsStore();

const root = document.getElementById("app");
if (!root) throw new Error("stoker: #app element missing from index.html");
new App(root, { api, live, runs, alerts: new AlertsStore(), disk: new DiskStore(), now: () => Date.now() }).start();
