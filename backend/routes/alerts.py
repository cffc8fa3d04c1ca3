"""Alert rules (CRUD) and alerts (read)."""

from typing import Annotated

from fastapi import APIRouter, Query, Request, Response

from backend.alerting import AlertRuleCreate, AlertRuleUpdate
from backend.deps import SessionDep, ViewerAuth, WriterDep
from backend.diagnosis_store import create_rule, delete_rule, list_alerts, list_rules, update_rule
from backend.models import AlertRulePublic, AlertRulesPublic, AlertsPublic, AlertState

router = APIRouter(prefix="/api/v1", tags=["alerts"], dependencies=[ViewerAuth])


@router.get("/alert-rules")
def read_rules(session: SessionDep) -> AlertRulesPublic:
    return list_rules(session=session)


@router.post("/alert-rules", status_code=201)
async def add_rule(spec: AlertRuleCreate, request: Request, writer: WriterDep) -> AlertRulePublic:
    rule = await writer.run(create_rule, spec=spec)
    request.app.state.detectors.rules_changed()
    return rule


@router.patch("/alert-rules/{rule_id}")
async def change_rule(
    rule_id: int, patch: AlertRuleUpdate, request: Request, writer: WriterDep
) -> AlertRulePublic:
    rule = await writer.run(update_rule, rule_id=rule_id, patch=patch)
    request.app.state.detectors.rules_changed()
    return rule


@router.delete("/alert-rules/{rule_id}", status_code=204)
async def remove_rule(rule_id: int, request: Request, writer: WriterDep) -> Response:
    await writer.run(delete_rule, rule_id=rule_id)
    request.app.state.detectors.rules_changed()
    return Response(status_code=204)


@router.get("/alerts")
def read_alerts(
    session: SessionDep,
    run_id: int | None = None,
    state: AlertState | None = None,
    rule_id: int | None = None,
    limit: Annotated[int, Query(ge=1, le=10_000)] = 200,
) -> AlertsPublic:
    return list_alerts(session=session, run_id=run_id, state=state, rule_id=rule_id, limit=limit)
