import { describe, expect, it } from "vitest";
import { Backoff } from "./backoff";

describe("Backoff", () => {
  it("doubles from the base delay up to the cap without jitter", () => {
    const b = new Backoff({ baseMs: 500, maxMs: 4000, jitter: 0 });
    expect([b.next(), b.next(), b.next(), b.next(), b.next(), b.next()]).toEqual([500, 1000, 2000, 4000, 4000, 4000]);
    expect(b.attempts).toBe(6);
  });
  it("starts over after reset", () => {
    const b = new Backoff({ baseMs: 100, jitter: 0 });
    b.next();
    b.next();
    b.reset();
    expect(b.next()).toBe(100);
  });
  it("keeps jittered delays within [(1-jitter)·d, d]", () => {
    const low = new Backoff({ baseMs: 1000, jitter: 0.5, random: () => 0 });
    const high = new Backoff({ baseMs: 1000, jitter: 0.5, random: () => 0.999999 });
    expect(low.next()).toBe(500);
    expect(high.next()).toBe(1000);
  });
  it("never exceeds the cap, however many attempts", () => {
    const b = new Backoff({ baseMs: 500, maxMs: 15_000, random: () => 0.99 });
    for (let i = 0; i < 100; i++) expect(b.next()).toBeLessThanOrEqual(15_000);
  });
});
