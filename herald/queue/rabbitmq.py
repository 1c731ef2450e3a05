"""RabbitMQ carries the messages; the Redis ledger records state and fences each run.

Every message's id names its job's current attempt. Before a run the ledger claims the job
with that id (:meth:`Ledger.start`), so a redelivered or duplicated message is
acknowledged and dropped, and hands out a token unique to that run, which its finish and
lock extensions carry; retries and deferrals publish a fresh message with a new id
through Dramatiq's delay queue. Priority travels as RabbitMQ's ``x-max-priority``.
"""

from __future__ import annotations

from typing import Any

import dramatiq
from dramatiq.brokers.rabbitmq import RabbitmqBroker

from herald.queue.ledger import Ledger, new_token
from herald.queue.middleware import default_middleware
from herald.queue.registry import declarations_of

#: RabbitMQ priorities run 0..MAX_PRIORITY (higher first); herald's run 1 (urgent)..10.
MAX_PRIORITY = 10


def rabbit_priority(priority: int) -> int:
    """herald priority (1 = urgent) → RabbitMQ priority (higher is served first)."""
    return max(0, MAX_PRIORITY - priority)


class HeraldRabbitmqBroker(RabbitmqBroker):
    """Dramatiq's RabbitMQ broker with herald's ledger middleware."""

    external_ledger = True

    def __init__(self, *, url: str, ledger: Ledger, middleware: list[Any] | None = None,
                 ) -> None:
        super().__init__(url=url, max_priority=MAX_PRIORITY,
                         middleware=default_middleware() if middleware is None else middleware)
        self.ledger = ledger

    def consume(self, queue_name: str, prefetch: int = 1, timeout: int = 5000) -> Any:
        """A consumer whose prefetch is the queue's concurrency, so RabbitMQ never hands this
        process more unacknowledged jobs of a queue than the queue may run at once.

        Delay queues keep Dramatiq's large prefetch: they hold messages until their eta.
        """
        if not queue_name.endswith((".DQ", ".XQ")):
            prefetch = declarations_of(self).spec(queue_name).concurrency
        return super().consume(queue_name, prefetch=prefetch, timeout=timeout)

    def publish(self, message: dramatiq.Message[Any], *, priority: int, delay_ms: int = 0) -> None:
        """Publish one job's message (with its RabbitMQ priority and optional delay)."""
        message.options["broker_priority"] = rabbit_priority(priority)
        self.enqueue(message, delay=delay_ms or None)

    def publish_copy(self, message: Any, *, delay_ms: int, token: str | None = None) -> None:
        """Publish the message again later, under ``token`` (or the same one)."""
        options = {k: v for k, v in message.options.items()
                   if k not in ("eta", "herald_finish", "herald_token", "redeliveries")}
        copy: dramatiq.Message[Any] = dramatiq.Message(
            queue_name=message.queue_name.removesuffix(".DQ"), actor_name=message.actor_name,
            args=message.args, kwargs=message.kwargs, options=options,
            message_id=token or message.message_id,
            message_timestamp=message.message_timestamp)
        self.publish(copy, priority=int(options.get("priority", 5)), delay_ms=delay_ms)


__all__ = ["HeraldRabbitmqBroker", "new_token", "rabbit_priority"]
