"""``herald demo``'s digest and webhooks phase, run as a real process on the embedded
default: account.activity events collected into one digest, whose email's delivery.sent
message reaches a webhook endpoint the demo listens on, signed."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.cli.test_cli import DEMO_S, flat, herald_env, run_herald


@pytest.mark.timeout(DEMO_S + 30)
def test_a_short_digest_closes_at_its_window_and_its_webhook_arrives_verified(
        tmp_path: Path) -> None:
    # When the demo runs its digest phase alone with 5 events (fewer than a full digest,
    # so it moves queue time to the window's end) on the embedded default
    result = run_herald("demo", "--jobs", "5", "--events", "0", "--failover-events", "0",
                        "--orders", "0", "--purchase-orders", "0", "--digest-events", "5",
                        cwd=tmp_path, env=herald_env(), timeout_s=DEMO_S)
    # Then it exits 0, every check held, and the story is told
    assert result.returncode == 0, f"{result.stdout}\n{result.stderr}"
    output = flat(result.stdout)
    assert "✗" not in output
    assert re.search(r"digest \S+: 5 items, closes at", output), output
    assert "queue time moved 3,60" in output
    assert ("5 events became one digest message (email sent, in-app delivered); its "
            "delivery.sent webhook arrived once, signature verified (1 received)") in output
    # And the secret is shown only cut short
    assert re.search(r"its secret whsec_\S{4}… shown once", output), output


def test_digest_events_out_of_range_is_refused(tmp_path: Path) -> None:
    result = run_herald("demo", "--digest-events", "1001", cwd=tmp_path, env=herald_env(),
                        timeout_s=60)
    assert result.returncode == 2
    assert "--digest-events" in result.stderr
