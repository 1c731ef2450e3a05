"""The mock provider: sends nowhere, records everything, and fails on request.

It carries every channel and is the default for each service, so the embedded default
sends nothing real. State lives in Redis under ``<QUEUE_PREFIX>:mock:`` so that a test
(or the demo) can script behaviour in one process and worker subprocesses obey it:

- ``<prefix>:mock:sends``  a list of JSON records, one per ``send`` call, oldest first
- ``<prefix>:mock:script`` a hash, address → behaviour

That Redis is the job Redis unless ``MOCK_STORE_URL`` names another one (the crash test
keeps the mock's records there, out of reach of its ``FLUSHALL``).

Behaviours (:meth:`MockProvider.script`):

=================  ===========================================================
``ok``             accept (also what an unscripted address gets)
``transient:N``    fail transiently on the next N sends to that address, then accept;
                   the count is decremented atomically in Redis, so N failures
                   happen in total however many workers send at once
``terminal``       fail terminally on every send
``hang:S``         sleep S seconds, then accept (to exercise deadlines and claims)
=================  ===========================================================

Classification: the mock only returns what it was scripted to return.

``MOCK_CHANNELS`` narrows the channels it carries (e.g. ``email,sms``), so that a channel
without a provider able to carry it (``provider_unsupported``) can be seen without one.

Instances (docs/pipeline.md#mock-instances): ``MOCK_INSTANCES=mock-a,mock-b`` makes each
name a provider of its own (``MockProvider(settings, instance="mock-a")``, ``name`` the
instance's), usable in the provider chains, carrying the mock's channels; its records
carry ``"provider": <instance>``. Each instance has a state, set at run time with
``HSET <prefix>:mock:instances <instance> up|down|ambiguous`` (:meth:`MockProvider.set_state`)
and read in the send's one round trip:

=============  ==============================================================
``up``/unset   as above (the address scripts apply)
``down``       every send a definite failure (transient ``mock_down``), recorded
``ambiguous``  the send is accepted and recorded, then answered AMBIGUOUS
               (``mock_timeout``), as a provider whose answer was lost
=============  ==============================================================

An instance honours the idempotency key (the delivery id) as a provider that takes one
does: a second send with the same key to the same instance answers the first message id
and records no second acceptance (its record's outcome is ``replayed``), for a day. The
plain ``mock`` keeps no such memory: it stands in for SMTP and SMS providers, which take
no key.
"""

from __future__ import annotations

import json
import logging
import re
import time
import uuid
from datetime import UTC, datetime
from typing import Any, cast

import redis
from redis.commands.core import Script

from herald.queue import ThreadConnections, current_app
from herald.settings import Settings, get_settings
from providers.base import (
    CallbackEvent,
    CallbackRequest,
    CallbackStatus,
    Channel,
    InvalidCallback,
    OutboundMessage,
    SendResult,
    hmac_sha256_signature,
    json_object,
    text_field,
    verify_hmac_sha256,
    without_addresses,
)

log = logging.getLogger(__name__)

#: Newest send records kept; the embedded default sends through the mock forever, so the
#: list is trimmed rather than left to grow.
MOCK_SENDS_KEPT = 10_000

_BEHAVIOUR = re.compile(r"^(ok|terminal|transient:\d+|hang:\d+(\.\d+)?)$")

#: Instance states (``<prefix>:mock:instances``), docs/pipeline.md#mock-instances.
INSTANCE_STATES = ("up", "down", "ambiguous")
#: Seconds an instance remembers an idempotency key's first message id.
IDEMPOTENCY_TTL_S = 86_400

