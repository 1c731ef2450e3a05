"""What the job being run knows of itself: how many of its attempts failed before this one,
and whether this one is its last (docs/queue.md#retries).

Read from the message the worker is running; outside a worker (a function called
directly, a unit test) there is no running job: no attempt failed before and the call is
not a last attempt.
"""

from __future__ import annotations

from dramatiq.middleware import CurrentMessage

from herald.queue.registry import declarations_of


def attempts_made() -> int:
    """Failed attempts of the running job before this one (0 outside a worker)."""
    message = CurrentMessage.get_current_message()
    if message is None:
        return 0
    return int(message.options.get("attempts_made", 0))


def is_last_attempt() -> bool:
    """True when a failure of this run fails the job for good: this is its queue's (or its
    actor's own) last attempt. False outside a worker."""
    message = CurrentMessage.get_current_message()
    if message is None:
        return False
    try:
        override = declarations_of().actor(message.actor_name).options.attempts
    except KeyError:  # a Dramatiq actor no registry of the App declared
        override = None
    attempts = override or declarations_of().spec(message.queue_name).attempts
    return attempts_made() + 1 >= attempts
