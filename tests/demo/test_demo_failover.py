"""``herald demo``'s failover phase, run as a real process on the embedded default: email
and SMS through the chain mock-a → mock-b while mock-a goes down and comes back."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.cli.test_cli import DEMO_S, embedded_answers, flat, herald_env, run_herald, table_rows

#: The stretch table's columns after the stretch's name.
COLUMNS = ("deliveries", "mock-a accepted", "mock-a failed", "mock-a skipped (open)",
           "mock-b accepted")


def stretches(output: str) -> dict[str, dict[str, int]]:
    """The stretch table's rows: stretch → column → count."""
    rows = table_rows(output)
    return {name: dict(zip(COLUMNS, map(int, rows[name][1:]), strict=True))
            for name in ("mock-a up", "mock-a down", "mock-a back up")}


def circuit_changes(output: str) -> list[str]:
    """mock-a's circuit changes as the story prints them, in order."""
    return re.findall(r"mock-a circuit (opened|half-open|closed) \(provider_circuit_state",
                      output)


@pytest.mark.timeout(DEMO_S + 30)
def test_the_failover_phase_moves_to_mock_b_and_back_without_a_second_acceptance(
        tmp_path: Path) -> None:
    # When the demo runs its failover phase alone (30 events: 10 while mock-a is up, 10
    # while it is down, 10 after it is back) with no environment: the embedded default
    result = run_herald("demo", "--jobs", "20", "--events", "0", "--orders", "0",
                        "--purchase-orders", "0", "--failover-events", "30", "--digest-events", "0",
                        cwd=tmp_path, env=herald_env(), timeout_s=DEMO_S)

    # Then it exits 0 and says every check held
    assert result.returncode == 0, f"{result.stdout}\n{result.stderr}"
    assert "✗" not in result.stdout
    assert "every delivery sent, none accepted twice" in flat(result.stdout)
    # every delivery (email and SMS of each event) was sent
    rows = table_rows(result.stdout)
    assert rows["email"][1:] == ["0", "0", "30", "0", "0", "0"], rows["email"]
    assert rows["sms"][1:] == ["0", "0", "30", "0", "0", "0"], rows["sms"]
    # mock-a carried everything while up; while down, its first sends failed there and
    # moved to mock-b, and once the circuit opened the rest skipped it; once back, all but
    # what raced the probe went through mock-a again
    table = stretches(result.stdout)
    assert table["mock-a up"] == {"deliveries": 20, "mock-a accepted": 20, "mock-a failed": 0,
                                  "mock-a skipped (open)": 0, "mock-b accepted": 0}, table
    down = table["mock-a down"]
    assert (down["deliveries"], down["mock-a accepted"], down["mock-b accepted"]) == (
        20, 0, 20), table
    assert down["mock-a failed"] >= 5, table  # PROVIDER_CIRCUIT_FAILURES in a row
    assert down["mock-a skipped (open)"] > 0, table
    back = table["mock-a back up"]
    assert back["deliveries"] == 20 and back["mock-a accepted"] >= 19, table
    assert back["mock-a accepted"] + back["mock-b accepted"] == 20, table
    # the circuit opened, and its probe closed it again (0 at the end)
    changes = circuit_changes(result.stdout)
    assert changes[0] == "opened" and changes[-2:] == ["half-open", "closed"], changes
    assert not embedded_answers(tmp_path), "the demo must stop the Redis it started"


@pytest.mark.parametrize(("value", "refusal"), [("5", "must be 0 or at least 12"),
                                                ("-1", "must be at least 0")])
def test_the_demo_refuses_a_failover_event_count_too_small(tmp_path: Path, value: str,
                                                           refusal: str) -> None:
    result = run_herald("demo", "--failover-events", value, cwd=tmp_path, env=herald_env())

    assert result.returncode == 2
    assert f"argument --failover-events: {refusal}" in result.stderr
    assert not (tmp_path / ".herald").exists(), "a refused demo must start nothing"
