"""The short clocks of :mod:`tests.support.pipeline.short_lock`, as constants only:
importing this changes nothing."""

from datetime import timedelta

#: The notification queues' job lock in the workers that import the short lock.
NOTIFICATION_LOCK = timedelta(seconds=3)
#: When their deliveries' claims go stale.
CLAIM_STALE_AFTER = timedelta(seconds=6)
