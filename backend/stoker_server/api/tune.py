"""`stoker tune`'s groups: each invocation's trial runs and the table comparing them.

`stoker tune` posts its group with the agent token as it goes (`POST /tune-groups`, keyed by
the group's own random key, so a repost replaces it); viewers read it. A trial is linked to
its run by the run key the trial streamed with, resolved when the group is read: a run that
has not arrived yet, or was deleted since, is a trial without `run_id`.
"""

from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Response
from sqlalchemy import select as sa_select
from sqlmodel import Session, col, select

from stoker_server.api.deps import SessionDep, WriterDep
from stoker_server.core.auth import AdminAuth, AgentAuth, ViewerAuth
from stoker_server.core.errors import StokerError
from stoker_server.core.models import (
    Run,
    TuneGroup,
    TuneGroupIn,
    TuneGroupPublic,
    TuneGroupsPublic,
    TuneTable,
    TuneTrialPublic,
)

router = APIRouter(prefix="/api/v1", tags=["tune"])

TuneGroupId = Annotated[int, Path(ge=1, le=2**31 - 1, description="the tune group's id")]
MAX_LISTED = 500


class TuneGroupNotFound(StokerError):
    status_code = 404

    def __init__(self, group_id: int) -> None:
        super().__init__(f"tune group {group_id} not found")


def store_tune_group(*, session: Session, group: TuneGroupIn) -> TuneGroup:
    """Create or replace the group with `group.key`."""
    row = session.exec(select(TuneGroup).where(TuneGroup.key == group.key)).first()
    if row is None:
        row = TuneGroup(key=group.key)
    row.name = group.name
    row.project = group.project
    row.command = list(group.command)
    row.cwd = group.cwd
    row.steps = group.steps
    row.status = group.status
    row.trials = [trial.model_dump() for trial in group.trials]
    row.table = group.table.model_dump()
    row.updated_at = datetime.now(UTC)
    session.add(row)
    session.commit()
    session.refresh(row)
    return row


def delete_tune_group(*, session: Session, group_id: int) -> bool:
    """Delete the group (its runs stay); False when it does not exist."""
    row = session.get(TuneGroup, group_id)
    if row is None:
        return False
    session.delete(row)
    session.commit()
    return True


def _runs_by_key(session: Session, run_keys: list[str]) -> dict[str, tuple[int, Any]]:
    if not run_keys:
        return {}
    query = sa_select(col(Run.run_key), col(Run.id), col(Run.status)).where(
        col(Run.run_key).in_(run_keys)
    )
    return {key: (run_id, status) for key, run_id, status in session.execute(query).all()}


def tune_group_public(session: Session, row: TuneGroup) -> TuneGroupPublic:
    return tune_groups_public(session, [row])[0]


def tune_groups_public(session: Session, rows: list[TuneGroup]) -> list[TuneGroupPublic]:
    """The groups with each trial's run id resolved (one query for all of them)."""
    keys = [str(trial.get("run_key")) for row in rows for trial in row.trials]
    runs = _runs_by_key(session, list(dict.fromkeys(keys)))
    groups = []
    for row in rows:
        trials = []
        for trial in row.trials:
            run_id, status = runs.get(str(trial.get("run_key")), (None, None))
            trials.append(TuneTrialPublic(**trial, run_id=run_id, run_status=status))
        groups.append(
            TuneGroupPublic.model_validate(
                row,
                update={"trials": trials, "table": TuneTable.model_validate(row.table)},
            )
        )
    return groups


@router.post("/tune-groups", dependencies=[AgentAuth])
async def post_tune_group(
    group: TuneGroupIn, writer: WriterDep, session: SessionDep
) -> TuneGroupPublic:
    """Store `stoker tune`'s group as it is now (the agent token; replaces the group with
    the same key)."""
    row = await writer.run(store_tune_group, group=group)
    return tune_group_public(session, row)


@router.get("/tune-groups", dependencies=[ViewerAuth])
def read_tune_groups(
    session: SessionDep,
    key: Annotated[str | None, Query(max_length=64)] = None,
    project: Annotated[str | None, Query(max_length=200)] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_LISTED)] = 100,
) -> TuneGroupsPublic:
    """The newest groups first; `key` finds one group (a trial run's `config.tune.group`)."""
    query = select(TuneGroup)
    if key is not None:
        query = query.where(TuneGroup.key == key)
    if project is not None:
        query = query.where(TuneGroup.project == project)
    rows = list(session.exec(query.order_by(col(TuneGroup.id).desc()).limit(limit)).all())
    return TuneGroupsPublic(data=tune_groups_public(session, rows), count=len(rows))


@router.get("/tune-groups/{group_id}", dependencies=[ViewerAuth])
def read_tune_group(group_id: TuneGroupId, session: SessionDep) -> TuneGroupPublic:
    row = session.get(TuneGroup, group_id)
    if row is None:
        raise TuneGroupNotFound(group_id)
    return tune_group_public(session, row)


@router.delete("/tune-groups/{group_id}", status_code=204, dependencies=[AdminAuth])
async def remove_tune_group(group_id: TuneGroupId, writer: WriterDep) -> Response:
    """Delete a group (its trial runs are runs like any other: they stay)."""
    if not await writer.run(delete_tune_group, group_id=group_id):
        raise TuneGroupNotFound(group_id)
    return Response(status_code=204)
