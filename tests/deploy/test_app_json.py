"""``app.json``, Heroku's app manifest: a Heroku user deploys herald as the Procfile
describes it, with its services as add-ons, its secrets generated, and only variables
herald reads (a misspelt one would be ignored silently). ``.python-version`` names the
Python the buildpack installs."""

from __future__ import annotations

import json
import re
from pathlib import Path

from honcho.environ import parse_procfile

from herald.settings import Settings

REPO = Path(__file__).resolve().parents[2]
#: The Procfile line Heroku runs before each release instead of as a dyno.
RELEASE = "release"


def manifest() -> dict:
    return json.loads((REPO / "app.json").read_text())


def procfile() -> dict[str, str]:
    return dict(parse_procfile((REPO / "Procfile").read_text()).processes)


def test_every_procfile_process_has_a_formation_with_a_quantity_and_size() -> None:
    formation = manifest()["formation"]
    # the release line is run by Heroku's release phase, not as a dyno
    assert set(formation) == set(procfile()) - {RELEASE}
    for name, entry in formation.items():
        assert isinstance(entry["quantity"], int) and entry["quantity"] >= 1, name
        assert isinstance(entry["size"], str) and entry["size"], name
    assert formation["clock"]["quantity"] == 1


def test_the_release_phase_migrates_the_database() -> None:
    assert procfile()[RELEASE] == "herald migrate"


def test_the_services_are_heroku_add_ons_and_the_buildpack_is_pythons() -> None:
    plans = {addon["plan"].partition(":")[0] for addon in manifest()["addons"]}
    assert plans == {"heroku-postgresql", "heroku-redis"}
    assert manifest()["buildpacks"] == [{"url": "heroku/python"}]


def test_only_settings_herald_knows_and_the_secrets_generated() -> None:
    known = {name.upper() for name in Settings.model_fields}
    env = manifest()["env"]
    assert set(env) <= known, sorted(set(env) - known)
    for secret in ("API_TOKEN", "ADMIN_TOKEN", "METRICS_TOKEN", "MOCK_CALLBACK_SECRET",
                   "SECRETS_KEY"):
        assert env[secret].get("generator") == "secret", secret
        assert "value" not in env[secret], secret


def test_the_python_version_is_one_herald_supports() -> None:
    version = (REPO / ".python-version").read_text().strip()
    assert re.fullmatch(r"3\.\d+", version), version
    required = re.search(r'requires-python = ">=3\.(\d+)"',
                         (REPO / "pyproject.toml").read_text())
    assert required and int(version.split(".")[1]) >= int(required.group(1))
