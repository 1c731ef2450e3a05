"""The console is never open: 401 without ADMIN_TOKEN's bearer, 404 while it is unset."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from herald import settings
from tests.admin.conftest import ADMIN_HEADERS


def test_admin_routes_refuse_a_caller_without_the_token(client: TestClient) -> None:
    # Given the console on; When a caller sends no token, or a wrong one
    bare = client.get("/admin/health/queues")
    wrong = client.get("/admin/health/queues", headers={"Authorization": "Bearer nope"})
    # Then both are refused with 401
    assert bare.status_code == 401 and wrong.status_code == 401
    assert bare.json()["error"]["code"] == "unauthorized"


def test_the_console_is_off_while_admin_token_is_unset(client: TestClient,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    # Given ADMIN_TOKEN unset
    monkeypatch.setenv("ADMIN_TOKEN", "")
    settings.reset_settings()
    # When anyone asks, with any bearer (even the old token)
    response = client.get("/admin/health/queues", headers=ADMIN_HEADERS)
    # Then the console is not there at all
    assert response.status_code == 404


ADMIN_ROUTES = [("GET", "/admin/health/queues"), ("GET", "/admin/health/queues/stream"),
                ("GET", "/admin/health/queues/t-console/jobs"),
                ("GET", "/admin/health/queues/t-console/jobs/some-job"),
                ("GET", "/admin/health/queues/t-console/history"),
                ("POST", "/admin/health/queues/t-console/drain"),
                ("POST", "/admin/health/queues/t-console/jobs/some-job/remove"),
                ("GET", "/admin/audit")]


@pytest.mark.parametrize(("method", "route"), ADMIN_ROUTES)
def test_every_console_route_needs_the_token(client: TestClient, method: str,
                                             route: str) -> None:
    # When a caller without the token calls any console route
    response = client.request(method, route)
    # Then it is refused before anything is read or changed
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "unauthorized"
