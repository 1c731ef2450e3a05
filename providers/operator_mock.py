"""The mock telecom operator (``operator_slug = "mock"``): sells fixed packages and runs
activation steps, failing on request (docs/state-machines.md#activations).

Steps succeed unless scripted. The script lives in Redis (the mock provider's store:
``MOCK_STORE_URL``, else the job Redis), so a test scripts in one process what a worker
in another obeys:

- ``<prefix>:mock:operator:script`` a hash, msisdn → behaviours (comma-separated)
- ``<prefix>:mock:operator:calls``  a list of JSON records, one per step call, oldest first

Behaviours (:meth:`MockOperator.script`):

=======================  ==========================================================
``ok``                   every step succeeds (also what an unscripted msisdn gets)
``transient:<step>:N``   the next N calls of that step fail transiently, then it
                         succeeds; decremented atomically, so N failures in total
``reject:<step>``        the operator refuses that step for good
=======================  ==========================================================
"""

from __future__ import annotations

import json
import re
import uuid
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any, cast

from redis.commands.core import Script

from herald.settings import Settings, get_settings
from providers.mock import mock_store
from providers.operators import (
    OperatorRejected,
    Package,
    StepRequest,
    StepResult,
    TransientOperatorError,
)

#: The mock operator's packages: code → (name, price in SAR).
MOCK_PACKAGES: dict[str, tuple[str, Decimal]] = {
    "mock-prepaid-10": ("Prepaid 10 GB", Decimal("50.00")),
    "mock-prepaid-50": ("Prepaid 50 GB", Decimal("120.00")),
    "mock-postpaid": ("Postpaid unlimited", Decimal("250.00")),
}

_STEPS = "initiate|verify_identity|complete"
_BEHAVIOUR = re.compile(rf"^(ok|transient:({_STEPS}):\d+|reject:({_STEPS}))$")
#: Step call records kept (the list is trimmed, never left to grow).
CALLS_KEPT = 10_000

# One round trip per step: decide from the msisdn's behaviours (spending one transient
# failure atomically, so two workers cannot both spend the last) and record the call.
# ARGV: msisdn, step, the call's JSON record left open, records kept.
_STEP_LUA = """
local script = redis.call('HGET', KEYS[1], ARGV[1]) or 'ok'
local decision = 'ok'
local kept = {}
for part in string.gmatch(script, '[^,]+') do
  local step, left = string.match(part, '^transient:([%w_]+):(%d+)$')
  if step == ARGV[2] and tonumber(left) > 0 and decision == 'ok' then
    decision = 'transient'
    part = 'transient:' .. step .. ':' .. (tonumber(left) - 1)
  elseif part == 'reject:' .. ARGV[2] then
    decision = 'reject'
  end
  kept[#kept + 1] = part
end
if decision == 'transient' then redis.call('HSET', KEYS[1], ARGV[1], table.concat(kept, ',')) end
redis.call('RPUSH', KEYS[2], ARGV[3] .. ', "outcome": "' .. decision .. '"}')
redis.call('LTRIM', KEYS[2], -tonumber(ARGV[4]), -1)
return decision
"""
_STEP_SCRIPT = Script(None, _STEP_LUA.encode())  # type: ignore[arg-type]  # as providers/mock.py's


def _keys() -> tuple[str, str]:
    prefix = f"{get_settings().queue_prefix}:mock:operator"
    return f"{prefix}:script", f"{prefix}:calls"


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
        """Start the activation; answers with a fresh operator reference."""
        self._decide("initiate", request)
        return StepResult(operator_ref=f"mock-op-{uuid.uuid4().hex[:12]}",
                          detail="activation initiated")

    def verify_identity(self, request: StepRequest) -> StepResult:
        """Accept the subscriber's identity."""
        self._decide("verify_identity", request)
        return StepResult(detail="identity verified")

    def complete(self, request: StepRequest) -> StepResult:
        """Bring the line live."""
        self._decide("complete", request)
        return StepResult(detail="line active")

    @staticmethod
    def _decide(step: str, request: StepRequest) -> None:
        """Raise what the msisdn's script says for ``step`` (nothing: success)."""
        script_key, calls_key = _keys()
        record = json.dumps({"step": step, "msisdn": request.msisdn,
                             "activation_id": request.activation_id,
                             "operator_ref": request.operator_ref,
                             "at": datetime.now(UTC).isoformat()})[:-1]
        client = mock_store()
        decision = _STEP_SCRIPT(keys=(script_key, calls_key),
                                args=(request.msisdn, step, record, CALLS_KEPT), client=client)
        decision = decision.decode() if isinstance(decision, bytes) else str(decision)
        if decision == "transient":
            raise TransientOperatorError(f"mock operator: {step} timed out (scripted)")
        if decision == "reject":
            raise OperatorRejected(f"mock operator: {step} refused (scripted)")

    @classmethod
    def script(cls, msisdn: str, *behaviours: str) -> None:
        """Tell the mock what to do with the steps of ``msisdn`` (see the module
        docstring); ValueError, nothing stored, for a behaviour it does not know."""
        for behaviour in behaviours:
            if not _BEHAVIOUR.match(behaviour):
                raise ValueError(f"unknown mock operator behaviour {behaviour!r}: use ok, "
                                 "transient:<step>:N or reject:<step>")
        mock_store().hset(_keys()[0], msisdn, ",".join(behaviours) or "ok")

    @classmethod
    def calls(cls) -> list[dict[str, Any]]:
        """Every recorded step call, oldest first (``outcome``: ok, transient, reject)."""
        calls = cast(list[bytes], mock_store().lrange(_keys()[1], 0, -1))
        return [json.loads(item) for item in calls]

    @classmethod
    def reset(cls) -> None:
        """Forget every recorded call and every scripted behaviour."""
        mock_store().delete(*_keys())
