"""herald's queues of work, one module per queue family; importing the package registers
herald's queue table (:mod:`actors.queues`)."""

from actors import queues as queues
