// UI preferences in localStorage (theme, the runs list's epoch-metric column);
// a browser that refuses storage (private mode) just forgets them.

export function readStorage(key: string): string | null {
  try {
    return window.localStorage.getItem(key);
  } catch {
    return null;
  }
}

export function writeStorage(key: string, value: string): void {
  try {
    window.localStorage.setItem(key, value);
  } catch {
    /* private mode */
  }
}
