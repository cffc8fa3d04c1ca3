import { defineConfig, mergeConfig } from "vitest/config";
import viteConfig from "./vite.config";

// The unit tests (`npm test`); vitest is a dev dependency, so the build's config (vite.config.ts)
// does not import it: `npm ci --omit=dev` installs what `npm run build` needs, no more.
export default mergeConfig(
  viteConfig,
  defineConfig({
    test: {
      environment: "node",
      include: ["src/**/*.test.ts"],
    },
  }),
);
