"""Operator activations on PostgreSQL + Redis: paid → initiate → verify_identity →
complete with its step history, one job per step under ``{activationId}-{step}``, a
transient step retried, a rejected or exhausted step failing the activation, and bad
input on the activation routes."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from actors.activation import enqueue_step
from herald import settings
from herald.db import session as db_session
from herald.queue import running_worker
from models.activations import Activation, ActivationStep
from providers.operator_mock import MockOperator
from providers.operators import operators
from tests.support.payments.steps import account, finished, job, post
from tests.support.waiting import wait_for

QUEUES = ["payment", "activation"]
MSISDN = "+966551234567"


def activation(client: TestClient, activation_id: str) -> dict[str, Any]:
    response = client.get(f"/v1/activations/{activation_id}")
    assert response.status_code == 200, response.text
    return dict(response.json())


def start(client: TestClient, msisdn: str = MSISDN, *behaviours: str) -> dict[str, Any]:
    """A new activation (the mock operator scripted for its number)."""
    if behaviours:
        MockOperator.script(msisdn, *behaviours)
    return post(client, "/v1/activations", {"account_id": account(client),
                                            "operator_slug": "mock", "msisdn": msisdn},
                expect=201)


def pay(client: TestClient, activation_id: str) -> str:
    """Pay for the activation and complete the payment; the payment's id."""
    created = post(client, "/v1/payments", {"activation_id": activation_id,
                                            "amount": "120.00", "currency": "SAR"}, expect=201)
    post(client, f"/v1/payments/{created['id']}/complete", expect=202)
    return str(created["id"])


def ended(client: TestClient, activation_id: str) -> bool:
    return activation(client, activation_id)["status"] in ("completed", "failed")


def history(body: dict[str, Any]) -> list[tuple[str, str]]:
    return [(s["step"], s["status"]) for s in body["steps"]]


def calls(activation_id: str) -> list[tuple[str, str]]:
    return [(c["step"], c["outcome"]) for c in MockOperator.calls()
            if c["activation_id"] == activation_id]


@pytest.fixture(autouse=True)
def fresh_operator(fulfillment: None) -> None:
    MockOperator.reset()


def test_a_paid_activation_runs_its_three_steps_with_their_history(client: TestClient) -> None:
    # Given an activation, pending until paid
    created = start(client)
    assert {k: created[k] for k in ("operator_slug", "msisdn", "step", "status", "steps")} == {
        "operator_slug": "mock", "msisdn": MSISDN, "step": "initiate", "status": "pending",
        "steps": []}
    activation_id = created["id"]
    # When its payment settles and the workers run
    payment_id = pay(client, activation_id)
    with running_worker(QUEUES):
        wait_for(lambda: ended(client, activation_id), what="the activation to end")
    # Then it went initiate → verify_identity → complete, each step once, in order
    body = activation(client, activation_id)
    assert (body["step"], body["status"]) == ("complete", "completed")
    assert history(body) == [("initiate", "completed"), ("verify_identity", "completed"),
                             ("complete", "completed")]
    assert body["operator_ref"].startswith("mock-op-")
    assert calls(activation_id) == [("initiate", "ok"), ("verify_identity", "ok"),
                                    ("complete", "ok")]
    # each step was its own job, under {activationId}-{step}, in the camelCase job shape
    for step in ActivationStep:
        ran = job("activation", f"{activation_id}-{step.value}")
        assert ran is not None and ran.state == "completed"
        assert ran.payload == {"type": "activation", "activationId": activation_id,
                               "userId": created["account_id"], "operatorSlug": "mock",
                               "step": step.value, "createdAt": ran.payload["createdAt"]}
    assert job("payment", f"{payment_id}-settle").return_value["handoff"] == "added"


def test_an_unpaid_activation_does_not_start(client: TestClient) -> None:
    # Given an activation nobody paid for, whose initiate job is added anyway
    created = start(client)
    with db_session() as session:
        row = session.get(Activation, created["id"])
    enqueue_step(row, ActivationStep.INITIATE)
    with running_worker(["activation"]):
        wait_for(lambda: finished("activation", f"{created['id']}-initiate"))
    # Then the job fails for good and the activation still waits for its payment
    failed = job("activation", f"{created['id']}-initiate")
    assert failed.state == "failed" and "no settled payment" in failed.failed_reason
    body = activation(client, created["id"])
    assert (body["step"], body["status"], body["steps"]) == ("initiate", "pending", [])
    assert calls(created["id"]) == []


