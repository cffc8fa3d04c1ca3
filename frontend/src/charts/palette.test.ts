import { describe, expect, it } from "vitest";
import { LIGHT_PALETTE, paletteFromVars } from "./palette";

describe("paletteFromVars", () => {
  it("takes set CSS variables and falls back for the rest", () => {
    const p = paletteFromVars((name) => (name === "--chart-step" ? " #123456 " : ""));
    expect(p.step).toBe("#123456");
    expect(p.wait).toBe(LIGHT_PALETTE.wait);
  });
});
