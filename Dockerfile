# The Stoker server image (the training side installs `stoker[tensorflow]` with pip).
FROM node:20-bookworm-slim AS ui
WORKDIR /src/frontend
COPY frontend/package.json frontend/package-lock.json ./
RUN npm ci --no-audit --no-fund
COPY frontend/ ./
RUN npm run build

FROM python:3.11-slim-bookworm
WORKDIR /app
COPY pyproject.toml README.md ./
COPY backend/ backend/
COPY trainer_agent/ trainer_agent/
COPY --from=ui /src/backend/static backend/static
RUN pip install --no-cache-dir '.[postgres]'
ENV STOKER_HOST=0.0.0.0 STOKER_DATA_DIR=/data
VOLUME /data
EXPOSE 8470
HEALTHCHECK --interval=10s --timeout=3s --retries=5 \
  CMD python -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8470/healthz')"
CMD ["stoker", "serve"]
