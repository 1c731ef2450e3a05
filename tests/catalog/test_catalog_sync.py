"""The catalog sync engine through its two syncs, on PostgreSQL with a real worker: one
transaction per owner, retries only when every owner failed, deactivation of dropped
items, and the provider health readings the checkout's circuit breaker reads."""

from __future__ import annotations

from decimal import Decimal

from actors.catalog import sync_esim_products, sync_esim_products_job, sync_operator_packages_job
from models.catalog import NOT_ENABLED, unavailable_reason
from providers.esim_mock import MOCK_PRODUCTS
from providers.operator_mock import MOCK_PACKAGES
from tests.catalog.conftest import Store
from tests.support.catalog.plugins import product
from tests.support.catalog.steps import health, packages, products, run_job


def test_one_failing_provider_leaves_the_others_synced(store: Store) -> None:
    # Given three providers: the mock; alpha, whose catalog server is down; and beta,
    # which lists a price the table cannot hold (the database refuses beta's write)
    store.unreachable("alpha")
    store.catalog("beta", product("b-1"), product("b-huge", price="1000000000000000"))
    store.configure(ESIM_PROVIDERS="mock,alpha,beta")

    # When the eSIM product sync job runs
    job = run_job(sync_esim_products_job)

    # Then it completes, the mock's catalog is stored, and nothing of alpha or beta
    assert job.state == "completed", job.failed_reason
    assert products() == {id_: ("mock", price, "USD", True)
                          for id_, (_, price) in MOCK_PRODUCTS.items()}
    # and its return value counts per owner and names each failure
    owners = job.return_value["owners"]
    assert owners["mock"] == {"listed": len(MOCK_PRODUCTS), "added": len(MOCK_PRODUCTS),
                              "deactivated": 0}
    assert "ConnectError" in owners["alpha"]["error"]
    assert owners["beta"]["error"] == "NumericValueOutOfRange: numeric field overflow"
    # and the two failing providers are read unavailable, naming why; the mock is fine
    readings = health()
    assert readings["mock"] == (True, None)
    assert not readings["alpha"][0] and "catalog sync failed" in readings["alpha"][1]
    assert not readings["beta"][0] and "catalog sync failed" in readings["beta"][1]


def test_when_every_provider_fails_the_job_is_retried(store: Store) -> None:
    # Given the only provider's catalog server answering 503 once
    server = store.catalog("alpha", product("a-1"), product("a-2"))
    store.configure(ESIM_PROVIDERS="alpha")
    server.fail_next(503)

    # When the sync job runs
    job = run_job(sync_esim_products_job)

    # Then its first attempt failed (every owner failed) and the retry synced the catalog
    assert job.state == "completed", job.failed_reason
    assert job.attempts_started == 2
    assert set(products()) == {"a-1", "a-2"}
    assert health()["alpha"] == (True, None)


def test_a_job_whose_every_attempt_finds_every_provider_down_fails(store: Store) -> None:
    # Given the only provider's catalog answering 503 to every call
    store.catalog("alpha", product("a-1")).catalog_status = 503
    store.configure(ESIM_PROVIDERS="alpha")

    # When the sync job runs

    job = run_job(sync_esim_products_job)

    # Then every attempt failed and the job failed, naming the owner's error
    assert job.state == "failed"
    assert job.attempts_made == 3
    assert "every owner failed: alpha: HTTPStatusError" in (job.failed_reason or "")
    assert products() == {}
    assert health()["alpha"][0] is False


def test_a_product_no_longer_listed_is_deactivated_and_kept(store: Store) -> None:
    # Given a provider whose catalog was synced with three products
    server = store.catalog("alpha", product("a-1"), product("a-2"), product("a-3"))
    store.configure(ESIM_PROVIDERS="alpha")
    sync_esim_products()

    # When its catalog drops one and changes another's price, and the sync runs again
    server.products = [product("a-1", price="4.50"), product("a-3")]
    report = sync_esim_products()

    # Then the dropped product is kept, inactive; the others are active, updated
    assert products() == {"a-1": ("alpha", Decimal("4.50"), "USD", True),
                          "a-2": ("alpha", Decimal("4.00"), "USD", False),
                          "a-3": ("alpha", Decimal("4.00"), "USD", True)}
    assert report["owners"]["alpha"] == {"listed": 2, "added": 0, "deactivated": 1}

    # and listed again, it is active again
    server.products = [product("a-1"), product("a-2"), product("a-3")]
    sync_esim_products()
    assert all(active for *_, active in products().values())


