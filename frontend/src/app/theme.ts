// Light / dark theme: "auto" follows the system; a choice is remembered.

export type ThemeChoice = "auto" | "light" | "dark";
export const THEME_KEY = "stoker.theme";
export const THEME_EVENT = "stoker-theme";

export function parseTheme(v: string | null | undefined): ThemeChoice {
  return v === "light" || v === "dark" ? v : "auto";
}

/** The theme in effect for a choice and the system preference. */
export function effectiveTheme(choice: ThemeChoice, systemDark: boolean): "light" | "dark" {
  return choice === "auto" ? (systemDark ? "dark" : "light") : choice;
}

/** The next choice when the theme button is pressed: auto → light → dark → auto. */
export function nextTheme(choice: ThemeChoice): ThemeChoice {
  return choice === "auto" ? "light" : choice === "light" ? "dark" : "auto";
}
