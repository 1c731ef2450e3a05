"""The circuit breaker of each provider, shared by every worker through the job Redis
(docs/pipeline.md#the-circuit-breaker).

A provider's circuit is one hash, ``<QUEUE_PREFIX>:circuit:<provider>``, changed only by
the two scripts below, so every worker process sees one state::

    closed ──(PROVIDER_CIRCUIT_FAILURES definite failures in a row, or more than
    │         PROVIDER_CIRCUIT_RATIO of at least 20 sends in PROVIDER_CIRCUIT_WINDOW_S)──▶ open
    open ──(PROVIDER_CIRCUIT_COOLDOWN_S later, the first to ask gets the probe)──▶ half-open
    half-open ──(the probe accepted or answered)──▶ closed
    half-open ──(the probe failed definitely)──▶ open (the cooldown starts again)

While open (and half-open, for everyone but the probe) sends skip the provider. An
ambiguous answer is neither a success nor a failure; a probe answered ambiguously leaves
the circuit half-open, and another probe is granted a cooldown later.

Cost: one round trip per send. :meth:`Breaker.record` reports each send's result with
one EVALSHA whose reply is the state after it; :meth:`Breaker.allow` asks Redis only when
this process's last known state of the provider is not ``closed`` or is older than
:data:`KNOWN_STATE_TTL_S`. Times are the installed queue App's queue time
(``herald.queue.now_ms``), given to the scripts, so a test can give its own.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Iterator
from enum import StrEnum

import redis
from prometheus_client import REGISTRY
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from redis.commands.core import Script

from herald.queue import ThreadConnections, current_app, installed_app, now_ms
from herald.settings import PROVIDER_CHANNELS, Settings, get_settings

log = logging.getLogger("herald.providers.circuit")

#: Seconds this process trusts its last known ``closed`` state of a provider before it
#: asks Redis again before a send.
KNOWN_STATE_TTL_S = 1.0
#: The fewest sends within the window for the failure ratio to open a circuit.
RATIO_MIN_SENDS = 20
#: The window is counted in this many buckets (a sliding window, to a bucket's width).
WINDOW_BUCKETS = 6


class CircuitState(StrEnum):
    """A provider's circuit."""

    #: Sends go through.
    CLOSED = "closed"
    #: Sends skip the provider until the cooldown has passed.
    OPEN = "open"
    #: One probe send is out; its result closes or re-opens the circuit.
    HALF_OPEN = "half_open"


#: ``provider_circuit_state``'s value of each state.
GAUGE_VALUES = {CircuitState.CLOSED: 0, CircuitState.OPEN: 1, CircuitState.HALF_OPEN: 2}


class Verdict(StrEnum):
    """What :meth:`Breaker.allow` says about a send."""

    #: The circuit is closed: send.
    SEND = "send"
    #: This send is the half-open circuit's one probe: send, and record it as the probe.
    PROBE = "probe"
    #: The circuit is open: skip this provider.
    SKIP = "skip"


class Outcome(StrEnum):
    """What a send's result means to the breaker."""

    #: The provider answered (accepted, or refused the message itself: it is up).
    SUCCESS = "ok"
    #: It certainly did not accept it (transient or refused).
    FAILURE = "fail"
    #: It may have accepted it: neither.
    NEITHER = "none"


# Before a send. KEYS[1] the circuit; ARGV now (ms), cooldown (ms). Replies
# {state after, verdict, state before}: an open circuit whose cooldown has passed, or a
# half-open one whose probe has been out a cooldown long (its answer was lost), grants
# the asker the probe.
_ALLOW_LUA = """
local state = redis.call('HGET', KEYS[1], 'state') or 'closed'
if state == 'closed' then return {'closed', 'send', state} end
local now = tonumber(ARGV[1])
local since = tonumber(redis.call('HGET', KEYS[1], 'since') or '0')
if now - since >= tonumber(ARGV[2]) then
  redis.call('HSET', KEYS[1], 'state', 'half_open', 'since', ARGV[1])
  return {'half_open', 'probe', state}
end
return {state, 'skip', state}
"""

