"""herald relies on a few honcho internals (herald/honcho_internals.py); these tests run a
real honcho loop over real processes and pin each reliance to the supported honcho
range, so an upgrade that moves one fails here."""

from __future__ import annotations

import io
import signal
import tomllib
from collections.abc import Iterator
from importlib.metadata import version
from pathlib import Path
from typing import Any

import honcho.manager
import pytest
from honcho.printer import Printer
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

from herald.honcho_internals import SUPPORTED_HONCHO, HookedManager

PYPROJECT = Path(__file__).parents[2] / "pyproject.toml"


def supported() -> SpecifierSet:
    return SpecifierSet(",".join(SUPPORTED_HONCHO))


def test_the_installed_honcho_is_one_the_internals_were_checked_against() -> None:
    assert version("honcho") in supported()


def test_the_package_depends_on_exactly_the_supported_range() -> None:
    dependencies = tomllib.loads(PYPROJECT.read_text())["project"]["dependencies"]
    honcho_requirement = next(Requirement(d) for d in dependencies
                              if Requirement(d).name == "honcho")
    assert honcho_requirement.specifier == supported()


@pytest.fixture
def own_stop_handlers() -> Iterator[Any]:
    """A SIGTERM handler of the test's own, installed before a honcho loop (which installs
    its own and leaves them): the test's handlers are back afterwards."""
    before = {signum: signal.getsignal(signum) for signum in (signal.SIGTERM, signal.SIGINT)}

    def mine(signum: int, frame: object) -> None:
        raise AssertionError("the test's own handler ran")

    signal.signal(signal.SIGTERM, mine)
    yield mine
    for signum, handler in before.items():
        signal.signal(signum, handler)


class Recording(HookedManager):
    """Records what it sees at each hook."""

    def __init__(self) -> None:
        super().__init__(Printer(io.StringIO()))
        #: (the SIGTERM handler, all started?) at each after_start
        self.at_start: list[tuple[Any, bool]] = []
        #: (the line, all started?) at each after_system_line
        self.lines: list[tuple[str, bool]] = []

    def after_start(self) -> None:
        self.at_start.append((signal.getsignal(signal.SIGTERM), self.all_started()))

    def after_system_line(self, line: str) -> None:
        self.lines.append((line.strip(), self.all_started()))


def test_the_hooks_fire_at_the_moments_herald_up_acts_on(own_stop_handlers: Any) -> None:
    # Given a manager with two processes that end on their own: one fails, and the other
    # (which lets the SIGTERM the loop then sends it pass) succeeds after it
    manager = Recording()
    manager.add_process("good", "trap '' TERM; sleep 1; exit 0")
    manager.add_process("bad", "sleep 0.5; exit 3")

    # When honcho's loop runs them to their end
    manager.loop()

    # Then after_start ran once, after the loop took SIGTERM over, before any pid came
    assert len(manager.at_start) == 1
    handler, started = manager.at_start[0]
    assert handler is not own_stop_handlers and callable(handler)
    assert started is False
    # And each "<name> started" line came through after_system_line, the last one just
    # as every process had reported its pid, the first one before
    started_lines = [(line.split()[0], started) for line, started in manager.lines
                     if " started " in line]
    assert sorted(name for name, _ in started_lines) == ["bad", "good"], manager.lines
    assert [started for _, started in started_lines] == [False, True], manager.lines
    # And every process's own exit code is known, where honcho's returncode is the first
    assert manager.returncodes() == {"good": 0, "bad": 3}
    assert manager.returncode == 3


class KillsOnThirdCall(HookedManager):
    """Declines the loop's first two calls to kill."""

    def __init__(self) -> None:
        super().__init__(Printer(io.StringIO()))
        self.kill_calls = 0

    def kill(self) -> None:
        self.kill_calls += 1
        if self.kill_calls >= 3:
            super().kill()


@pytest.mark.usefixtures("own_stop_handlers")
def test_the_loop_asks_to_kill_again_until_a_kill_goes_through(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Given honcho's wait before killing made 0 s (it is 5 s), and a process that ignores
    # SIGTERM beside one that ends on its own
    monkeypatch.setattr(honcho.manager, "KILL_WAIT", 0)
    manager = KillsOnThirdCall()
    manager.add_process("quick", "sleep 1; exit 0")
    manager.add_process("stubborn", "trap '' TERM; sleep 20")

    # When the quick one ends, so that the loop terminates the other, then kills it
    manager.loop()

    # Then the loop asked to kill again after each declined call, and the third killed it
    # (a loop that asked once would have waited for its sleep to end: exit code 0)
    assert manager.kill_calls >= 3
    assert manager.returncodes() == {"quick": 0, "stubborn": -signal.SIGKILL}
