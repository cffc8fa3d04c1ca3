"""`GET /api/v1/access`: what the presented token may do, so the UI offers only that."""

from fastapi import APIRouter, Request

from stoker_server.core.auth import Role, app_access, granted_roles
from stoker_server.core.models import AccessPublic

router = APIRouter(prefix="/api/v1", tags=["access"])


@router.get("/access")
def read_access(request: Request) -> AccessPublic:
    """The roles the request's token grants (none: those open to anyone). Needs no token: it
    says only whether the one presented is valid, as every other route does."""
    access = app_access(request)
    granted = granted_roles(request)
    return AccessPublic(
        roles=[role.value for role in Role if role in granted],
        token_required=Role.viewer not in access.open_roles,
        admin_available=not access.admin_off,
    )
