"""The FastAPI application factory."""

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import HTMLResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from pydantic import ValidationError
from sqlalchemy.engine import Engine

from stoker_server import __version__
from stoker_server.api import access as access_routes
from stoker_server.api import (
    agent_ingest,
    alerts,
    cost,
    disk,
    energy,
    live_updates,
    pipeline,
    profiles,
    run_diagnosis,
    runs,
    tune,
)
from stoker_server.api.state import app_state
from stoker_server.core.auth import ViewerAuth, access_policy
from stoker_server.core.browser_guard import BrowserGuard
from stoker_server.core.db import make_engine
from stoker_server.core.errors import StokerError
from stoker_server.core.middleware import BodySizeLimit
from stoker_server.core.models import Health
from stoker_server.core.settings import Settings, get_settings
from stoker_server.service.build import build_state, start_loops, stop_loops

log = logging.getLogger(__name__)
STATIC_DIR = Path(__file__).parent.parent / "static"

_NOT_BUILT = """<!doctype html><title>Stoker</title>
<p>The Stoker server is running, but the web UI has not been built.
Run <code>make build</code> (or <code>npm ci && npm run build</code> in <code>frontend/</code>)
and reload. The API is at <a href="/docs">/docs</a>.</p>"""


def create_app(settings: Settings | None = None, *, engine: Engine | None = None) -> FastAPI:
    """The app; `engine`, when given, is the database already opened and migrated (`stoker
    serve` opens it before it starts serving, so a failure there is one line, not a trace)."""
    settings = settings or get_settings()
    opened = engine

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        nonlocal opened
        engine, opened = opened, None  # used once: a second start opens its own
        if engine is None:
            engine = await asyncio.to_thread(make_engine, settings)
        log.info("Stoker storing runs in %s", engine.url.render_as_string(hide_password=True))
        state = build_state(settings, engine)
        app.state.stoker = state
        tasks = await start_loops(state)
        try:
            yield
        finally:
            await stop_loops(tasks)
            state.writer.close()
            engine.dispose()

    app = FastAPI(title="Stoker", version=__version__, lifespan=lifespan)
    app.state.settings = settings
    app.state.access = access = access_policy(settings)
    app.add_middleware(BodySizeLimit, max_bytes=settings.max_request_bytes)
    if settings.cors_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=settings.cors_origins,
            allow_methods=["GET", "POST", "PATCH", "DELETE"],
            allow_headers=["Authorization", "Content-Type"],
        )

    # Outermost: a request from another site or to another host name is refused before any
    # other part of the server reads it.
    app.add_middleware(
        BrowserGuard, loopback=access.loopback, allowed_hosts=settings.allowed_hosts,
        allowed_origins=[*settings.allowed_origins, *settings.cors_origins],
    )  # fmt: skip

    @app.exception_handler(StokerError)
    async def _stoker_error(_request: Request, error: StokerError) -> JSONResponse:
        return JSONResponse({"detail": error.detail}, status_code=error.status_code)

    @app.exception_handler(ValidationError)
    async def _server_model_error(request: Request, error: ValidationError) -> JSONResponse:
        # Bad requests are refused where they are parsed (FastAPI's request validation, or a
        # BadRequest naming the problem): a ValidationError that reaches here is the server's
        # own data failing its models, a server error.
        log.error("%s %s: a server-side model failed validation", request.method,
                  request.url.path, exc_info=error)  # fmt: skip
        return JSONResponse(
            {"detail": "internal error: stored data failed validation (see the server log)"},
            status_code=500,
        )

    app.include_router(access_routes.router)
    app.include_router(runs.router)
    app.include_router(agent_ingest.router)
    app.include_router(live_updates.router)
    app.include_router(run_diagnosis.router)
    app.include_router(pipeline.router)
    app.include_router(alerts.router)
    app.include_router(profiles.router)
    app.include_router(cost.router)
    app.include_router(energy.router)
    app.include_router(disk.router)
    app.include_router(tune.router)

    @app.get("/healthz", tags=["health"])
    def healthz() -> Health:
        """Liveness for load balancers and container healthchecks (no token needed)."""
        return Health(status="ok", version=__version__)

    @app.get(
        "/metrics",
        tags=["health"],
        dependencies=[ViewerAuth],
        response_class=Response,
        responses={200: {"content": {"text/plain": {}}}},
    )
    def metrics(request: Request) -> Response:
        """Prometheus text format: live gauges per running run and GPU, server counters."""
        return Response(
            app_state(request).telemetry.render(),
            media_type="text/plain; version=0.0.4; charset=utf-8",
        )

    if (STATIC_DIR / "index.html").exists():
        app.mount("/", StaticFiles(directory=STATIC_DIR, html=True), name="ui")
    else:

        @app.get("/", include_in_schema=False)
        def ui_not_built() -> HTMLResponse:
            return HTMLResponse(_NOT_BUILT)

    return app
