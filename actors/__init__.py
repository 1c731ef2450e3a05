"""herald's queues of work, one module per queue family; each declares on herald's
registry (``actors.queues.registry``, beside the queue table)."""

from actors import queues as queues
