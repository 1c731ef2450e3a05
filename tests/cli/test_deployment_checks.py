"""What a herald process refuses or warns of at start outside the embedded default: a
PostgreSQL DATABASE_URL with no Redis named stops every command that would start an
embedded Redis of its own, and a variable that looks like a herald setting but is none
is named with the closest known one (docs/configuration.md#deployment-checks)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli.test_cli import flat, herald_env, run_herald


@pytest.mark.parametrize("command", ["web", "worker", "clock", "migrate"])
def test_a_postgres_database_without_redis_url_refuses_to_start(
        tmp_path: Path, migrated_database: str, command: str) -> None:
    # Given DATABASE_URL on PostgreSQL and neither REDIS_URL nor REDIS_SENTINELS
    env = herald_env(DATABASE_URL=migrated_database)
    # When the process starts
    result = run_herald(command, cwd=tmp_path, env=env)
    # Then it exits non-zero with one line naming the missing setting
    assert result.returncode != 0, result.stdout + result.stderr
    error = result.stderr.strip().splitlines()[-1]
    assert "REDIS_URL" in error and "REDIS_SENTINELS" in error, result.stderr
    # and it started no embedded Redis of its own in its working directory
    assert not (tmp_path / ".herald").exists()


def test_a_misspelt_setting_is_a_warning_naming_the_closest_known_one(
        tmp_path: Path, migrated_database: str, redis_url: str) -> None:
    # Given a Redis URL under a misspelt name, and a misspelt switch
    env = herald_env(DATABASE_URL=migrated_database, REDIS_ULR=redis_url,
                     HERALD_OPEN_APII="1")
    # When herald starts
    result = run_herald("migrate", cwd=tmp_path, env=env)
    # Then each is a WARNING naming the setting it probably meant
    output = flat(result.stderr)
    assert "WARNING" in output
    assert "REDIS_ULR is not a herald setting and is ignored; did you mean REDIS_URL?" \
        in output, result.stderr
    assert ("HERALD_OPEN_APII is not a herald setting and is ignored; did you mean "
            "HERALD_OPEN_API?") in output, result.stderr
    # and REDIS_URL itself is still missing: the process refuses to start
    assert result.returncode != 0


def test_a_known_setting_or_another_program_s_variable_is_no_warning(
        tmp_path: Path, migrated_database: str, redis_url: str) -> None:
    # Given herald's settings (in any case) and variables of other programs
    env = herald_env(DATABASE_URL=migrated_database, REDIS_URL=redis_url,
                     herald_open_api="0", PGPASSWORD="x", DYNO="web.1")
    # When herald migrates
    result = run_herald("migrate", cwd=tmp_path, env=env)
    # Then it runs, warning of nothing
    assert result.returncode == 0, result.stderr
    assert "not a herald setting" not in result.stderr
