"""Alert rules (CRUD) and alerts (read)."""

from typing import Annotated

from fastapi import APIRouter, Path, Query, Request, Response

from stoker_server.api.deps import (
    DetectorsDep,
    OptionalRunIdQuery,
    SessionDep,
    SettingsDep,
    WriterDep,
)
from stoker_server.core.auth import AdminAuth, Role, ViewerAuth, granted_roles
from stoker_server.core.errors import BadRequest
from stoker_server.core.models import (
    AlertRuleCreate,
    AlertRulePublic,
    AlertRulesPublic,
    AlertRuleUpdate,
    AlertsPublic,
    AlertState,
    WebhookChannel,
)
from stoker_server.core.net_guard import DestinationRefused, redact_url, vet_destination
from stoker_server.diagnosis.alerts_and_events import (
    create_rule,
    delete_rule,
    list_alerts,
    list_rules,
    update_rule,
)

RuleId = Annotated[int, Path(ge=1, le=2**31 - 1)]
router = APIRouter(prefix="/api/v1", tags=["alerts"], dependencies=[ViewerAuth])


@router.get("/alert-rules")
def read_rules(session: SessionDep, request: Request) -> AlertRulesPublic:
    """The rules; a webhook's URL (its path is its secret) in full to admins only."""
    rules = list_rules(session=session)
    if Role.admin not in granted_roles(request):
        for rule in rules.data:
            rule.channels = [_redacted(channel) for channel in rule.channels]
    return rules


def _redacted(channel: dict) -> dict:
    if channel.get("type") == "webhook" and channel.get("url"):
        return {**channel, "url": redact_url(str(channel["url"]))}
    return channel


async def _check_destinations(channels: list | None, allowed_hosts: list[str]) -> None:
    """A webhook to a loopback, link-local, private or metadata address is refused (422
    naming STOKER_WEBHOOK_ALLOWED_HOSTS); it is checked again at every delivery."""
    for index, channel in enumerate(channels or []):
        if not isinstance(channel, WebhookChannel):
            continue
        try:
            await vet_destination(
                str(channel.url), allowed_hosts=allowed_hosts, unresolved_ok=True,
                resolve_timeout_s=2.0,
            )  # fmt: skip
        except DestinationRefused as refused:
            raise BadRequest(f"channels.{index}.url: {refused}") from None


@router.post("/alert-rules", status_code=201, dependencies=[AdminAuth])
async def add_rule(
    spec: AlertRuleCreate, writer: WriterDep, detectors: DetectorsDep, settings: SettingsDep
) -> AlertRulePublic:
    await _check_destinations(spec.channels, settings.webhook_allowed_hosts)
    rule = await writer.run(create_rule, spec=spec)
    detectors.rules_changed()
    return rule


@router.patch("/alert-rules/{rule_id}", dependencies=[AdminAuth])
async def change_rule(
    rule_id: RuleId,
    patch: AlertRuleUpdate,
    writer: WriterDep,
    detectors: DetectorsDep,
    settings: SettingsDep,
) -> AlertRulePublic:
    await _check_destinations(patch.channels, settings.webhook_allowed_hosts)
    rule = await writer.run(update_rule, rule_id=rule_id, patch=patch)
    detectors.rules_changed()
    return rule


@router.delete("/alert-rules/{rule_id}", status_code=204, dependencies=[AdminAuth])
async def remove_rule(rule_id: RuleId, writer: WriterDep, detectors: DetectorsDep) -> Response:
    await writer.run(delete_rule, rule_id=rule_id)
    detectors.rules_changed()
    return Response(status_code=204)


@router.get("/alerts")
def read_alerts(
    session: SessionDep,
    run_id: OptionalRunIdQuery = None,
    state: AlertState | None = None,
    rule_id: Annotated[int | None, Query(ge=1, le=2**31 - 1)] = None,
    limit: Annotated[int, Query(ge=1, le=10_000)] = 200,
) -> AlertsPublic:
    return list_alerts(session=session, run_id=run_id, state=state, rule_id=rule_id, limit=limit)
