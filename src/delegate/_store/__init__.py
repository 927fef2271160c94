"""The store: users, runs, their events and subagent records, in SQLite or PostgreSQL.

Stores of one database in a process share one SQLAlchemy engine (`_db.SharedEngine`); the same Core
statements run on both backends.

- SQLite (the default, `<workspace>/.delegate/delegate.db`) runs in WAL mode with a 10 s busy
  timeout and foreign keys on, set on every new connection. Writes open with `BEGIN IMMEDIATE`, so
  a writer waits for the lock up front instead of failing half-way with "database is locked".
- PostgreSQL (`postgresql://...`, driven by psycopg 3) is for several machines sharing one store.
  Each connection waits at most `LOCK_TIMEOUT_MS` for a lock (`lock_timeout`).

A write that cannot get the lock in that time (another process holds it: a `delegate batch
worker`, a `sqlite3` shell) raises `StoreBusyError`: the server answers it with a 503 and a
`Retry-After`, the CLI with a message; nothing was written.

Migrations are named functions recorded in the `migrations` table and applied in order, once.
Another module adds its own tables by passing its own list to `Store.migrate`:

```python
def _create_batches(conn: Connection) -> None:
    sa.Table("batches", sa.MetaData(), sa.Column("id", sa.Text, primary_key=True)).create(conn)

BATCH_MIGRATIONS = [Migration("batch.0001_batches", _create_batches)]
store.migrate(BATCH_MIGRATIONS)   # the core migrations first, then these; each name applied once
```

Names are global to the database, so prefix them with the module (`batch.`). A migration never
changes once released: a new schema change is a new migration at the end of the list.

Everything read back is validated (JSON columns, status values, timestamps): a row that was
damaged outside delegate raises `StoreError` naming the table, row and column, never garbage.
Timestamps are timezone-aware UTC datetimes, stored as ISO 8601 text on both backends (so they
sort as text and compare the same everywhere).
"""

from .._errors import StoreBusyError, StoreError
from .._lease import RUN_HEARTBEAT, RUN_LEASE_TTL
from ._approvals import ApprovalRow
from ._rows import (
    Checkpoint,
    KeptConversation,
    RunRow,
    RunSummary,
    UserRow,
    record_json,
    stored_fields,
)
from ._schema import Migration
from ._store import Store
from ._threads import ThreadSummary, why_not_continuable

__all__ = [
    "RUN_HEARTBEAT",
    "RUN_LEASE_TTL",
    "ApprovalRow",
    "Checkpoint",
    "KeptConversation",
    "Migration",
    "RunRow",
    "RunSummary",
    "Store",
    "StoreBusyError",
    "StoreError",
    "ThreadSummary",
    "UserRow",
    "record_json",
    "stored_fields",
    "why_not_continuable",
]