def test_a_transient_step_failure_is_retried(client: TestClient) -> None:
    # Given an operator whose verify_identity times out once
    created = start(client, MSISDN, "transient:verify_identity:1")
    pay(client, created["id"])
    with running_worker(QUEUES):
        wait_for(lambda: ended(client, created["id"]), what="the activation to end")
    # Then the step ran again and the activation completed
    body = activation(client, created["id"])
    assert body["status"] == "completed"
    assert history(body) == [("initiate", "completed"), ("verify_identity", "retrying"),
                             ("verify_identity", "completed"), ("complete", "completed")]
    verify = job("activation", f"{created['id']}-verify_identity")
    assert (verify.state, verify.attempts_made, verify.attempts_started) == ("completed", 1, 2)


def test_a_step_that_stays_transient_fails_the_activation_on_its_last_attempt(
        client: TestClient) -> None:
    # Given an operator whose initiate times out on all 3 attempts
    created = start(client, MSISDN, "transient:initiate:3")
    pay(client, created["id"])
    with running_worker(QUEUES):
        wait_for(lambda: ended(client, created["id"]), what="the activation to end")
        wait_for(lambda: finished("activation", f"{created['id']}-initiate"))
    # Then the activation failed at initiate with the reason, and went no further
    body = activation(client, created["id"])
    assert (body["step"], body["status"]) == ("initiate", "failed")
    assert "timed out" in body["failed_reason"]
    assert history(body) == [("initiate", "retrying"), ("initiate", "retrying"),
                             ("initiate", "failed")]
    initiate = job("activation", f"{created['id']}-initiate")
    assert (initiate.state, initiate.attempts_made) == ("failed", 3)
    assert job("activation", f"{created['id']}-verify_identity") is None


def test_a_rejected_step_fails_the_activation_at_once(client: TestClient) -> None:
    # Given an operator that refuses the identity
    created = start(client, MSISDN, "reject:verify_identity")
    pay(client, created["id"])
    with running_worker(QUEUES):
        wait_for(lambda: ended(client, created["id"]), what="the activation to end")
        wait_for(lambda: finished("activation", f"{created['id']}-verify_identity"))
    # Then it failed at verify_identity, with no retry and no complete step
    body = activation(client, created["id"])
    assert (body["step"], body["status"]) == ("verify_identity", "failed")
    assert "refused" in body["failed_reason"]
    assert history(body) == [("initiate", "completed"), ("verify_identity", "failed")]
    assert calls(created["id"]) == [("initiate", "ok"), ("verify_identity", "reject")]
    verify = job("activation", f"{created['id']}-verify_identity")
    assert (verify.state, verify.attempts_started) == ("failed", 1)
    assert job("activation", f"{created['id']}-complete") is None


# -- bad input -------------------------------------------------------------------------------
def activations_count() -> int:
    with db_session() as session:
        return len(session.exec(Activation.__table__.select()).all())  # type: ignore[attr-defined]


@pytest.mark.parametrize(("fields", "status", "code", "names"), [
    ({"account_id": "no-such-account"}, 404, "account_not_found", "no-such-account"),
    ({"operator_slug": "zain"}, 422, "invalid_activation", "'zain'"),
    ({"msisdn": "0551234567"}, 422, "invalid_activation", "msisdn"),
    ({"msisdn": "+966 55 123"}, 422, "invalid_activation", "msisdn"),
    ({"msisdn": None}, 422, "validation_error", "msisdn"),
], ids=["unknown-account", "unknown-operator", "no-plus", "spaces", "missing-msisdn"])
def test_a_refused_activation_persists_nothing(client: TestClient, fields: dict[str, Any],
                                               status: int, code: str, names: str) -> None:
    body = {"account_id": account(client), "operator_slug": "mock", "msisdn": MSISDN, **fields}
    response = client.post("/v1/activations", json={k: v for k, v in body.items()
                                                     if v is not None})
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["code"] == code and names in error["message"]
    assert activations_count() == 0


def test_a_disabled_operator_is_refused(client: TestClient,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    # Given the mock operator turned off (OPERATORS names none)
    account_id = account(client)
    monkeypatch.setenv("OPERATORS", "")
    settings.reset_settings()
    operators.reset()
    response = client.post("/v1/activations", json={"account_id": account_id,
                                                    "operator_slug": "mock", "msisdn": MSISDN})
    assert response.status_code == 422
    assert "'mock'" in response.json()["error"]["message"]
    assert activations_count() == 0


def test_an_unknown_activation_is_404(client: TestClient) -> None:
    response = client.get("/v1/activations/no-such-activation")
    assert (response.status_code, response.json()["error"]["code"]) == (
        404, "activation_not_found")
