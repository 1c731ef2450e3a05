"""A plain Dramatiq application on ``herald.queue``, configured by ``REDIS_URL`` alone
(docs/queue.md#a-standalone-application)."""
