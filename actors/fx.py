"""The fx-refresh queue: fetch US-dollar exchange rates from ``FX_PROVIDER`` and keep them
in ``fx_rates``, guarded against bad answers (docs/pipeline.md#fx-refresh).

- A transient provider failure (5xx, 429, timeout, connection) is raised: the queue
  retries it (3 attempts, 5 s exponential backoff).
- A provider that refuses us (bad key, plan) fails the job at once (``Permanent``):
  retrying cannot help, and a failed job is what an operator looks at.
- An answer that fails validation (not a rate table, another base currency, a currency
  of ``FX_CURRENCIES`` missing, a rate that is not a positive finite number) or the jump
  guard (a rate more than ``FX_MAX_JUMP_PCT`` away from the stored one) is refused: the
  stored rates stay, the job completes, and its return value says what was refused.

The clock runs it every ``FX_REFRESH_INTERVAL_MS`` and once at its start, while
``FEATURE_ESIM_STORE`` is on. Prices convert through the stored rates with
:func:`convert`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from datetime import timedelta
from decimal import ROUND_HALF_UP, Decimal

from pydantic import BaseModel, ConfigDict
from sqlmodel import Session

from actors.queues import esim_store_enabled, registry
from herald.db import session as db_session
from herald.queue import Permanent, Schedule
from herald.settings import Settings, get_settings
from models.base import utcnow
from models.catalog import replace_rates, stored_rates
from providers.fx import BASE_CURRENCY, FxInvalidAnswer, FxQuote, FxRefused, active_fx_provider

log = logging.getLogger("herald.fx")

#: Converted prices are rounded half-up to cents.
CENT = Decimal("0.01")


class UnratedCurrency(LookupError):
    """No stored exchange rate for ``currency``."""

    def __init__(self, currency: str) -> None:
        super().__init__(f"no exchange rate for {currency}")
        self.currency = currency


# -- checking an answer ----------------------------------------------------------------------
def quote_problems(quote: FxQuote, wanted: Sequence[str]) -> list[str]:
    """What makes ``quote`` unusable for ``wanted`` (empty: nothing): another base, a
    wanted currency missing, a wanted rate that is not a positive finite number."""
    if quote.base != BASE_CURRENCY:
        return [f"base is {quote.base[:8]!r}, not {BASE_CURRENCY}"]
    problems = []
    for code in wanted:
        rate = quote.rates.get(code)
        if rate is None:
            problems.append(f"{code} missing")
        elif not rate.is_finite() or rate <= 0:
            problems.append(f"{code} rate {rate} is not a positive finite number")
    return problems


def jumps(stored: Mapping[str, Decimal], fetched: Mapping[str, Decimal],
          max_pct: float) -> list[str]:
    """The fetched rates that moved more than ``max_pct`` percent from the stored ones
    (a currency with no stored rate cannot jump)."""
    limit = Decimal(str(max_pct))
    moved = []
    for code, rate in fetched.items():
        before = stored.get(code)
        if before is not None and before > 0 and abs(rate - before) / before * 100 > limit:
            moved.append(f"{code} {before.normalize()} → {rate.normalize()}")
    return moved


# -- one refresh -------------------------------------------------------------------------------
def refresh_rates(settings: Settings | None = None) -> dict[str, object]:
    """Fetch, check and store the rates of FX_CURRENCIES (see the module docstring).

    Returns ``{"status": "stored", "provider", "rates": {code: "rate"}}`` or
    ``{"status": "rejected", "reason": "invalid" | "jump", "problems": [...]}`` (nothing
    written). Raises :class:`providers.fx.FxUnavailable` to be retried and ``Permanent``
    when the provider refuses.
    """
    settings = settings or get_settings()
    wanted = settings.fx_currency_codes
    provider = active_fx_provider(settings)
    try:
        quote = provider.latest(wanted)
    except FxRefused as error:
        raise Permanent(f"{provider.name} refused: {error}") from error
    except FxInvalidAnswer as error:
        return _rejected(provider.name, "invalid", [str(error)])
    problems = quote_problems(quote, wanted)
    if problems:
        return _rejected(provider.name, "invalid", problems)
    rates = {code: quote.rates[code] for code in wanted}
    with db_session() as session:
        moved = jumps(stored_rates(session, lock=True), rates, settings.fx_max_jump_pct)
        if moved:
            return _rejected(provider.name, "jump", moved)
        replace_rates(session, rates, provider.name, quote.as_of or utcnow())
    log.info("exchange rates stored", extra={"provider": provider.name, "rates": len(rates)})
    return {"status": "stored", "provider": provider.name,
            "rates": {code: str(rate) for code, rate in rates.items()}}


def _rejected(provider: str, reason: str, problems: list[str]) -> dict[str, object]:
    log.warning("exchange rates refused, stored rates kept: %s", "; ".join(problems),
                extra={"provider": provider, "reason": reason})
    return {"status": "rejected", "reason": reason, "problems": problems}


# -- converting prices -------------------------------------------------------------------------
def current_rates(session: Session) -> dict[str, Decimal]:
    """The stored rates, with the base currency's own (1)."""
    return {**stored_rates(session), BASE_CURRENCY: Decimal(1)}


def convert(amount: Decimal, source: str, target: str,
            rates: Mapping[str, Decimal]) -> Decimal:
    """``amount`` of ``source`` in ``target`` through the US-dollar ``rates`` (``amount
    / rate[source] * rate[target]``), rounded half-up to cents; :class:`UnratedCurrency`
    when either currency has no rate. The same currency is only rounded."""
    if source != target:
        for code in (target, source):
            if code not in rates:
                raise UnratedCurrency(code)
        amount = amount / rates[source] * rates[target]
    return amount.quantize(CENT, rounding=ROUND_HALF_UP)


# -- the job and its schedule ------------------------------------------------------------------
class FxJob(BaseModel):
    """An FX refresh carries nothing: it asks the provider."""

    model_config = ConfigDict(extra="forbid")


@registry.actor(queue="fx-refresh", payload=FxJob)
def refresh_fx_rates(job: FxJob) -> dict[str, object]:
    """One refresh as a job; its return value is :func:`refresh_rates`'s."""
    return refresh_rates()


registry.schedule(Schedule(name="fx-refresh", actor=refresh_fx_rates,
                           every=timedelta(milliseconds=get_settings().fx_refresh_interval_ms),
                           feature_gate=esim_store_enabled, run_at_start=True))
