"""The partition tests' clocks, as constants only: importing this changes nothing (the
workers apply them through :mod:`tests.partition.short_locks`, which a test module must
never import: it changes its process's queue table and claim staleness)."""

from datetime import timedelta

#: The SFTP operation timeout of the partitioned workers (SFTP_OPERATION_TIMEOUT_S).
SFTP_OPERATION_TIMEOUT = timedelta(seconds=3)
#: The supplier-dispatch job lock: a run is taken over between 5.3 s and 8 s after its
#: worker was cut off (the lock is extended every third of it), after its SFTP operation
#: gave up (3 s), as in production (30 s under 120 s).
DISPATCH_LOCK = timedelta(seconds=8)