def test_a_product_id_another_provider_holds_refuses_that_listing_only(store: Store) -> None:
    # Given alpha's synced product a-1
    store.catalog("alpha", product("a-1"))
    beta = store.catalog("beta", product("b-1"))
    store.configure(ESIM_PROVIDERS="alpha,beta")
    sync_esim_products()

    # When beta starts listing an id alpha holds
    beta.products = [product("b-1", price="9.00"), product("a-1", price="1.00")]
    report = sync_esim_products()

    # Then beta's listing is refused whole (b-1 keeps its price), alpha's product stays
    assert "held by another provider: ['a-1']" in report["owners"]["beta"]["error"]
    assert products() == {"a-1": ("alpha", Decimal("4.00"), "USD", True),
                          "b-1": ("beta", Decimal("4.00"), "USD", True)}


def test_health_readings_are_refreshed_after_every_run(store: Store) -> None:
    # Given alpha saying it takes no orders, and beta whose catalog answers but whose
    # health endpoint fails
    alpha = store.catalog("alpha", product("a-1"))
    alpha.health = {"available": False, "detail": "maintenance until 14:00"}
    store.catalog("beta", product("b-1")).health_status = 502
    store.configure(ESIM_PROVIDERS="mock,alpha,beta")

    # When the sync runs
    sync_esim_products()

    # Then each reading is stored, and the circuit breaker reads them
    readings = health()
    assert readings["alpha"] == (False, "maintenance until 14:00")
    assert readings["beta"][0] is False
    assert readings["beta"][1].startswith("health check failed: HTTPStatusError")
    assert set(products()) == {*MOCK_PRODUCTS, "a-1", "b-1"}
    assert unavailable_reason("mock") is None
    assert unavailable_reason("alpha") == "maintenance until 14:00"
    assert unavailable_reason("beta") is not None
    # and a provider never read yet counts as available
    assert unavailable_reason("never-synced") is None

    # When alpha is back and beta is no longer enabled
    alpha.health = {"available": True, "detail": None}
    store.configure(ESIM_PROVIDERS="mock,alpha")
    sync_esim_products()

    # Then alpha is available again and beta is unavailable as not enabled
    assert unavailable_reason("alpha") is None
    assert health()["beta"] == (False, NOT_ENABLED)


def test_the_package_sync_stores_each_operators_packages(store: Store) -> None:
    # Given the mock operator and gamma, whose packages come from its server
    gamma = store.catalog("gamma", product("g-1", currency="SAR"),
                          product("g-2", currency="SAR"))
    store.configure(OPERATORS="mock,gamma")

    # When the package sync job runs
    job = run_job(sync_operator_packages_job)

    # Then both operators' packages are stored, counted per operator
    assert job.state == "completed", job.failed_reason
    expected = {("mock", code): (price, True) for code, (_, price) in MOCK_PACKAGES.items()}
    assert packages() == {**expected, ("gamma", "g-1"): (Decimal("4.00"), True),
                          ("gamma", "g-2"): (Decimal("4.00"), True)}
    assert job.return_value["owners"]["gamma"] == {"listed": 2, "added": 2, "deactivated": 0}

    # When gamma drops a package and changes another's price, and the sync runs again
    gamma.products = [product("g-1", price="5.00", currency="SAR")]
    again = run_job(sync_operator_packages_job)

    # Then the dropped package is kept inactive, and nothing new was added
    assert packages()[("gamma", "g-2")] == (Decimal("4.00"), False)
    assert packages()[("gamma", "g-1")] == (Decimal("5.00"), True)
    assert again.return_value["owners"]["mock"]["added"] == 0
