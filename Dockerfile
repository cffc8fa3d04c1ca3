# The Stoker server image, built from the wheel (the training side installs `stoker`, the
# agent alone, with pip). Stages: the UI (node), the wheel (with the UI in it), the image.
FROM node:20-bookworm-slim AS ui
WORKDIR /src/frontend
COPY frontend/package.json frontend/package-lock.json ./
RUN npm ci --omit=dev --no-audit --no-fund
COPY frontend/ ./
RUN npm run build

FROM python:3.11-slim-bookworm AS wheel
WORKDIR /src
COPY pyproject.toml setup.py README.md ./
COPY backend/ backend/
COPY trainer_agent/ trainer_agent/
RUN rm -rf backend/stoker_server/static
# No frontend/ here: setup.py takes the UI built in the first stage as it is.
COPY --from=ui /src/backend/stoker_server/static backend/stoker_server/static
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /dist .

FROM python:3.11-slim-bookworm
COPY --from=wheel /dist /dist
RUN pip install --no-cache-dir "$(ls /dist/stoker-*.whl)[server,postgres]" \
  && rm -rf /dist
WORKDIR /app
# Bound to every address of the container, so never open: without STOKER_VIEW_TOKEN,
# STOKER_ADMIN_TOKEN and STOKER_AGENT_TOKEN the server makes them on its first start, keeps
# them in /data/tokens.json (mode 0600, on the volume: the next start reuses them) and prints
# the UI's URL with the viewer token (`docker logs`). `--no-auth` (as the command) turns that
# off, said in the log: only behind a proxy that authenticates (docs/security.md).
ENV STOKER_HOST=0.0.0.0 STOKER_DATA_DIR=/data
VOLUME /data
EXPOSE 8470
HEALTHCHECK --interval=10s --timeout=3s --retries=5 \
  CMD python -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8470/healthz')"
CMD ["stoker", "serve"]
