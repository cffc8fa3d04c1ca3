"""The FastAPI application factory."""

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse
from fastapi.staticfiles import StaticFiles
from pydantic import ValidationError

from backend import __version__
from backend.db import make_engine
from backend.detectors import Detectors
from backend.errors import StokerError
from backend.live import LiveHub
from backend.routes import agent, alerts, diagnosis, live, runs
from backend.routes.agent import describe
from backend.settings import Settings, get_settings
from backend.writer import Writer

log = logging.getLogger(__name__)
STATIC_DIR = Path(__file__).parent / "static"

_NOT_BUILT = """<!doctype html><title>Stoker</title>
<p>The Stoker server is running, but the web UI has not been built.
Run <code>make build</code> (or <code>npm ci && npm run build</code> in <code>frontend/</code>)
and reload. The API is at <a href="/docs">/docs</a>.</p>"""


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or get_settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        engine = make_engine(settings)
        app.state.engine = engine
        app.state.writer = Writer(engine)
        app.state.hub = LiveHub(settings.live_queue_size)
        log.info("Stoker storing runs in %s", engine.url.render_as_string(hide_password=True))
        # Diagnosis and alerts: named tasks, visible here.
        detectors = Detectors(settings=settings, writer=app.state.writer, hub=app.state.hub)
        app.state.detectors = detectors
        await detectors.start()
        tasks = [
            asyncio.create_task(detectors.run_forever(), name="stoker-detectors"),
            asyncio.create_task(detectors.webhooks.run_forever(), name="stoker-webhooks"),
        ]
        try:
            yield
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            app.state.writer.close()
            engine.dispose()

    app = FastAPI(title="Stoker", version=__version__, lifespan=lifespan)
    app.state.settings = settings

    @app.exception_handler(StokerError)
    async def _stoker_error(_request: Request, error: StokerError) -> JSONResponse:
        return JSONResponse({"detail": error.detail}, status_code=error.status_code)

    @app.exception_handler(ValidationError)
    async def _invalid_body(_request: Request, error: ValidationError) -> JSONResponse:
        return JSONResponse({"detail": describe(error)}, status_code=422)

    app.include_router(runs.router)
    app.include_router(agent.router)
    app.include_router(live.router)
    app.include_router(diagnosis.router)
    app.include_router(alerts.router)

    @app.get("/healthz", tags=["health"])
    def healthz() -> dict[str, str]:
        return {"status": "ok", "version": __version__}

    if (STATIC_DIR / "index.html").exists():
        app.mount("/", StaticFiles(directory=STATIC_DIR, html=True), name="ui")
    else:

        @app.get("/", include_in_schema=False)
        def ui_not_built() -> HTMLResponse:
            return HTMLResponse(_NOT_BUILT)

    return app
