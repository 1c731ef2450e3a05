"""A process loads the table modules it imports and no others (``models`` imports none
of them itself), and a table whose foreign key names one it did not import still writes:
the rest are loaded before the ORM first needs them (docs/queue.md#the-queue-table)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.support.processes import REPO

#: Imports the store's tables alone (the orders table's foreign key names the accounts
#: table, which its module does not import), writes an account's row by SQL and an order
#: for it in a transaction it rolls back, and prints the table modules loaded before and
#: after.
_ORDER_ALONE = """\
import json, sys
from datetime import UTC, datetime
from decimal import Decimal

from sqlalchemy import text
from sqlmodel import Session

from herald.db import get_engine
from models.store import Order


def tables():
    return sorted(name for name in sys.modules if name.startswith("models."))


before = tables()
now = datetime.now(UTC)
with Session(get_engine()) as session:
    session.execute(text(
        "INSERT INTO accounts (id, locale, active, marketing_opt_out, created_at, updated_at)"
        " VALUES ('a-table-loading', 'en', true, false, :now, :now)"), {"now": now})
    session.add(Order(account_id="a-table-loading", amount=Decimal("9.50"), currency="USD"))
    session.flush()
    session.rollback()
print(json.dumps({"before": before, "after": tables()}))
"""


def test_a_table_whose_keys_name_tables_not_imported_still_writes(
        migrated_database: str) -> None:
    # Given a process that imports the store's tables and no other table module
    # When it writes an order
    run = subprocess.run([sys.executable, "-c", _ORDER_ALONE], cwd=REPO, text=True,
                         capture_output=True, timeout=60,
                         env={**os.environ, "DATABASE_URL": migrated_database,
                              "PYTHONPATH": str(REPO)})

    # Then the write goes through (no "could not find table 'accounts'")
    assert run.returncode == 0, run.stderr[-3000:]
    loaded = json.loads(run.stdout)
    # and importing it had loaded no table its module does not import; the tables its
    # keys name were loaded when the ORM first needed them
    assert "models.notifications" not in loaded["before"]
    assert "models.purchasing" not in loaded["before"]
    assert "models.notifications" in loaded["after"]
