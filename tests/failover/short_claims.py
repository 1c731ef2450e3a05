"""``herald worker --import tests.failover.short_claims``: a delivery's claim goes stale
after 6 s (60 s in production), so a delivery whose outcome write met the database's
outage is sent again within the test's time instead of a minute later
(docs/failure-modes.md#postgresql-restart)."""

from datetime import timedelta

from models.notifications import claim_delivery

#: When the workers' deliveries' claims go stale.
CLAIM_STALE_AFTER = timedelta(seconds=6)

# the channel worker claims with the default staleness; this process's default is shorter
assert claim_delivery.__kwdefaults__ is not None
claim_delivery.__kwdefaults__["stale_after"] = CLAIM_STALE_AFTER