# After a send. KEYS[1] the circuit; ARGV now (ms), outcome (ok | fail | none), probe
# (1 | 0), failures in a row, ratio, fewest sends for the ratio, window (ms), bucket (ms).
# Replies {state after, 1 if it changed}. While closed, sends and failures are counted
# in buckets ('n:<start>', 'f:<start>') and the run of failures in 'run'; buckets out of
# the window are dropped whenever a new one starts or a failure is counted.
_RECORD_LUA = """
local key = KEYS[1]
local state = redis.call('HGET', key, 'state') or 'closed'
local outcome = ARGV[2]
if state == 'half_open' then
  if ARGV[3] == '1' and outcome == 'ok' then
    redis.call('DEL', key)
    return {'closed', 1}
  end
  if ARGV[3] == '1' and outcome == 'fail' then
    redis.call('HSET', key, 'state', 'open', 'since', ARGV[1])
    return {'open', 1}
  end
  return {state, 0}
end
if state == 'open' or outcome == 'none' then return {state, 0} end
local now = tonumber(ARGV[1])
local width = tonumber(ARGV[8])
local bucket = now - now % width
local fresh = redis.call('HINCRBY', key, 'n:' .. bucket, 1) == 1
local run = 0
if outcome == 'fail' then
  redis.call('HINCRBY', key, 'f:' .. bucket, 1)
  run = redis.call('HINCRBY', key, 'run', 1)
elseif redis.call('HGET', key, 'run') ~= '0' then
  redis.call('HSET', key, 'run', 0)
end
if outcome ~= 'fail' and not fresh then return {'closed', 0} end
local since = now - tonumber(ARGV[7])
local sends, failures = 0, 0
local fields = redis.call('HGETALL', key)
for i = 1, #fields, 2 do
  local kind = string.sub(fields[i], 1, 2)
  if kind == 'n:' or kind == 'f:' then
    if tonumber(string.sub(fields[i], 3)) + width <= since then
      redis.call('HDEL', key, fields[i])
    elseif kind == 'n:' then
      sends = sends + tonumber(fields[i + 1])
    else
      failures = failures + tonumber(fields[i + 1])
    end
  end
end
if outcome == 'fail' and (run >= tonumber(ARGV[4]) or (sends >= tonumber(ARGV[6])
    and failures > tonumber(ARGV[5]) * sends)) then
  redis.call('DEL', key)
  redis.call('HSET', key, 'state', 'open', 'since', ARGV[1])
  return {'open', 1}
end
return {'closed', 0}
"""
# bytes: a script given as text needs a client to encode it; these serve every client
# (each call names its own, and EVALSHA reloads a script after a server restart)
_ALLOW = Script(None, _ALLOW_LUA.encode())  # type: ignore[arg-type]  # no client: see above
_RECORD = Script(None, _RECORD_LUA.encode())  # type: ignore[arg-type]  # no client: see above


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class CircuitConfig:
    """When circuits open and how long they stay open (the PROVIDER_CIRCUIT_* settings)."""

    failures: int = 5
    ratio: float = 0.5
    min_sends: int = RATIO_MIN_SENDS
    window_ms: int = 60_000
    cooldown_ms: int = 30_000

    @classmethod
    def from_settings(cls, settings: Settings) -> CircuitConfig:
        """The configuration the settings name."""
        return cls(failures=settings.provider_circuit_failures,
                   ratio=settings.provider_circuit_ratio,
                   window_ms=int(settings.provider_circuit_window_s * 1000),
                   cooldown_ms=int(settings.provider_circuit_cooldown_s * 1000))


def circuit_key(prefix: str, provider: str) -> str:
    """The Redis hash of ``provider``'s circuit under the key prefix ``prefix``."""
    return f"{prefix}:circuit:{provider}"