# One round trip per send: read the instance's state and the address's behaviour,
# decide, and record the send. ``transient:N`` with N > 0 is decremented in the same step
# (two workers sending at once must not both spend the last failure). The record is the
# caller's body (ARGV[3], the send's JSON object left open) closed by the decision's tail
# (ARGV[4..6]: ok, transient, terminal; ARGV[8..9] an instance's down and replayed
# tails); a hang is returned unrecorded, and recorded by the caller once it has waited.
# An instance (ARGV[7] its name, KEYS[3] the states, KEYS[4] its key of this send's
# idempotency key, or '' without one) answers 'down', 'replayed:<first id>' or, once
# accepted (or replayed), 'ambiguous' as its state says; ARGV[10] is this send's message
# id, ARGV[11] how long the key is remembered.
_SEND_LUA = """
local instance = ARGV[7]
local state = 'up'
if instance ~= '' then
  state = redis.call('HGET', KEYS[3], instance) or 'up'
  if state == 'down' then
    redis.call('RPUSH', KEYS[2], ARGV[3] .. ARGV[8])
    redis.call('LTRIM', KEYS[2], -tonumber(ARGV[2]), -1)
    return 'down'
  end
  if KEYS[4] ~= '' then
    local first = redis.call('GET', KEYS[4])
    if first then
      redis.call('RPUSH', KEYS[2], ARGV[3] .. string.format(ARGV[9], first))
      redis.call('LTRIM', KEYS[2], -tonumber(ARGV[2]), -1)
      if state == 'ambiguous' then return 'ambiguous' end
      return 'replayed:' .. first
    end
  end
end
local decision = redis.call('HGET', KEYS[1], ARGV[1]) or 'ok'
local remaining = string.match(decision, '^transient:(%d+)$')
if remaining then
  remaining = tonumber(remaining)
  if remaining > 0 then
    redis.call('HSET', KEYS[1], ARGV[1], 'transient:' .. (remaining - 1))
    decision = 'transient'
  else
    decision = 'ok'
  end
end
if string.sub(decision, 1, 5) == 'hang:' then return decision end
local tail = ARGV[4]
if decision == 'transient' then tail = ARGV[5] end
if decision == 'terminal' then tail = ARGV[6] end
redis.call('RPUSH', KEYS[2], ARGV[3] .. tail)
redis.call('LTRIM', KEYS[2], -tonumber(ARGV[2]), -1)
if decision == 'ok' and instance ~= '' then
  if KEYS[4] ~= '' then
    redis.call('SET', KEYS[4], ARGV[10], 'EX', ARGV[11])
  end
  if state == 'ambiguous' then return 'ambiguous' end
end
return decision
"""
# bytes: a script given as text needs a client to encode it; this one serves every client
# (each call names its own, and EVALSHA reloads the script after a server restart)
_SEND_SCRIPT = Script(None, _SEND_LUA.encode())  # type: ignore[arg-type]  # no client: see above


_store_clients: dict[str, tuple[redis.Redis, ThreadConnections]] = {}


def mock_store() -> redis.Redis:
    """Where the mocks (this provider, the mock eSIM provider) keep their records:
    MOCK_STORE_URL, else the job Redis (the installed queue App's client)."""
    return _mock_store_connections()[0]


def _mock_store_connections() -> tuple[redis.Redis, ThreadConnections]:
    """The mock store's client and each thread's own connection to it."""
    url = get_settings().mock_store_url
    if not url:
        app = current_app()
        return app.client, app.connections
    found = _store_clients.get(url)
    if found is None:
        client = redis.Redis.from_url(url)
        found = _store_clients.setdefault(url, (client, ThreadConnections(client)))
    return found


def _keys() -> tuple[str, str]:
    prefix = get_settings().queue_prefix
    return f"{prefix}:mock:sends", f"{prefix}:mock:script"


def _instances_key() -> str:
    return f"{get_settings().queue_prefix}:mock:instances"


