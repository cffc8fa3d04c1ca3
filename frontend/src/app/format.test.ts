import { describe, expect, it } from "vitest";
import cases from "./formats.cases.json";
import { formatLostTime } from "../state/cost";
import {
  MISSING,
  formatCount,
  formatInputWait,
  statusLabel,
  formatDuration,
  formatMs,
  formatMsTick,
  formatPercent,
  formatPercentValue,
  formatRate,
  formatRelativeTime,
  formatValue,
  keySegments,
  parseIso,
} from "./format";

describe("formatMs", () => {
  it("shows step-scale durations with sensible precision", () => {
    expect(formatMs(0.423)).toBe("0.42 ms");
    expect(formatMs(4.216)).toBe("4.22 ms");
    expect(formatMs(42.14)).toBe("42.1 ms");
    expect(formatMs(421.4)).toBe("421 ms");
    expect(formatMs(1234)).toBe("1.23 s");
    expect(formatMs(12_345)).toBe("12.3 s");
    expect(formatMs(125_000)).toBe("2m 05s");
  });
  it("renders missing values as an em dash", () => {
    expect(formatMs(null)).toBe(MISSING);
    expect(formatMs(undefined)).toBe(MISSING);
    expect(formatMs(Number.NaN)).toBe(MISSING);
  });
});

describe("formatMsTick", () => {
  it("keeps axis labels short", () => {
    expect(formatMsTick(0)).toBe("0");
    expect(formatMsTick(0.5)).toBe("0.5");
    expect(formatMsTick(2.5)).toBe("2.5");
    expect(formatMsTick(250)).toBe("250");
    expect(formatMsTick(15_000)).toBe("15k");
    expect(formatMsTick(null)).toBe("");
  });
});

describe("formatDuration", () => {
  it("uses the two largest units", () => {
    expect(formatDuration(0)).toBe("0s");
    expect(formatDuration(0.4)).toBe("0.4s");
    expect(formatDuration(42)).toBe("42s");
    expect(formatDuration(185)).toBe("3m 05s");
    expect(formatDuration(3720)).toBe("1h 02m");
    expect(formatDuration(2 * 86_400 + 3 * 3600)).toBe("2d 03h");
  });
  it("rejects negative and missing durations", () => {
    expect(formatDuration(-1)).toBe(MISSING);
    expect(formatDuration(null)).toBe(MISSING);
  });
});

describe("percentages, counts and rates", () => {
  it("formats a 0..1 share as a percentage", () => {
    expect(formatPercent(0.1234)).toBe("12.3 %");
    expect(formatPercent(1)).toBe("100.0 %");
    expect(formatPercent(null)).toBe(MISSING);
  });
  it("formats a value already in percent", () => {
    expect(formatPercentValue(87.4)).toBe("87 %");
    expect(formatPercentValue(null)).toBe(MISSING);
  });
  it("groups thousands in counts", () => {
    expect(formatCount(1234567)).toBe("1,234,567");
    expect(formatCount(0)).toBe("0");
    expect(formatCount(null)).toBe(MISSING);
  });
  it("formats rates by magnitude", () => {
    expect(formatRate(12345.6)).toBe("12,346");
    expect(formatRate(512.3)).toBe("512");
    expect(formatRate(51.23)).toBe("51.2");
    expect(formatRate(5.123)).toBe("5.12");
    expect(formatRate(null)).toBe(MISSING);
  });
});

describe("one text per figure, as the server writes it", () => {
  // The same cases check trainer_agent/figures.py, the server's and stoker top's (tests/unit/test_figures.py).
  const writers: Record<string, (v: number) => string> = {
    share: formatInputWait,
    percent: formatPercentValue,
    ms: (seconds) => formatMs(seconds * 1000),
    count: formatCount,
    rate: formatRate,
    duration: formatDuration,
    lost: formatLostTime,
  };
  it("has a writer for every quantity of the cases", () => {
    expect(Object.keys(cases).filter((k) => k !== "_").sort()).toEqual(Object.keys(writers).sort());
  });
  for (const [quantity, write] of Object.entries(writers)) {
    it(`writes ${quantity} as the server does`, () => {
      for (const [value, text] of (cases as unknown as Record<string, [number, string][]>)[quantity]!) {
        expect(write(value)).toBe(text);
      }
    });
  }
});

