import { defineConfig } from "vite";

// The backend (`stoker serve`) listens on 127.0.0.1:8470 by default; in
// development Vite serves the UI and forwards API and WebSocket traffic there.
const backend = "http://127.0.0.1:8470";

export default defineConfig({
  base: "/",
  build: {
    // The backend serves the built UI from backend/stoker_server/static (not committed).
    outDir: "../backend/stoker_server/static",
    emptyOutDir: true,
    target: "es2022",
    sourcemap: false,
    chunkSizeWarningLimit: 600,
  },
  server: {
    proxy: {
      "/api": { target: backend, changeOrigin: false, ws: true },
      "/healthz": { target: backend },
    },
  },
});