class MockProvider:
    """Records every send in Redis and behaves as scripted per address (and, for an
    instance, as its state says)."""

    name = "mock"
    channels = frozenset(Channel)

    def __init__(self, settings: Settings | None = None, *, instance: str | None = None
                 ) -> None:
        """A mock carrying the channels MOCK_CHANNELS names (every channel when unset);
        with ``instance``, the mock instance of that name (one of MOCK_INSTANCES)."""
        names = (settings or get_settings()).mock_channels
        if names:
            self.channels = frozenset(Channel(name) for name in names.split(","))
        self.instance = instance
        if instance is not None:
            self.name = instance
        # the body's tag: the plain mock's records stay as they were
        self._tag = "" if instance is None else ", " + json.dumps({"provider": instance})[1:-1]

    def send(self, message: OutboundMessage) -> SendResult:
        """Decide (atomically) what the instance's state and the script say for
        ``message.to``, record, answer: one round trip, on the sending thread's own
        connection (a scripted hang takes a second one, to record after waiting)."""
        client, connections = _mock_store_connections()
        sends_key, script_key = _keys()
        message_id = f"mock-{uuid.uuid4().hex}"
        accepted = SendResult.ok(message_id)
        # the accepted tail without a JSON encoder's pass per send
        body, ok_tail = _record_body(message) + self._tag, _OK_TAIL % message_id
        instance = self.instance or ""
        idempotency_key = (f"{_instances_key()}:{instance}:{message.idempotency_key}"
                           if instance and message.idempotency_key else "")
        decision = connections.run_script(
            _SEND_SCRIPT, keys=(script_key, sends_key, _instances_key(), idempotency_key),
            args=(message.to, MOCK_SENDS_KEPT, body, ok_tail, *_FAILURE_TAILS, instance,
                  _DOWN_TAIL, _REPLAYED_TAIL, message_id, IDEMPOTENCY_TTL_S))
        decision = decision.decode() if isinstance(decision, bytes) else str(decision)
        if decision.startswith("hang:"):
            # a blocking sleep on purpose: the mock stands in for a provider that stalls
            time.sleep(float(decision.removeprefix("hang:")))
            decision = "ok"
            pipe = client.pipeline(transaction=True)
            pipe.rpush(sends_key, body + ok_tail)
            pipe.ltrim(sends_key, -MOCK_SENDS_KEPT, -1)
            if idempotency_key:
                pipe.set(idempotency_key, message_id, ex=IDEMPOTENCY_TTL_S)
            pipe.execute()
        log.debug("mock send", extra={"delivery_id": message.idempotency_key,
                                      "provider": self.name, "outcome": decision})
        if decision.startswith("replayed:"):
            return SendResult.ok(decision.removeprefix("replayed:"))
        return _FAILURES.get(decision, accepted)

    @classmethod
    def set_state(cls, instance: str, state: str) -> None:
        """Set a mock instance's state: ``up``, ``down`` or ``ambiguous`` (see the module
        docstring); every worker's next send to it obeys."""
        if state not in INSTANCE_STATES:
            raise ValueError(f"unknown mock instance state {state!r}: use "
                             f"{', '.join(INSTANCE_STATES)}")
        mock_store().hset(_instances_key(), instance, state)

    @classmethod
    def script(cls, address: str, behaviour: str) -> None:
        """Tell the mock what to do with sends to ``address`` (see the module docstring)."""
        if not _BEHAVIOUR.match(behaviour):
            raise ValueError(f"unknown mock behaviour {behaviour!r}: "
                             "use ok, transient:N, terminal or hang:S")
        mock_store().hset(_keys()[1], address, behaviour)

    @classmethod
    def sends(cls, *, accepted_only: bool = False, provider: str | None = None
              ) -> list[dict[str, Any]]:
        """Every recorded send, oldest first (only the accepted ones if asked; only those
        of one instance, or of the plain mock, when ``provider`` names it)."""
        raw = cast(list[bytes], mock_store().lrange(_keys()[0], 0, -1))
        records = [json.loads(item) for item in raw]
        if accepted_only:
            records = [record for record in records if record["outcome"] == "ok"]
        if provider is not None:
            records = [record for record in records
                       if record.get("provider", "mock") == provider]
        return records

    @classmethod
    def reset(cls) -> None:
        """Forget every recorded send, every scripted behaviour and every instance's
        state (the idempotency keys expire on their own)."""
        mock_store().delete(*_keys(), _instances_key())


def _record_body(message: OutboundMessage) -> str:
    """A send's record as JSON, left open for :func:`_record_tail` to close: the body
    is encoded once, whatever the decision."""
    return json.dumps({
        "channel": str(message.channel),
        "to": message.to,
        "cc": list(message.cc),
        "from": message.sender,
        "subject": message.subject,
        "text": message.text,
        "html": message.html is not None,
        "attachments": [attachment.filename for attachment in message.attachments],
        "idempotency_key": message.idempotency_key,
        "at": datetime.now(UTC).isoformat(),
    })[:-1]


