"""The fx-refresh queue on PostgreSQL with a real worker: a good answer is stored, a
transient failure is retried, and validation or jump-guard rejects keep the stored rates
while the job completes."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from decimal import Decimal

import pytest

from actors.fx import refresh_fx_rates, refresh_rates
from herald.db import session
from models.catalog import replace_rates
from providers.fx import MOCK_RATES
from tests.catalog.conftest import Store
from tests.support.catalog.steps import rates, run_job
from tests.support.providers.fake_fx import APP_ID, FakeOpenExchangeRates

#: The rates the tests' stored table starts with (a refresh from the fake moves none by
#: more than 10 %).
STORED = {"EUR": Decimal("0.9"), "SAR": Decimal("3.7")}


@pytest.fixture
def oxr(store: Store) -> Iterator[FakeOpenExchangeRates]:
    """herald refreshing EUR and SAR from a local Open Exchange Rates server."""
    with FakeOpenExchangeRates() as fake:
        store.configure(FX_PROVIDER="openexchangerates", FX_BASE_URL=fake.url,
                        FX_API_KEY=APP_ID, FX_CURRENCIES="EUR,SAR", FX_MAX_JUMP_PCT="10")
        yield fake


def store_rates(values: dict[str, Decimal]) -> None:
    with session() as db:
        replace_rates(db, values, "earlier", datetime(2026, 1, 1, tzinfo=UTC))


def test_the_mock_providers_rates_are_stored(store: Store) -> None:
    # When an FX refresh job runs on the mock provider
    job = run_job(refresh_fx_rates)

    # Then it completes and FX_CURRENCIES' rates are stored
    assert job.state == "completed", job.failed_reason
    wanted = ("EUR", "GBP", "SAR", "AED")
    assert rates() == {code: MOCK_RATES[code] for code in wanted}
    assert job.return_value == {"status": "stored", "provider": "mock",
                                "rates": {code: str(MOCK_RATES[code]) for code in wanted}}


def test_a_good_answer_replaces_the_stored_rates(oxr: FakeOpenExchangeRates) -> None:
    # Given stored rates, one of a currency no longer refreshed
    store_rates({**STORED, "JPY": Decimal("150")})

    # When the refresh runs
    job = run_job(refresh_fx_rates)

    # Then the provider's rates are stored exactly, and the stale currency is gone
    assert job.state == "completed", job.failed_reason
    assert rates() == {"EUR": Decimal("0.92"), "SAR": Decimal("3.75")}


def test_a_transient_failure_throws_and_the_retry_stores(oxr: FakeOpenExchangeRates) -> None:
    store_rates(STORED)
    # Given a provider that answers 503 once
    oxr.fail_next(503)

    # When the refresh runs
    job = run_job(refresh_fx_rates)

    # Then the first attempt failed, the queue retried it, and the retry stored the rates
    assert job.state == "completed", job.failed_reason
    assert job.attempts_started == 2
    assert job.return_value["status"] == "stored"
    assert rates() == {"EUR": Decimal("0.92"), "SAR": Decimal("3.75")}


def test_a_provider_that_stays_down_fails_the_job_after_three_attempts(
        oxr: FakeOpenExchangeRates) -> None:
    store_rates(STORED)
    oxr.fail_next(503, times=3)

    job = run_job(refresh_fx_rates)

    assert job.state == "failed" and job.attempts_made == 3
    assert job.failed_reason == "HTTP 503 service_unavailable"
    assert rates() == STORED


def test_a_refusing_provider_fails_the_job_at_once(oxr: FakeOpenExchangeRates) -> None:
    # Given a wrong key (retrying cannot help)
    oxr.app_id = "another-app-id"

    job = run_job(refresh_fx_rates)

    # Then the job fails on its first attempt, saying why, and no rate changed
    assert job.state == "failed" and job.attempts_started == 1
    assert job.failed_reason == "openexchangerates refused: HTTP 401 invalid_app_id"
    assert rates() == {}


@pytest.mark.parametrize(("answer", "problems"), [
    ({"rates": {"EUR": 0.92}}, ["SAR missing"]),
    ({"rates": {"EUR": 0.92, "SAR": 0}}, ["SAR rate 0 is not a positive finite number"]),
    ({"rates": {"EUR": -0.92, "SAR": 3.75}},
     ["EUR rate -0.92 is not a positive finite number"]),
    ({"rates": {"EUR": float("nan"), "SAR": float("inf")}},
     ["EUR rate NaN is not a positive finite number",
      "SAR rate Infinity is not a positive finite number"]),
    ({"base": "EUR", "rates": {"EUR": 1, "SAR": 4.07}}, ["base is 'EUR', not USD"]),
    ({"base": "USD"}, ["the answer has no rates object"]),
])
def test_an_invalid_answer_keeps_the_stored_rates_and_completes(
        oxr: FakeOpenExchangeRates, answer: dict[str, object], problems: list[str]) -> None:
    # Given stored rates and a provider answering something unusable
    store_rates(STORED)
    oxr.body = {"base": "USD", **answer}

    # When the refresh job runs
    job = run_job(refresh_fx_rates)

    # Then it completes on its first attempt, saying what it refused, and the stored
    # rates are unchanged
    assert job.state == "completed" and job.attempts_started == 1
    assert job.return_value == {"status": "rejected", "reason": "invalid",
                                "problems": problems}
    assert rates() == STORED


def test_a_rate_jumping_past_the_limit_keeps_the_stored_rates(
        oxr: FakeOpenExchangeRates) -> None:
    # Given stored rates, and a provider whose SAR rate moved 20 % (EUR only 2 %)
    store_rates(STORED)
    oxr.rates.update(EUR=0.918, SAR=4.44)

    # When the refresh job runs
    job = run_job(refresh_fx_rates)

    # Then it completes, refusing the whole answer: the stored rates stay, EUR's included
    assert job.state == "completed", job.failed_reason
    assert job.return_value == {"status": "rejected", "reason": "jump",
                                "problems": ["SAR 3.7 → 4.44"]}
    assert rates() == STORED


def test_a_move_within_the_limit_is_stored(oxr: FakeOpenExchangeRates) -> None:
    store_rates(STORED)
    oxr.rates.update(EUR=0.99, SAR=3.33)  # +10 % and −10 %: at the limit, not past it

    assert refresh_rates()["status"] == "stored"
    assert rates() == {"EUR": Decimal("0.99"), "SAR": Decimal("3.33")}
