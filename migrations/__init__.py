"""herald's Alembic migrations, one file per schema change in ``versions/``.

Run them with ``herald migrate`` (:func:`herald.db.migrate`); no alembic.ini is needed.
To write a new one: ``alembic.command.revision(herald.db.alembic_config(), message=…,
rev_id="0002")``, then edit it by hand — migrations never import ``models`` (a model
changes later; a migration must keep describing the schema of its own day).
"""
