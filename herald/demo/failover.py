"""The demo's failover phase: email and SMS through the chain ``mock-a`` → ``mock-b``
(docs/pipeline.md#provider-chains) while ``mock-a`` goes down and comes back, with the
real channel workers in this process and the shared circuit breaker.

The story, in three stretches of events (each settled before the next starts):

1. ``mock-a`` up: every send goes through it;
2. ``mock-a`` down: the first sends fail there definitely and move to ``mock-b`` in the
   same attempt; the circuit opens, and later sends skip ``mock-a``;
3. ``mock-a`` back up: once the cooldown has passed, one event's send is the probe that
   closes the circuit, and the rest go through ``mock-a`` again.

It prints the circuit's state changes with their times and the sends of each stretch per
provider (from each delivery's attempts log), then checks that every delivery ended
sent, that no delivery was accepted twice across both instances (by idempotency key, in
the mocks' records), that the circuit opened and closed again, and that ``mock-b``
carried the sends while it was open.

Like the notification phase it runs on its own key prefix (:func:`own_namespace`) and
reads only the rows of the accounts it made.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

from rich.console import Console
from rich.table import Table
from sqlmodel import col, select

from herald.demo.notifications import (
    OPEN_OUTCOMES,
    QUEUES,
    environment,
    own_namespace,
    print_deliveries,
    tally,
)

#: Events the phase fires unless told otherwise, and the fewest that tell the story (the
#: down stretch must make enough sends to open the circuit).
DEFAULT_FAILOVER_EVENTS = 120
MIN_FAILOVER_EVENTS = 12
MAX_FAILOVER_EVENTS = 3000
#: Accounts the phase seeds (each with an email address and a phone number).
FAILOVER_ACCOUNTS = 20
#: The chain of both channels, first to last.
FIRST, SECOND = "mock-a", "mock-b"
#: The circuit's cooldown in the demo (30 s in production): short, so the demo is too.
COOLDOWN = timedelta(seconds=3)
#: How long one stretch's deliveries get to settle, and the probe to close the circuit.
STRETCH_DEADLINE = timedelta(seconds=90)
CLOSE_DEADLINE = COOLDOWN * 4 + timedelta(seconds=10)
#: Each event is an ``account.welcome`` on these channels.
CHANNELS = ("email", "sms")
#: The breaker's logger: it logs each state change once (docs/pipeline.md#the-circuit-breaker).
CIRCUIT_LOGGER = "herald.providers.circuit"


@dataclasses.dataclass
class Story:
    """What happened, with times since the phase started."""

    started: float = dataclasses.field(default_factory=time.time)
    lines: list[tuple[float, str]] = dataclasses.field(default_factory=list)
    printed: int = 0
    #: (time, provider, state word) of each circuit change, from the breaker's log lines
    changes: list[tuple[float, str, str]] = dataclasses.field(default_factory=list)

    def add(self, text: str, at: float | None = None) -> None:
        """Note ``text`` at ``at`` (a ``time.time()``; now when None)."""
        self.lines.append(((at or time.time()) - self.started, text))

    def print_new(self, console: Console) -> None:
        """Print what was noted since the last call, in time order."""
        self.lines.sort(key=lambda line: line[0])
        for at, text in self.lines[self.printed:]:
            console.print(f"  [dim]{at:6.1f} s[/]  {text}")
        self.printed = len(self.lines)


class _CircuitChanges(logging.Handler):
    """Notes each ``provider circuit …`` line of the breaker in the story."""

    #: The gauge ``provider_circuit_state`` of each change's state.
    GAUGE = {"opened": 1, "half-open": 2, "closed": 0}

    def __init__(self, story: Story) -> None:
        super().__init__(logging.WARNING)
        self.story = story

    def emit(self, record: logging.LogRecord) -> None:
        """Note the change (another line of that logger is not one)."""
        word = record.getMessage().removeprefix("provider circuit ")
        provider = getattr(record, "provider", "?")
        if word in self.GAUGE:
            self.story.changes.append((record.created, provider, word))
            self.story.add(f"[yellow]{provider} circuit {word}[/] "
                           f"(provider_circuit_state {self.GAUGE[word]})", record.created)


@contextlib.contextmanager
def _circuit_changes(story: Story) -> Iterator[None]:
    """Note the breaker's state changes in ``story`` (kept off the terminal's log: the
    story prints them)."""
    logger = logging.getLogger(CIRCUIT_LOGGER)
    handler, propagate, level = _CircuitChanges(story), logger.propagate, logger.level
    logger.addHandler(handler)
    logger.propagate = False
    logger.setLevel(logging.WARNING)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.propagate = propagate
        logger.setLevel(level)


def run_failover(events: int, console: Console) -> int:
    """Run the failover phase; returns 0 when every delivery ended sent, none was
    accepted twice, the circuit of ``mock-a`` opened and closed again, and ``mock-b``
    carried the sends while it was open."""
    from actors.queues import registry

    if events < MIN_FAILOVER_EVENTS:
        console.print(f"[red]--failover-events must be 0 or at least {MIN_FAILOVER_EVENTS}[/]")
        return 2
    chain = f"{FIRST},{SECOND}"
    # MOCK_CHANNELS empty: the instances carry email and SMS whatever the user narrowed
    with environment(MOCK_INSTANCES=chain, EMAIL_PROVIDERS=chain, SMS_PROVIDERS=chain,
                     MOCK_CHANNELS="",
                     PROVIDER_CIRCUIT_COOLDOWN_S=str(COOLDOWN.total_seconds())), \
            own_namespace() as prefix, registry.redeclared(QUEUES, rate_limit=None):
        return _run(events, console, prefix)


def _seed_accounts(run_id: str) -> list[str]:
    from actors.orchestration import create_account

    # +9665 and 8 digits: this run's number, then the account's
    return [create_account(email=f"failover{n}.{run_id}@example.com",
                           phone=f"+9665{int(run_id, 16) % 10**5:05d}{n:03d}").id
            for n in range(FAILOVER_ACCOUNTS)]


def _fire(run_id: str, numbers: range, accounts: list[str]) -> list[str]:
    """Fire the events ``numbers``; the ids of the deliveries they made."""
    from actors.orchestration import trigger_event

    ids = []
    for n in numbers:
        result = trigger_event(account_id=accounts[n % len(accounts)], type="account.welcome",
                               occurrence=f"{run_id}-{n}", channels=list(CHANNELS))
        ids += [delivery.id for delivery in result.deliveries]
    return ids


def _rows(ids: list[str]) -> list[Any]:
    """(id, outcome, provider, attempts_log) of these deliveries."""
    from herald.db import session as db_session
    from models.notifications import Delivery

    with db_session() as session:
        return list(session.exec(select(Delivery.id, Delivery.outcome, Delivery.provider,
                                        Delivery.attempts_log)
                                 .where(col(Delivery.id).in_(ids))).all())


def _settle(ids: list[str]) -> bool:
    """Wait until none of these deliveries is queued or sending; False at the deadline."""
    deadline = time.monotonic() + STRETCH_DEADLINE.total_seconds()
    while time.monotonic() < deadline:
        if not any(row[1] in OPEN_OUTCOMES for row in _rows(ids)):
            return True
        time.sleep(0.1)
    return False


def _circuit(provider: str) -> str:
    from herald.queue import current_app
    from herald.settings import get_settings
    from providers.circuit import circuit_states

    state = circuit_states(current_app().client, get_settings().queue_prefix, [provider])
    return state[provider].value


@dataclasses.dataclass
class Stretch:
    """One stretch of the story: its name and the deliveries its events made."""

    name: str
    ids: list[str] = dataclasses.field(default_factory=list)
    settled: bool = False


def _run(events: int, console: Console, prefix: str) -> int:
    from actors.handoffs import Scope
    from herald.db import migrate
    from herald.queue import current_app, running_worker
    from providers.circuit import circuit_key
    from providers.mock import MockProvider

    migrate()
    # the circuits start closed: an interrupted earlier run may have left one open
    current_app().client.delete(*(circuit_key(prefix, name) for name in (FIRST, SECOND)))
    run_id = uuid.uuid4().hex[:8]
    accounts = _seed_accounts(run_id)
    scope = Scope.of(accounts)
    up, down = events // 3, events // 3
    console.print(f"[bold]failover[/]: {events} events × email + SMS for {len(accounts)} "
                  f"accounts through the chain {FIRST} → {SECOND} (mock instances; circuit "
                  f"cooldown {COOLDOWN.seconds} s; jobs under the key prefix {prefix!r})")
    story = Story()
    stretches = [Stretch(f"{FIRST} up"), Stretch(f"{FIRST} down"), Stretch(f"{FIRST} back up")]
    with _circuit_changes(story), running_worker(list(QUEUES)):
        first, second, third = stretches
        story.add(f"{FIRST} up: {up} events")
        first.ids = _fire(run_id, range(up), accounts)
        first.settled = _settle(first.ids)
        story.add(f"settled: {len(first.ids)} deliveries")
        story.print_new(console)

        MockProvider.set_state(FIRST, "down")
        story.add(f"[red]{FIRST} goes down[/] (HSET {prefix}:mock:instances {FIRST} down); "
                  f"{down} events")
        second.ids = _fire(run_id, range(up, up + down), accounts)
        second.settled = _settle(second.ids)
        story.add(f"settled: {len(second.ids)} deliveries")
        story.print_new(console)

        MockProvider.set_state(FIRST, "up")
        story.add(f"[green]{FIRST} comes back up[/]; waiting out the cooldown")
        opened = [at for at, provider, word in story.changes
                  if provider == FIRST and word == "opened"]
        if opened:  # the first send a cooldown after the circuit (re)opened is the probe
            time.sleep(max(0.0, opened[-1] + COOLDOWN.total_seconds() + 0.2 - time.time()))
        story.add("1 event: its first send is the probe")
        third.ids = _fire(run_id, range(up + down, up + down + 1), accounts)
        deadline = time.monotonic() + CLOSE_DEADLINE.total_seconds()
        while _circuit(FIRST) != "closed" and time.monotonic() < deadline:
            time.sleep(0.05)
        rest = range(up + down + 1, events)
        story.add(f"{len(rest)} events after the circuit closed")
        after_close = _fire(run_id, rest, accounts)
        third.ids += after_close
        third.settled = _settle(third.ids)
        story.add(f"settled: {len(third.ids)} deliveries")
        story.print_new(console)
    print_deliveries(console, tally(scope), CHANNELS)
    _print_stretches(console, stretches)
    problems = _check(stretches, after_close, story)
    for problem in problems:
        console.print(f"[red]✗ {problem}[/]")
    if not problems:
        console.print(f"[green]✓ every delivery sent, none accepted twice; the circuit of "
                      f"{FIRST} opened and closed again, and {SECOND} carried the sends "
                      "while it was open[/]")
    return 1 if problems else 0


def _attempts(ids: list[str]) -> Counter[tuple[str, str]]:
    """Every attempts log entry of these deliveries, by (provider, result)."""
    entries: Counter[tuple[str, str]] = Counter()
    for row in _rows(ids):
        for entry in row[3] or []:
            entries[(entry["provider"], entry["result"])] += 1
    return entries


#: The stretch table's columns: a header, and the attempts log entry each counts.
COLUMNS = ((f"{FIRST} accepted", (FIRST, "accepted")),
           (f"{FIRST} failed", (FIRST, "definite_failure")),
           (f"{FIRST} skipped (open)", (FIRST, "skipped_open_circuit")),
           (f"{SECOND} accepted", (SECOND, "accepted")))


def _print_stretches(console: Console, stretches: list[Stretch]) -> None:
    table = Table(title="sends per stretch (the deliveries' attempts logs)")
    table.add_column("stretch")
    table.add_column("deliveries", justify="right")
    for header, _ in COLUMNS:
        table.add_column(header, justify="right")
    for stretch in stretches:
        entries = _attempts(stretch.ids)
        table.add_row(stretch.name, str(len(stretch.ids)),
                      *(str(entries[key]) for _, key in COLUMNS))
    console.print(table)


def _check(stretches: list[Stretch], after_close: list[str], story: Story) -> list[str]:
    """The problems found (none: the story went as told)."""
    from prometheus_client import REGISTRY

    from providers.mock import MockProvider

    problems = []
    first, second, _ = stretches
    ids = [delivery_id for stretch in stretches for delivery_id in stretch.ids]
    rows = _rows(ids)
    if not all(stretch.settled for stretch in stretches):
        problems.append("not every delivery settled before the deadline")
    unsent = Counter(row[1] for row in rows if row[1] not in ("sent", "delivered"))
    if unsent:
        problems.append("deliveries not sent: " + ", ".join(
            f"{count} {outcome}" for outcome, count in unsent.items()))
    # the mocks' records: every acceptance of one of this phase's deliveries, by instance
    acceptances: dict[str, list[str]] = {}
    ours = set(ids)
    for send in MockProvider.sends(accepted_only=True):
        if send["idempotency_key"] in ours:
            acceptances.setdefault(send["idempotency_key"], []).append(send.get("provider", ""))
    twice = {key: providers for key, providers in acceptances.items() if len(providers) > 1}
    if twice:
        key, providers = next(iter(twice.items()))
        problems.append(f"{len(twice)} deliveries accepted more than once, e.g. {key} by "
                        f"{', '.join(providers)}")
    wrong = [row[0] for row in rows if row[1] in ("sent", "delivered")
             and acceptances.get(row[0], [None])[0] != row[2]]
    if wrong:
        problems.append(f"{len(wrong)} deliveries record a provider that did not accept "
                        "them")
    words = [word for _, provider, word in story.changes if provider == FIRST]
    if "opened" not in words:
        problems.append(f"the circuit of {FIRST} never opened")
    gauge = REGISTRY.get_sample_value("provider_circuit_state", {"provider": FIRST})
    if not words or words[-1] != "closed" or gauge != 0:
        problems.append(f"the circuit of {FIRST} did not close again (provider_circuit_state "
                        f"{gauge})")
    by_provider = {row[0]: row[2] for row in rows}
    if any(by_provider.get(delivery_id) != FIRST for delivery_id in first.ids):
        problems.append(f"not every send went through {FIRST} while it was up")
    if any(by_provider.get(delivery_id) != SECOND for delivery_id in second.ids):
        problems.append(f"{SECOND} did not carry every send while {FIRST} was down")
    if not _attempts(second.ids)[(FIRST, "skipped_open_circuit")]:
        problems.append(f"no send skipped {FIRST} while its circuit was open")
    if any(by_provider.get(delivery_id) != FIRST for delivery_id in after_close):
        problems.append(f"not every send went through {FIRST} once its circuit closed")
    return problems
