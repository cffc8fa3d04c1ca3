// Capped exponential backoff with jitter, for reconnects and retries.

export interface BackoffOptions {
  /** First delay, before jitter. */
  baseMs?: number;
  /** Largest delay, before jitter. */
  maxMs?: number;
  factor?: number;
  /** Fraction of each delay that is randomized (0 = none, 1 = full jitter). */
  jitter?: number;
  /** Random source in [0, 1), injectable for tests. */
  random?: () => number;
}

export class Backoff {
  readonly baseMs: number;
  readonly maxMs: number;
  readonly factor: number;
  readonly jitter: number;
  private readonly random: () => number;
  private attemptCount = 0;

  constructor(opts: BackoffOptions = {}) {
    this.baseMs = opts.baseMs ?? 500;
    this.maxMs = opts.maxMs ?? 15_000;
    this.factor = opts.factor ?? 2;
    this.jitter = Math.min(1, Math.max(0, opts.jitter ?? 0.3));
    this.random = opts.random ?? Math.random;
  }

  /** Attempts made since the last reset. */
  get attempts(): number {
    return this.attemptCount;
  }

  /** Delay before the next attempt; each call counts one attempt. */
  next(): number {
    const exp = Math.min(this.maxMs, this.baseMs * this.factor ** this.attemptCount);
    this.attemptCount++;
    // Keep (1 - jitter) of the delay fixed, randomize the rest.
    const fixed = exp * (1 - this.jitter);
    return Math.round(fixed + exp * this.jitter * this.random());
  }

  reset(): void {
    this.attemptCount = 0;
  }
}
