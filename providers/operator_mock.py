"""The mock telecom operator (``operator_slug = "mock"``): sells fixed packages and runs
activation steps, failing on request (docs/pipeline.md#the-mock-operator)."""

from __future__ import annotations

from decimal import Decimal

from herald.settings import Settings
from providers.operators import Package, StepRequest, StepResult

#: The mock operator's packages: code → (name, price in SAR).
MOCK_PACKAGES: dict[str, tuple[str, Decimal]] = {
    "mock-prepaid-10": ("Prepaid 10 GB", Decimal("50.00")),
    "mock-prepaid-50": ("Prepaid 50 GB", Decimal("120.00")),
    "mock-postpaid": ("Postpaid unlimited", Decimal("250.00")),
}


class MockOperator:
    """The mock operator adapter."""

    slug = "mock"

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    def packages(self) -> list[Package]:
        """The fixed packages above, priced in SAR."""
        return [Package(code=code, name=name, price=price, currency="SAR")
                for code, (name, price) in MOCK_PACKAGES.items()]

    def initiate(self, request: StepRequest) -> StepResult:
        raise NotImplementedError

    def verify_identity(self, request: StepRequest) -> StepResult:
        raise NotImplementedError

    def complete(self, request: StepRequest) -> StepResult:
        raise NotImplementedError
