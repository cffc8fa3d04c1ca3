import { describe, expect, it } from "vitest";
import { effectiveTheme, nextTheme, parseTheme } from "./theme";

describe("theme", () => {
  it("parses stored choices, defaulting to auto", () => {
    expect(parseTheme("dark")).toBe("dark");
    expect(parseTheme("purple")).toBe("auto");
    expect(parseTheme(null)).toBe("auto");
  });
  it("follows the system only on auto", () => {
    expect(effectiveTheme("auto", true)).toBe("dark");
    expect(effectiveTheme("light", true)).toBe("light");
  });
  it("cycles auto → light → dark → auto", () => {
    expect([nextTheme("auto"), nextTheme("light"), nextTheme("dark")]).toEqual(["light", "dark", "auto"]);
  });
});
