// How a view reads again while its run is live, and how it says a read failed.

import { errorMessage } from "./common";

/**
 * "Cannot load <what> (<why>)", then "; retrying…" when the view will read
 * again by itself (a poll, a retry while the run is live) or "." when it will not.
 */
export function cannotLoad(what: string, why: unknown, retrying: boolean): string {
  const reason = why === null || why === undefined ? "" : ` (${errorMessage(why)})`;
  return `Cannot load ${what}${reason}${retrying ? "; retrying…" : "."}`;
}

/** Calls `read` every `ms` while the run is live, and once more when it stops being live. */
export class LivePoll {
  private timer: ReturnType<typeof setInterval> | null = null;

  constructor(
    private readonly read: () => void,
    private readonly ms: number,
  ) {}

  /** Whether the next read comes by itself (the view says "retrying…" after a failure). */
  get polling(): boolean {
    return this.timer !== null;
  }

  setLive(live: boolean): void {
    if (live && this.timer === null) {
      this.timer = setInterval(this.read, this.ms);
    } else if (!live && this.timer !== null) {
      this.stop();
      this.read();
    }
  }

  stop(): void {
    if (this.timer !== null) clearInterval(this.timer);
    this.timer = null;
  }
}
