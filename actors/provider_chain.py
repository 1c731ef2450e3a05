"""One delivery attempt sent through its channel's provider chain, with failover, the
shared circuit breaker and the delivery's attempts log (docs/pipeline.md#provider-chains).

For each provider of the chain, in order: skip it while its circuit is open (logged
``skipped_open_circuit``); send; accepted ends the walk (``sent``, ``provider`` the one
that accepted); a definite failure (transient or refused: the provider certainly did not
accept it) is logged ``definite_failure`` and written, fenced by the claim, *before* the
next provider is tried, so a crash between the two leaves the history and never a second
acceptance; a terminal failure (no provider can send it) ends it ``failed_terminal`` at
once; an ambiguous one (perhaps accepted) is logged ``ambiguous`` and **pins** the
delivery to that provider: this attempt and every later one try only that provider again,
never another, which could deliver it twice.

When the chain is exhausted, a transient or ambiguous failure (or every circuit open,
nothing sent) releases the claim and retries the job while attempts remain; otherwise
the delivery ends ``failed_terminal``. A chain of one provider behaves as the single
provider always has. The happy path writes its log in the outcome's own UPDATE: no round
trip more than before, and one Redis round trip for the breaker.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from enum import StrEnum
from typing import Any

import redis
from prometheus_client import Counter

from herald.queue import Permanent, is_last_attempt
from models.base import utcnow
from models.notifications import Outcome
from providers.base import FailureKind, OutboundMessage, Provider, SendResult
from providers.circuit import CircuitState, Verdict, breaker
from providers.circuit import Outcome as CircuitOutcome
from providers.select import provider_named

log = logging.getLogger("herald.notifications")

#: Newest entries an attempts log keeps (a few attempts × a few providers fit many times).
ATTEMPTS_LOG_KEPT = 50

PROVIDER_SENDS = Counter("provider_sends", "Sends to each provider, by result.",
                         ["provider", "result"])


class AttemptResult(StrEnum):
    """What one provider did with one send, as the attempts log records it."""

    #: It accepted the message.
    ACCEPTED = "accepted"
    #: It certainly did not accept it (transient, refused or terminal; ``error`` says).
    DEFINITE_FAILURE = "definite_failure"
    #: It may have accepted it: the delivery is pinned to it from now on.
    AMBIGUOUS = "ambiguous"
    #: Its circuit was open: nothing was sent to it.
    SKIPPED_OPEN_CIRCUIT = "skipped_open_circuit"


#: What each failure kind means to the breaker: only a transient failure says the
#: provider is unwell. A refusal (a destination it does not serve) and a terminal answer
#: (an invalid recipient) are answers from a provider that is up, and an ambiguous one
#: says nothing either way.
_CIRCUIT_OUTCOMES = {None: CircuitOutcome.SUCCESS, FailureKind.TRANSIENT: CircuitOutcome.FAILURE,
                     FailureKind.REFUSED: CircuitOutcome.SUCCESS,
                     FailureKind.TERMINAL: CircuitOutcome.SUCCESS,
                     FailureKind.AMBIGUOUS: CircuitOutcome.NEITHER}

#: ``write(outcome, **fields) -> bool``: the attempt's fenced outcome write
#: (:func:`models.notifications.record_delivery_outcome` under its claim); False when
#: the claim was taken over.
Write = Callable[..., bool]


def log_entry(provider: str, result: AttemptResult, error: str | None = None
              ) -> dict[str, Any]:
    """One attempts log entry: ``{provider, at (ISO 8601), result, error}``."""
    return {"provider": provider, "at": utcnow().isoformat(), "result": result.value,
            "error": error}


def pinned_provider(attempts_log: Sequence[dict[str, Any]]) -> str | None:
    """The provider an ambiguous answer pinned the delivery to, if one did (a
    delivery-report fallback's entry pins nothing: it follows an acceptance)."""
    for entry in reversed(attempts_log):
        if entry.get("result") == AttemptResult.AMBIGUOUS.value and not entry.get("fallback"):
            return str(entry["provider"])
    return None


def send_through_chain(write: Write, delivery_id: str, chain: Sequence[Provider],
                       message: OutboundMessage,
                       attempts_log: list[dict[str, Any]] | None) -> dict[str, Any]:
    """Send ``message`` through ``chain`` (non-empty) as one attempt of the delivery and
    write the outcome through ``write``; returns what it did (the job's return value).

    Raises :class:`RuntimeError` for a retry (the claim released) and ``Permanent`` when
    the delivery ended ``failed_terminal``.
    """
    entries = list(attempts_log or [])
    pinned = pinned_provider(entries)
    if pinned is not None:
        # an ambiguous answer: only that provider may ever be tried again, even if it is
        # no longer in the chain, and whatever its circuit says (docs/pipeline.md#pinning)
        chain = [next((p for p in chain if p.name == pinned), None)
                 or provider_named(pinned)]
    retryable = unsent = False
    last: tuple[Provider, SendResult] | None = None
    for position, provider in enumerate(chain):
        verdict = Verdict.SEND if pinned is not None else circuit_verdict(provider.name)
        if verdict is Verdict.SKIP:
            entries.append(log_entry(provider.name, AttemptResult.SKIPPED_OPEN_CIRCUIT))
            retryable = True
            continue
        result = provider.send(message)
        record_send(provider.name, result, probe=verdict is Verdict.PROBE)
        unsent = True
        if result.accepted:
            entries.append(log_entry(provider.name, AttemptResult.ACCEPTED))
            PROVIDER_SENDS.labels(provider.name, AttemptResult.ACCEPTED.value).inc()
            write(Outcome.SENT, provider=provider.name, count_attempt=True,
                  provider_message_id=result.provider_message_id,
                  attempts_log=kept(entries))
            return {"delivery_id": delivery_id, "provider": provider.name,
                    "provider_message_id": result.provider_message_id}
        failure = f"{result.failure_code}: {result.failure_message}"
        ambiguous = result.failure_kind is FailureKind.AMBIGUOUS
        outcome = AttemptResult.AMBIGUOUS if ambiguous else AttemptResult.DEFINITE_FAILURE
        entries.append(log_entry(provider.name, outcome, failure))
        PROVIDER_SENDS.labels(provider.name, outcome.value).inc()
        last = (provider, result)
        retryable = retryable or result.retryable
        if ambiguous or result.failure_kind is FailureKind.TERMINAL:
            break  # pinned to this provider / no provider can send it
        if position + 1 < len(chain):
            # the history is written before the next provider is asked: a crash between
            # the two leaves it, and the next attempt starts over (mock-a, then mock-b)
            if not write(Outcome.SENDING, provider=provider.name, error=failure,
                         count_attempt=True, attempts_log=kept(entries)):
                return {"delivery_id": delivery_id, "skipped": "claim taken over"}
            unsent = False
    return _exhausted(write, entries, last, retryable=retryable, count_attempt=unsent)


def _exhausted(write: Write, entries: list[dict[str, Any]],
               last: tuple[Provider, SendResult] | None, *, retryable: bool,
               count_attempt: bool) -> dict[str, Any]:
    """The chain gave no acceptance: retry while attempts remain and a retry may succeed,
    else end ``failed_terminal``. Raises either way."""
    provider = last[0].name if last else None
    result = last[1] if last else None
    failure = (f"{result.failure_code}: {result.failure_message}" if result
               else "every provider's circuit is open")
    code = result.failure_code if result else "circuit_open"
    terminal = result is not None and result.failure_kind is FailureKind.TERMINAL
    if retryable and not terminal and not is_last_attempt():
        # keep sending, record the failure and release the claim for the retry
        write(Outcome.SENDING, provider=provider, error=failure, count_attempt=count_attempt,
              release_claim=True, attempts_log=kept(entries))
        raise RuntimeError(f"transient provider failure ({code})")
    write(Outcome.FAILED_TERMINAL, provider=provider, error=failure,
          count_attempt=count_attempt, attempts_log=kept(entries),
          reason="attempts_exhausted" if retryable and not terminal else "provider_rejected")
    raise Permanent(f"provider failure ({code})")


def kept(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The newest :data:`ATTEMPTS_LOG_KEPT` entries of an attempts log."""
    return entries[-ATTEMPTS_LOG_KEPT:]


def circuit_verdict(provider: str) -> Verdict:
    """The breaker's verdict for a send to ``provider``; a Redis that does not answer
    opens no circuit (the send is what matters, and the job queue lives on that Redis
    anyway)."""
    try:
        return breaker().allow(provider)
    except redis.RedisError as error:
        log.warning("provider circuit unknown (%s): sending", type(error).__name__,
                    extra={"provider": provider})
        return Verdict.SEND


def record_send(provider: str, result: SendResult, *, probe: bool) -> CircuitState | None:
    """Report a send to the breaker; never lets a Redis error stop the outcome write (an
    accepted send unrecorded would be sent again)."""
    try:
        return breaker().record(provider, _CIRCUIT_OUTCOMES[result.failure_kind], probe=probe)
    except redis.RedisError as error:
        log.warning("provider circuit not updated (%s)", type(error).__name__,
                    extra={"provider": provider})
        return None
