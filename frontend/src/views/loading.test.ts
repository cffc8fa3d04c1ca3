import { afterEach, describe, expect, it, vi } from "vitest";
import { cannotLoad, LivePoll } from "./loading";

describe("cannotLoad", () => {
  it("says what failed, why, and whether the view reads again", () => {
    expect(cannotLoad("the input pipeline", "503 busy", true)).toBe("Cannot load the input pipeline (503 busy); retrying…");
    expect(cannotLoad("the server's settings", new Error("500 boom"), false)).toBe("Cannot load the server's settings (500 boom).");
    expect(cannotLoad("metrics", null, true)).toBe("Cannot load metrics; retrying…");
    expect(cannotLoad("the diagnosis", undefined, false)).toBe("Cannot load the diagnosis.");
  });
});

describe("LivePoll", () => {
  afterEach(() => {
    vi.useRealTimers();
  });

  it("reads every interval while live, once more when the run ends, then stops", () => {
    vi.useFakeTimers();
    const read = vi.fn();
    const poll = new LivePoll(read, 1000);
    expect(poll.polling).toBe(false);
    poll.setLive(true);
    poll.setLive(true); // a second live call starts no second timer
    expect(poll.polling).toBe(true);
    vi.advanceTimersByTime(3000);
    expect(read).toHaveBeenCalledTimes(3);
    poll.setLive(false);
    expect(poll.polling).toBe(false);
    expect(read).toHaveBeenCalledTimes(4); // the last read after the run ended
    vi.advanceTimersByTime(5000);
    poll.setLive(false); // not live before: no extra read
    expect(read).toHaveBeenCalledTimes(4);
  });

  it("stops without a last read when the view goes away", () => {
    vi.useFakeTimers();
    const read = vi.fn();
    const poll = new LivePoll(read, 1000);
    poll.setLive(true);
    poll.stop();
    vi.advanceTimersByTime(5000);
    expect(read).not.toHaveBeenCalled();
  });
});
