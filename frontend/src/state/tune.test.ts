import { describe, expect, it } from "vitest";
import { makeRun } from "./testing";
import { formatRate, formatSpeedup, proveItCommand, shellQuote, trialLines, tuneGroupKey, verdictTone, type TuneGroup } from "./tune";

describe("proveItCommand", () => {
  it("puts the run's own command line after `stoker tune --steps 200 --`", () => {
    const run = makeRun({ environment: { command: ["/venv/bin/python", "train.py", "--lr", "0.1"], cwd: "/work/cifar" } });
    expect(proveItCommand(run)).toEqual({
      command: "stoker tune --steps 200 -- /venv/bin/python train.py --lr 0.1",
      cwd: "/work/cifar",
      note: null,
    });
  });
  it("quotes what the shell would split or expand", () => {
    const run = makeRun({ environment: { command: ["python", "-m", "pkg.train", "--name", "a b", "--q", "it's $HOME"] } });
    expect(proveItCommand(run, 100).command).toBe(`stoker tune --steps 100 -- python -m pkg.train --name 'a b' --q 'it'\\''s $HOME'`);
  });
  it("says so when the command is unknown or a notebook kernel's", () => {
    const unknown = proveItCommand(makeRun({ environment: {} }));
    expect(unknown.command).toBe("stoker tune --steps 200 -- python train.py");
    expect(unknown.note).toContain("did not record");
    const notebook = proveItCommand(makeRun({ environment: { command: ["python", "-m", "ipykernel_launcher", "-f", "k.json"], cwd: "/n" } }));
    expect(notebook.command).toBe("stoker tune --steps 200 -- python train.py");
    expect(notebook.note).toContain("notebook");
    expect(notebook.cwd).toBeNull();
  });
});

describe("shellQuote", () => {
  it("leaves plain words alone and quotes the rest", () => {
    expect(shellQuote("train.py")).toBe("train.py");
    expect(shellQuote("--lr=0.1")).toBe("--lr=0.1");
    expect(shellQuote("")).toBe("''");
    expect(shellQuote("a;rm -rf")).toBe("'a;rm -rf'");
  });
});

describe("tune groups", () => {
  it("reads a trial run's group key from its config", () => {
    expect(tuneGroupKey(makeRun({ config: { tune: { group: "abc123def456", trial: "unchanged" } } }))).toBe("abc123def456");
    expect(tuneGroupKey(makeRun({ config: { batch_size: 64 } }))).toBeNull();
    expect(tuneGroupKey(makeRun({ config: { tune: "x" } }))).toBeNull();
  });
  it("gives each verdict a tone", () => {
    expect(verdictTone("speed-up")).toBe("good");
    expect(verdictTone("no measurable gain")).toBe("neutral");
    expect(verdictTone("slower")).toBe("bad");
    expect(verdictTone("elements differ")).toBe("bad");
    expect(verdictTone("not tried")).toBe("muted");
    expect(verdictTone("unchanged")).toBe("base");
  });
  it("formats rates and speed-ups, a dash for none", () => {
    expect(formatSpeedup(2.174)).toBe("2.17×");
    expect(formatSpeedup(null)).toBe("—");
    expect(formatRate(9.812)).toBe("9.81");
    expect(formatRate(21.36)).toBe("21.4");
    expect(formatRate(null)).toBe("—");
  });
  it("draws the trials that have a run, in order", () => {
    const group = {
      trials: [
        { id: "unchanged", label: "unchanged", run_key: "k0000000", run_id: 4 },
        { id: "parallel:2", label: "parallel map f", run_key: "k0000001", run_id: null },
        { id: "repeat", label: "parallel map f (again)", run_key: "k0000002", run_id: 6 },
      ],
    } as unknown as TuneGroup;
    expect(trialLines(group)).toEqual([
      { label: "unchanged", runId: 4 },
      { label: "parallel map f (again)", runId: 6 },
    ]);
  });
});