def _record_tail(result: SendResult) -> str:
    """The fields of a record that depend on the decision, closing its JSON object."""
    return ", " + json.dumps({
        "provider_message_id": result.provider_message_id,
        "outcome": "ok" if result.accepted else str(result.failure_kind)})[1:]


#: What the scripted failures and the instance states answer, by decision, and the
#: records' tails.
_FAILURES = {"transient": SendResult.transient("mock_transient", "scripted transient failure"),
             "terminal": SendResult.terminal("mock_terminal", "scripted terminal failure"),
             "down": SendResult.transient("mock_down", "mock instance down"),
             "ambiguous": SendResult.ambiguous(
                 "mock_timeout", "mock instance accepted the send, then timed out")}
_FAILURE_TAILS = (_record_tail(_FAILURES["transient"]), _record_tail(_FAILURES["terminal"]))
_DOWN_TAIL = _record_tail(_FAILURES["down"])
#: :func:`_record_tail` of an accepted send, its message id (hex: nothing to escape) left
#: to fill in with ``%``.
_OK_TAIL = _record_tail(SendResult.ok("%s"))
#: The tail of a replayed send (same idempotency key), its first message id left to fill
#: in with Lua's ``string.format``.
_REPLAYED_TAIL = ", " + json.dumps({"provider_message_id": "%s", "outcome": "replayed"})[1:]


# -- delivery-receipt callbacks ---------------------------------------------------------------
#: The header that carries a mock callback's signature (``sha256=<hex HMAC>``).
MOCK_SIGNATURE_HEADER = "X-Herald-Signature"
#: What each mock status means for the delivery.
MOCK_CALLBACK_STATUSES = {"accepted": CallbackStatus.OTHER, "sent": CallbackStatus.SENT,
                          "delivered": CallbackStatus.DELIVERED,
                          "failed": CallbackStatus.FAILED_TERMINAL}


def parse_callback(request: CallbackRequest, settings: Settings | None = None) -> CallbackEvent:
    """A mock delivery receipt: ``X-Herald-Signature: sha256=<hex HMAC-SHA256 of the raw
    body>`` under MOCK_CALLBACK_SECRET, body ``{"event_id", "provider_message_id",
    "channel", "status"}`` (status: accepted, sent, delivered or failed).

    Raises :class:`InvalidSignature` before reading the body, then
    :class:`InvalidCallback` for a body that does not have that shape.
    """
    secret = (settings or get_settings()).mock_callback_secret
    verify_hmac_sha256(secret, request.body, request.header(MOCK_SIGNATURE_HEADER))
    fields = json_object(request.body)
    status = text_field(fields, "status")
    if status not in MOCK_CALLBACK_STATUSES:
        raise InvalidCallback(f"status: must be one of {', '.join(MOCK_CALLBACK_STATUSES)}")
    try:
        channel = Channel(text_field(fields, "channel"))
    except ValueError:
        raise InvalidCallback("channel: must be email, sms or push") from None
    return CallbackEvent(event_id=text_field(fields, "event_id") or "",
                         provider_message_id=text_field(fields, "provider_message_id") or "",
                         channel=channel, status=MOCK_CALLBACK_STATUSES[status],
                         detail=status, payload=without_addresses(fields))


def signed_callback(send: dict[str, Any], status: str = "delivered", *,
                    event_id: str | None = None, secret: str | None = None
                    ) -> tuple[bytes, dict[str, str]]:
    """The body and headers of a signed mock receipt for a recorded send (a record of
    :meth:`MockProvider.sends`); POST them to ``/v1/callbacks/mock``.

    The event id defaults to ``<provider message id>-<status>``, so the same status for
    the same message is one event however often it is posted.
    """
    message_id = send["provider_message_id"]
    body = json.dumps({"event_id": event_id or f"{message_id}-{status}",
                       "provider_message_id": message_id, "channel": send["channel"],
                       "status": status}).encode()
    signature = hmac_sha256_signature(secret or get_settings().mock_callback_secret, body)
    return body, {MOCK_SIGNATURE_HEADER: signature, "Content-Type": "application/json"}