class Breaker:
    """The circuits of every provider, on one Redis, as one process sees them."""

    def __init__(self, connections: ThreadConnections, *, prefix: str,
                 config: CircuitConfig, clock: Callable[[], int] = now_ms,
                 known_state_ttl_s: float = KNOWN_STATE_TTL_S) -> None:
        """Circuits under ``<prefix>:circuit:`` on the server ``connections`` talk to;
        ``clock`` gives the time in ms (queue time by default); a closed state learnt
        less than ``known_state_ttl_s`` ago is trusted without asking."""
        self._connections = connections
        self._known_ttl_s = known_state_ttl_s
        self._prefix = prefix
        self._config = config
        self._clock = clock
        # provider -> (last known state, time.monotonic() when learnt): read and replaced
        # whole, so threads need no lock
        self._known: dict[str, tuple[CircuitState, float]] = {}

    def allow(self, provider: str) -> Verdict:
        """May this send go to ``provider``? No round trip while this process learnt less
        than :data:`KNOWN_STATE_TTL_S` ago that its circuit is closed (another process
        may have opened it since: a send or two more, never a wrong state for long)."""
        known = self._known.get(provider)
        if (known is not None and known[0] is CircuitState.CLOSED
                and time.monotonic() - known[1] < self._known_ttl_s):
            return Verdict.SEND
        after, verdict, before = (_text(part) for part in self._connections.run_script(
            _ALLOW, keys=(circuit_key(self._prefix, provider),),
            args=(self._clock(), self._config.cooldown_ms)))
        self._learn(provider, CircuitState(after))
        if after != before:
            log.warning("provider circuit half-open", extra={"provider": provider})
        return Verdict(verdict)

    def record(self, provider: str, outcome: Outcome, *, probe: bool = False) -> CircuitState:
        """Count one send's ``outcome`` (``probe``: it was the half-open circuit's probe)
        in one round trip; returns the circuit's state after it."""
        config = self._config
        state, changed = self._connections.run_script(
            _RECORD, keys=(circuit_key(self._prefix, provider),),
            args=(self._clock(), outcome.value, int(probe), config.failures, config.ratio,
                  config.min_sends, config.window_ms,
                  max(config.window_ms // WINDOW_BUCKETS, 1)))
        after = CircuitState(_text(state))
        self._learn(provider, after)
        if int(changed):
            log.warning("provider circuit %s", "opened" if after is CircuitState.OPEN
                        else after.value.replace("_", "-"), extra={"provider": provider})
        return after

    def _learn(self, provider: str, state: CircuitState) -> None:
        self._known[provider] = (state, time.monotonic())


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def circuit_states(client: redis.Redis, prefix: str, providers: list[str]
                   ) -> dict[str, CircuitState]:
    """The stored state of each provider's circuit (one round trip)."""
    pipe = client.pipeline(transaction=False)
    for provider in providers:
        pipe.hget(circuit_key(prefix, provider), "state")
    return {provider: CircuitState(_text(state)) if state else CircuitState.CLOSED
            for provider, state in zip(providers, pipe.execute(), strict=True)}


_lock = threading.Lock()
# the breaker of the installed App and settings: rebuilt when either changes
_breaker: tuple[object, Settings, Breaker] | None = None


def breaker() -> Breaker:
    """The process's breaker: on the installed queue App's Redis and thread connections,
    configured by the settings."""
    global _breaker
    app, settings = current_app(), get_settings()
    found = _breaker
    if found is not None and found[0] is app and found[1] is settings:
        return found[2]
    with _lock:
        built = Breaker(app.connections, prefix=settings.queue_prefix,
                        config=CircuitConfig.from_settings(settings))
        _breaker = (app, settings, built)
        return built


def chained_providers(settings: Settings) -> list[str]:
    """Every provider name of every channel's chain, once each, in order."""
    names: dict[str, None] = {}
    for channel in PROVIDER_CHANNELS:
        names.update(dict.fromkeys(settings.provider_chain_names(channel)))
    return list(names)


class CircuitCollector(Collector):
    """``provider_circuit_state{provider}``: 0 closed, 1 open, 2 half-open, read from
    Redis at scrape time for every provider of the chains."""

    def describe(self) -> Iterator[Metric]:
        """The family without values: registering reads nothing (Redis may be away)."""
        yield self._family()

    @staticmethod
    def _family() -> GaugeMetricFamily:
        return GaugeMetricFamily("provider_circuit_state",
                                 "Each provider's circuit: 0 closed, 1 open, 2 half-open.",
                                 labels=["provider"])

    def collect(self) -> Iterator[Metric]:
        """The states now; nothing (and a warning) when Redis does not answer or no
        queue App is installed."""
        family = self._family()
        app = installed_app()
        if app is None:
            return
        settings = get_settings()
        try:
            states = circuit_states(app.client, settings.queue_prefix,
                                    chained_providers(settings))
        except Exception as error:  # a scrape must not fail because Redis is down
            log.warning("circuit metrics unavailable: %s", type(error).__name__)
            return
        for provider, state in states.items():
            family.add_metric([provider], GAUGE_VALUES[state])
        yield family


REGISTRY.register(CircuitCollector())
