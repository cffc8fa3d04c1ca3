// What the token in use may do (`GET /api/v1/access`): the views offer only those actions.
// Pure (no DOM), so it is unit-tested.

export type Role = "agent" | "viewer" | "admin";

export interface Access {
  roles: Role[];
  /** Reading needs a token on this server. */
  token_required: boolean;
  /** False when the server has a viewer token and no admin token: nobody edits. */
  admin_available: boolean;
}

export type AccessListener = () => void;

/** The access the server granted; until it answers, nothing beyond reading is offered. */
export class AccessStore {
  private value: Access | null = null;
  private readonly listeners = new Set<AccessListener>();

  get current(): Access | null {
    return this.value;
  }

  /** Whether the token in use may edit and delete runs, change rules and start profiles. */
  get canAdmin(): boolean {
    return this.value?.roles.includes("admin") ?? false;
  }

  set(access: Access | null): void {
    this.value = access;
    for (const l of [...this.listeners]) l();
  }

  subscribe(listener: AccessListener): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }
}

/** A server's answer, checked: unknown roles are ignored, a malformed answer is null. */
export function parseAccess(raw: unknown): Access | null {
  if (typeof raw !== "object" || raw === null) return null;
  const r = raw as Partial<Record<keyof Access, unknown>>;
  if (!Array.isArray(r.roles) || typeof r.token_required !== "boolean" || typeof r.admin_available !== "boolean") return null;
  const roles = r.roles.filter((x): x is Role => x === "agent" || x === "viewer" || x === "admin");
  return { roles, token_required: r.token_required, admin_available: r.admin_available };
}

/** What the top bar says about access: nothing on a server open to the local user. */
export interface AccessBadge {
  text: string;
  title: string;
  /** Clicking asks for the admin token. */
  canAskForAdmin: boolean;
}

export function accessBadge(access: Access | null): AccessBadge | null {
  if (access === null) return null;
  const admin = access.roles.includes("admin");
  if (admin && !access.token_required) return null; // open: the local user may do everything
  if (admin) return { text: "Admin", title: "This token may edit and delete runs, change alert rules and start profiles.", canAskForAdmin: false };
  if (!access.admin_available) {
    return { text: "Read-only", title: "This server has no admin token: nobody may edit or delete here.", canAskForAdmin: false };
  }
  return {
    text: "Read-only",
    title: "This token reads only. Enter the admin token to edit or delete runs, change alert rules and start profiles.",
    canAskForAdmin: true,
  };
}

/**
 * The token a URL carries (`?token=…`, as `stoker serve` prints it, like Jupyter), and the
 * URL without it: the page keeps the token in session storage and drops it from the address
 * bar and history.
 */
export function takeTokenFromUrl(href: string): { token: string | null; cleaned: string } {
  const url = new URL(href);
  const token = url.searchParams.get("token");
  if (token === null) return { token: null, cleaned: href };
  url.searchParams.delete("token");
  return { token: token.trim() || null, cleaned: url.toString() };
}