describe("parseIso", () => {
  it("reads zoned timestamps", () => {
    expect(parseIso("2024-05-01T12:00:00Z")).toBe(Date.UTC(2024, 4, 1, 12));
    expect(parseIso("2024-05-01T14:00:00+02:00")).toBe(Date.UTC(2024, 4, 1, 12));
  });
  it("takes a timestamp without zone as UTC and cuts microseconds", () => {
    expect(parseIso("2024-05-01T12:00:00.123456")).toBe(Date.UTC(2024, 4, 1, 12, 0, 0, 123));
    expect(parseIso("2024-05-01 12:00:00")).toBe(Date.UTC(2024, 4, 1, 12));
  });
  it("returns null for missing or malformed input", () => {
    expect(parseIso(null)).toBeNull();
    expect(parseIso("")).toBeNull();
    expect(parseIso("yesterday")).toBeNull();
  });
});

describe("formatRelativeTime", () => {
  const now = Date.UTC(2024, 4, 1, 12);
  const ago = (s: number) => new Date(now - s * 1000).toISOString();
  it("describes recent times relative to now", () => {
    expect(formatRelativeTime(ago(2), now)).toBe("just now");
    expect(formatRelativeTime(ago(42), now)).toBe("42 s ago");
    expect(formatRelativeTime(ago(180), now)).toBe("3 min ago");
    expect(formatRelativeTime(ago(5 * 3600), now)).toBe("5 h ago");
    expect(formatRelativeTime(ago(2 * 86_400), now)).toBe("2 d ago");
  });
  it("treats a time slightly in the future (clock skew) as just now", () => {
    expect(formatRelativeTime(ago(-30), now)).toBe("just now");
  });
  it("falls back to a date for old times", () => {
    expect(formatRelativeTime(ago(90 * 86_400), now)).toMatch(/^\d{4}-\d{2}-\d{2}$/);
  });
  it("renders a missing time as an em dash", () => {
    expect(formatRelativeTime(null, now)).toBe(MISSING);
  });
});

describe("formatValue", () => {
  it("shows scalars plainly and structures as JSON", () => {
    expect(formatValue("adam")).toBe("adam");
    expect(formatValue(0.001)).toBe("0.001");
    expect(formatValue(true)).toBe("true");
    expect(formatValue(null)).toBe("null");
    expect(formatValue([1, 2])).toBe("[1,2]");
    expect(formatValue({ a: 1 })).toBe('{"a":1}');
  });
  it("keeps markup-looking strings as text", () => {
    expect(formatValue("<img src=x onerror=alert(1)>")).toBe("<img src=x onerror=alert(1)>");
  });
});

describe("statusLabel", () => {
  it("says how many steps an ended run still has to upload", () => {
    expect(statusLabel("finished", 12345).text).toBe("finished · 12,345 steps to upload");
    expect(statusLabel("finished", 12345).title).toContain("next Stoker agent");
  });
  it("is the bare status when nothing is left, or while the run is running", () => {
    expect(statusLabel("finished", 0)).toEqual({ text: "finished", title: "status: finished" });
    expect(statusLabel("finished", undefined).text).toBe("finished");
    expect(statusLabel("running", 50).text).toBe("running");
  });
});

describe("keySegments", () => {
  it("breaks a dotted key after its dots only", () => {
    expect(keySegments("fit_params.epochs")).toEqual(["fit_params.", "epochs"]);
    expect(keySegments("optimizer.config.learning_rate")).toEqual(["optimizer.", "config.", "learning_rate"]);
    expect(keySegments("batch_size")).toEqual(["batch_size"]);
    expect(keySegments("")).toEqual([]);
    expect(keySegments("a..b").join("")).toBe("a..b");
  });
});
