"""A diagnosis window rebuilt from storage (diagnosis.history.window_from_db) holds each sample
table's rows of the last `window_s` seconds before that table's newest row; on SQLite and
PostgreSQL."""

import pytest
from sqlalchemy import create_engine
from sqlmodel import Session

from stoker_server.core.db import migrate
from stoker_server.core.models import DeviceSample, HostSample, Run, RunStatus
from stoker_server.diagnosis.history import window_from_db
from tests.conftest import DATABASES

pytestmark = pytest.mark.parametrize("database", DATABASES, indirect=True)


def test_device_and_host_rows_of_the_last_window(database: str) -> None:
    engine = create_engine(database)
    migrate(engine)
    with Session(engine) as session:
        run = Run(run_key="w", name="w", status=RunStatus.finished)
        session.add(run)
        session.commit()
        session.refresh(run)
        assert run.id is not None
        # Device samples end at t=100, host samples at t=50: each table has its own window.
        for t, util in ((80.0, 10.0), (91.0, 60.0), (100.0, 80.0)):
            session.add(DeviceSample(run_id=run.id, gpu=0, t=t, util=util))
        for t, cpu in ((30.0, 5.0), (41.0, 30.0), (50.0, 50.0)):
            session.add(HostSample(run_id=run.id, t=t, sys_cpu=cpu))
        session.commit()
        window = window_from_db(session=session, run=run, window_s=10.0)
        bare = Run(run_key="bare", name="bare", status=RunStatus.finished)
        session.add(bare)
        session.commit()
        session.refresh(bare)
        empty = window_from_db(session=session, run=bare, window_s=10.0)
    engine.dispose()
    assert [(r.t, r.util) for r in window.device] == [(91.0, 60.0), (100.0, 80.0)]
    assert [(r.t, r.sys_cpu) for r in window.host] == [(41.0, 30.0), (50.0, 50.0)]
    assert window.mean_util() == 70.0
    assert window.mean_sys_cpu() == 40.0
    assert not empty.device and not empty.host and empty.mean_util() is None
