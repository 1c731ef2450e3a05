"""``herald worker --import tests.webhooks.relay_worker webhook-delivery``: the relay with
a 1 s lock, so that a run killed mid-send is taken up again a second later."""

import dataclasses

from actors.queues import registry
from herald.queue import SECOND

registry.declare(dataclasses.replace(registry.spec("webhook-delivery"), lock_duration=SECOND))
