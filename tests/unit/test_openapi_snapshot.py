"""The UI's API types are generated from `frontend/openapi.json`; that snapshot must be the
server's current schema, or the types drift from what the server sends."""

import json
from pathlib import Path

from stoker_server.core.settings import Settings
from stoker_server.service.app import create_app
from tests.harness.support import REPO

SNAPSHOT = REPO / "frontend" / "openapi.json"


def test_frontend_openapi_snapshot_is_the_servers_current_schema(tmp_path: Path) -> None:
    schema = create_app(Settings(data_dir=tmp_path)).openapi()
    committed = json.loads(SNAPSHOT.read_text())
    stale = sorted(set(schema["paths"]) ^ set(committed["paths"]))
    assert schema == committed, (
        f"frontend/openapi.json is stale (paths differing: {stale}); run `make api-types`"
    )
