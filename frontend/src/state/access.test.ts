import { describe, expect, it } from "vitest";
import { accessBadge, AccessStore, parseAccess, takeTokenFromUrl } from "./access";

describe("access", () => {
  it("parses the server's answer and ignores unknown roles", () => {
    expect(parseAccess({ roles: ["viewer", "root"], token_required: true, admin_available: true })).toEqual({
      roles: ["viewer"],
      token_required: true,
      admin_available: true,
    });
    expect(parseAccess({ roles: "admin" })).toBeNull();
    expect(parseAccess(null)).toBeNull();
  });

  it("offers admin actions only to a token with the admin role", () => {
    const store = new AccessStore();
    expect(store.canAdmin).toBe(false); // not known yet: read only
    let told = 0;
    store.subscribe(() => told++);
    store.set({ roles: ["viewer"], token_required: true, admin_available: true });
    expect(store.canAdmin).toBe(false);
    store.set({ roles: ["viewer", "admin"], token_required: true, admin_available: true });
    expect(store.canAdmin).toBe(true);
    expect(told).toBe(2);
  });

  it("says nothing on an open server and offers the admin token to a viewer", () => {
    expect(accessBadge({ roles: ["agent", "viewer", "admin"], token_required: false, admin_available: true })).toBeNull();
    expect(accessBadge({ roles: ["viewer"], token_required: true, admin_available: true })?.canAskForAdmin).toBe(true);
    expect(accessBadge({ roles: ["viewer"], token_required: true, admin_available: false })).toMatchObject({ text: "Read-only", canAskForAdmin: false });
    expect(accessBadge({ roles: ["viewer", "admin"], token_required: true, admin_available: true })?.text).toBe("Admin");
  });

  it("takes the token out of the URL stoker serve prints", () => {
    expect(takeTokenFromUrl("http://127.0.0.1:8470/?token=abc#/runs/3")).toEqual({ token: "abc", cleaned: "http://127.0.0.1:8470/#/runs/3" });
    expect(takeTokenFromUrl("http://127.0.0.1:8470/#/alerts")).toEqual({ token: null, cleaned: "http://127.0.0.1:8470/#/alerts" });
  });
});
