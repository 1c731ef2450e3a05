"""The circuit breaker's scripts on the Redis versions herald supports (6.2 and 7): it
opens on failures in a row or on a failure ratio, skips while open, grants exactly one
probe after the cooldown, and the probe's result closes or re-opens it."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
import redis

from herald.queue import ThreadConnections
from providers.circuit import (
    Breaker,
    CircuitConfig,
    CircuitState,
    Outcome,
    Verdict,
    circuit_states,
)

CONFIG = CircuitConfig(failures=5, ratio=0.5, min_sends=20, window_ms=60_000,
                       cooldown_ms=30_000)


class Clock:
    """A time in ms the test moves."""

    def __init__(self) -> None:
        self.ms = 1_000_000_000

    def __call__(self) -> int:
        return self.ms


@pytest.fixture(params=["redis6_url", "redis_url"])
def client(request: pytest.FixtureRequest) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(request.getfixturevalue(request.param))
    yield client
    client.close()


def breaker_on(client: redis.Redis, clock: Clock, prefix: str, *,
               known_state_ttl_s: float = 0.0) -> Breaker:
    """A breaker as one worker process has it (its own known-state memory, off unless
    given: the test's clock does not move the monotonic one)."""
    return Breaker(ThreadConnections(client), prefix=prefix, config=CONFIG, clock=clock,
                   known_state_ttl_s=known_state_ttl_s)


def test_five_failures_in_a_row_open_it_and_one_probe_closes_it(client: redis.Redis) -> None:
    clock, prefix = Clock(), f"c{uuid.uuid4().hex[:8]}"
    one, other = breaker_on(client, clock, prefix), breaker_on(client, clock, prefix)
    # Given four definite failures, an ambiguous answer and a fifth failure
    states = [one.record("p", Outcome.FAILURE) for _ in range(4)]
    states.append(other.record("p", Outcome.NEITHER))
    states.append(other.record("p", Outcome.FAILURE))
    # Then the fifth in a row opens it, for every process
    assert states == [CircuitState.CLOSED] * 5 + [CircuitState.OPEN]
    assert one.allow("p") is Verdict.SKIP
    assert circuit_states(client, prefix, ["p", "q"]) == {"p": CircuitState.OPEN,
                                                          "q": CircuitState.CLOSED}
    # When the cooldown has passed, exactly one asker gets the probe
    clock.ms += CONFIG.cooldown_ms
    assert [one.allow("p"), other.allow("p"), one.allow("p")] == [
        Verdict.PROBE, Verdict.SKIP, Verdict.SKIP]
    assert circuit_states(client, prefix, ["p"]) == {"p": CircuitState.HALF_OPEN}
    # and a late non-probe success changes nothing; the probe's success closes it
    assert other.record("p", Outcome.SUCCESS) is CircuitState.HALF_OPEN
    assert one.record("p", Outcome.SUCCESS, probe=True) is CircuitState.CLOSED
    assert other.allow("p") is Verdict.SEND


def test_a_failed_probe_reopens_it_and_a_lost_probe_is_granted_again(
        client: redis.Redis) -> None:
    clock, prefix = Clock(), f"c{uuid.uuid4().hex[:8]}"
    breaker = breaker_on(client, clock, prefix)
    for _ in range(5):
        breaker.record("p", Outcome.FAILURE)
    clock.ms += CONFIG.cooldown_ms
    assert breaker.allow("p") is Verdict.PROBE
    # a failed probe re-opens it for a whole cooldown more
    assert breaker.record("p", Outcome.FAILURE, probe=True) is CircuitState.OPEN
    clock.ms += CONFIG.cooldown_ms - 1
    assert breaker.allow("p") is Verdict.SKIP
    clock.ms += 1
    assert breaker.allow("p") is Verdict.PROBE
    # a probe answered ambiguously settles nothing: a cooldown later another is granted
    assert breaker.record("p", Outcome.NEITHER, probe=True) is CircuitState.HALF_OPEN
    assert breaker.allow("p") is Verdict.SKIP
    clock.ms += CONFIG.cooldown_ms
    assert breaker.allow("p") is Verdict.PROBE


def test_successes_reset_the_run_but_a_failure_ratio_over_the_window_opens_it(
        client: redis.Redis) -> None:
    clock, prefix = Clock(), f"c{uuid.uuid4().hex[:8]}"
    breaker = breaker_on(client, clock, prefix)
    # Given failures never five in a row: 4 failures, 1 success, repeated (80 % failures)
    results = []
    for _ in range(3):
        for outcome in [Outcome.FAILURE] * 4 + [Outcome.SUCCESS]:
            results.append(breaker.record("p", outcome))
            clock.ms += 100
    for outcome in [Outcome.FAILURE] * 3 + [Outcome.SUCCESS]:
        results.append(breaker.record("p", outcome))
    # Then it stays closed under 20 sends, and the failure that makes 20 opens it (one
    # failure after a success: not the run)
    assert results == [CircuitState.CLOSED] * 19
    assert breaker.record("p", Outcome.FAILURE) is CircuitState.OPEN


def test_sends_older_than_the_window_no_longer_count(client: redis.Redis) -> None:
    clock, prefix = Clock(), f"c{uuid.uuid4().hex[:8]}"
    breaker = breaker_on(client, clock, prefix)
    # Given 19 sends, 12 of them failures (none five in a row), a window ago
    for n in range(19):
        breaker.record("p", Outcome.FAILURE if n % 3 else Outcome.SUCCESS)
    clock.ms += CONFIG.window_ms + CONFIG.window_ms // 6
    # When one more failure comes, the old sends are out of the window: it stays closed
    assert breaker.record("p", Outcome.FAILURE) is CircuitState.CLOSED
    fields = client.hkeys(f"{prefix}:circuit:p")
    assert len([f for f in fields if f.startswith(b"n:")]) == 1


def test_a_closed_state_learnt_within_a_second_costs_no_round_trip(
        client: redis.Redis) -> None:
    clock, prefix = Clock(), f"c{uuid.uuid4().hex[:8]}"
    remembering = breaker_on(client, clock, prefix, known_state_ttl_s=60.0)
    other = breaker_on(client, clock, prefix)
    # Given this process learnt from its last send that the circuit is closed
    assert remembering.record("p", Outcome.SUCCESS) is CircuitState.CLOSED
    # When another process opens it and the circuit's hash is gone from Redis
    for _ in range(5):
        other.record("p", Outcome.FAILURE)
    client.delete(f"{prefix}:circuit:p")
    client.set(f"{prefix}:circuit:p", "not a hash")  # any read of it would fail
    # Then this process's check does not read Redis until its knowledge is stale
    assert remembering.allow("p") is Verdict.SEND
