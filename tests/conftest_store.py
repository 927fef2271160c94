"""Store fixtures, one per backend: a real SQLite file, and PostgreSQL when `DELEGATE_TEST_PG` names one.

`store_url` and `store` are parametrized over both backends, so a test that takes `store` is a
contract test run against each (CONVENTIONS 11). On PostgreSQL every test gets a schema of its own
(dropped afterwards), so tests never see each other's rows and need no cleanup.

    DELEGATE_TEST_PG=postgresql://delegate:delegate@127.0.0.1/delegate_test pytest tests/test_store.py
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from delegate import Store

PG_ENV = "DELEGATE_TEST_PG"
BACKENDS = ["sqlite", "postgresql"]


@pytest.fixture(scope="session")
def pg_admin() -> Iterator[sa.Engine]:
    """An engine on the PostgreSQL test database, or a skip when `DELEGATE_TEST_PG` is not set."""
    url = os.environ.get(PG_ENV)
    if not url:
        pytest.skip(f"PostgreSQL tests need {PG_ENV}=postgresql://USER:PASSWORD@127.0.0.1/DATABASE")
    engine = sa.create_engine(sa.make_url(url).set(drivername="postgresql+psycopg"))
    yield engine
    engine.dispose()


def _schema_url(schema: str) -> str:
    url = sa.make_url(os.environ[PG_ENV]).update_query_dict({"options": f"-csearch_path={schema}"})
    return url.render_as_string(hide_password=False)


@pytest.fixture(params=BACKENDS)
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A URL of an empty database: a SQLite file in tmp_path, or a fresh PostgreSQL schema."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'delegate.db'}"
        return
    admin: sa.Engine = request.getfixturevalue("pg_admin")
    schema = f"test_{uuid.uuid4().hex[:12]}"
    with admin.begin() as conn:
        conn.exec_driver_sql(f"CREATE SCHEMA {schema}")
    yield _schema_url(schema)
    with admin.begin() as conn:
        conn.exec_driver_sql(f"DROP SCHEMA {schema} CASCADE")


Statement = tuple[str, Any, bool]
"""One statement as the driver got it: its SQL, its parameters, and whether it ran for many rows."""


@pytest.fixture(scope="session")
def pg_migration(pg_admin: sa.Engine) -> Iterator[list[Statement]]:
    """Every statement `Store.migrate` wrote while migrating a new PostgreSQL schema, recorded once
    a session (a worker): `store` replays them on each test's schema in one transaction (about a
    tenth of the time of migrating it: no SQL to compile, one round trip less a statement)."""
    schema = f"test_{uuid.uuid4().hex[:12]}"
    with pg_admin.begin() as conn:
        conn.exec_driver_sql(f"CREATE SCHEMA {schema}")
    recorded: list[Statement] = []

    def record(conn: sa.Connection, _cursor: Any, statement: str, parameters: Any, _ctx: Any, many: bool) -> None:
        if conn.get_execution_options().get("delegate_write"):
            recorded.append((statement, parameters, many))

    with Store.open(_schema_url(schema), migrate=False) as template:
        sa.event.listen(template.engine, "before_cursor_execute", record)
        template.migrate()
        sa.event.remove(template.engine, "before_cursor_execute", record)
    yield recorded
    with pg_admin.begin() as conn:
        conn.exec_driver_sql(f"DROP SCHEMA {schema} CASCADE")


def _replay(request: pytest.FixtureRequest, store_url: str) -> None:
    """Make the test's new database migrated the cheap way (see `migrated_sqlite`, `pg_migration`)."""
    url = sa.make_url(store_url)
    if url.get_backend_name() == "sqlite" and url.database:
        shutil.copyfile(request.getfixturevalue("migrated_sqlite"), url.database)
        return
    schema = str(url.query["options"]).removeprefix("-csearch_path=")
    admin: sa.Engine = request.getfixturevalue("pg_admin")
    with admin.begin() as conn:
        driver = conn.connection.driver_connection
        assert driver is not None
        cursor = driver.cursor()
        cursor.execute(f"SET LOCAL search_path TO {schema}")
        for statement, parameters, many in request.getfixturevalue("pg_migration"):
            (cursor.executemany if many else cursor.execute)(statement, parameters)


@pytest.fixture(scope="session")
def migrated_sqlite(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SQLite file with every core migration applied, made once a session (a worker): `store`
    copies it rather than running each migration again on a new file for every test."""
    path = tmp_path_factory.mktemp("migrated") / "delegate.db"
    Store.open(f"sqlite:///{path}").close()  # the last handle closed: WAL checkpointed into the file
    leftovers = [p.name for p in path.parent.iterdir() if p != path]
    assert not leftovers, f"the migrated SQLite file kept {leftovers} after closing"
    return path


@pytest.fixture
def store(request: pytest.FixtureRequest, store_url: str) -> Iterator[Store]:
    """A migrated store on each backend, closed after the test. It starts as a copy of
    `migrated_sqlite`, or as `pg_migration` replayed (`Store.open` then finds every migration
    applied); `test_store.py` proves that migrating a new database gives the same."""
    _replay(request, store_url)
    with Store.open(store_url) as opened:
        yield opened


@pytest.fixture
def tokens(store: Store) -> dict[str, str]:
    """Two users of the API: alice and bob, by name, with their tokens."""
    return {name: store.add_user(name)[1] for name in ("alice", "bob")}
