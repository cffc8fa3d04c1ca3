"""Alert rules (CRUD) and alerts (read)."""

from typing import Annotated

from fastapi import APIRouter, Path, Query, Response

from stoker_server.api.deps import (
    DetectorsDep,
    OptionalRunIdQuery,
    SessionDep,
    ViewerAuth,
    WriterDep,
)
from stoker_server.core.models import (
    AlertRuleCreate,
    AlertRulePublic,
    AlertRulesPublic,
    AlertRuleUpdate,
    AlertsPublic,
    AlertState,
)
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
def read_rules(session: SessionDep) -> AlertRulesPublic:
    return list_rules(session=session)


@router.post("/alert-rules", status_code=201)
async def add_rule(
    spec: AlertRuleCreate, writer: WriterDep, detectors: DetectorsDep
) -> AlertRulePublic:
    rule = await writer.run(create_rule, spec=spec)
    detectors.rules_changed()
    return rule


@router.patch("/alert-rules/{rule_id}")
async def change_rule(
    rule_id: RuleId, patch: AlertRuleUpdate, writer: WriterDep, detectors: DetectorsDep
) -> AlertRulePublic:
    rule = await writer.run(update_rule, rule_id=rule_id, patch=patch)
    detectors.rules_changed()
    return rule


@router.delete("/alert-rules/{rule_id}", status_code=204)
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
