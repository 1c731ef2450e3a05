"""Secrets at rest (docs/configuration.md#secrets_key): webhook signing secrets (and
previous secrets), SFTP passwords and stored idempotent answers are encrypted with
SECRETS_KEY, so a database dump alone (a real ``pg_dump``, or the SQLite file) reveals
none of them, while herald still signs with them, replays the answers byte for byte and
logs in with the password; a new key put first and ``herald secrets rotate`` re-encrypt
everything under it; the upgrade encrypts what was stored in clear before."""

from __future__ import annotations

import base64
import os
import stat
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography.fernet import Fernet, InvalidToken
from fastapi.testclient import TestClient
from sqlalchemy import create_engine, make_url, text
from sqlmodel import select

from actors import webhooks as relay
from herald import db, settings
from herald.queue import running_worker
from herald.secrets_box import PREFIX
from herald.web import create_app
from models.base import utcnow
from models.purchasing import Supplier
from models.webhooks import WebhookEndpoint, WebhookMessage, forget_subscribed_types
from tests.cli.test_cli import herald_env, run_herald
from tests.support.queue_app import close_queue_app, install_queue_app
from tests.support.services import postgres_bindir
from tests.support.waiting import wait_for
from tests.webhooks.receiver import Receiver, running_receiver

BODY = {"type": "delivery.sent", "timestamp": "2026-12-06T03:00:00+00:00",
        "data": {"id": "d1", "outcome": "sent"}}
PASSWORD = "sftp-Pa55word-" + uuid.uuid4().hex
SFTP = {"host": "sftp.sysco.test", "port": 2222, "username": "herald", "password": PASSWORD,
        "outbound_dir": "/outbound", "inbound_dir": "/inbound", "archive_dir": "/archive",
        "trust_on_first_use": True}


@pytest.fixture
def herald_db(fresh_postgres: str, redis_url: str,
              monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """herald on a migrated database of this test's own (a key rotation must not touch
    the other tests' rows) and the test Redis, webhooks allowed to a loopback receiver."""
    for name, value in {"DATABASE_URL": fresh_postgres, "REDIS_URL": redis_url,
                        "BROKER": "redis", "QUEUE_PREFIX": f"s{uuid.uuid4().hex[:10]}",
                        "HERALD_OPEN_API": "1", "WEBHOOK_ALLOW_HTTP": "1",
                        "WEBHOOK_ALLOW_PRIVATE": "1", "LOG_LEVEL": "WARNING"}.items():
        monkeypatch.setenv(name, value)
    settings.reset_settings()
    install_queue_app()
    db.reset_engine()
    db.migrate(fresh_postgres)
    forget_subscribed_types()
    yield fresh_postgres
    db.reset_engine()
    close_queue_app()
    settings.reset_settings()
    forget_subscribed_types()


@pytest.fixture
def receiver(herald_db: str) -> Iterator[Receiver]:
    with running_receiver() as receiver:
        yield receiver


def pg_dump(database_url: str) -> str:
    """The whole database as ``pg_dump`` (of the server's own version) writes it."""
    bindir = postgres_bindir()
    assert bindir is not None, "no PostgreSQL binaries"
    url = make_url(database_url).set(drivername="postgresql")
    done = subprocess.run([str(bindir / "pg_dump"), "--no-owner",
                           url.render_as_string(hide_password=False)],
                          capture_output=True, text=True, timeout=60, check=True)
    return done.stdout


def forms(secret: str) -> list[str]:
    """Every way a dump could show ``secret``: as text, the key bytes after ``whsec_`` in
    base64, and as a bytea column's hex (an idempotent answer is stored as bytes)."""
    shown = [secret, secret.encode().hex()]
    if secret.startswith("whsec_"):
        shown += [secret.removeprefix("whsec_"), secret.removeprefix("whsec_").encode().hex()]
    return shown


def revealed(dump: str, *secrets: str) -> list[str]:
    return [secret for secret in secrets if any(form in dump for form in forms(secret))]


def make_secrets(client: TestClient, url: str, key: str) -> dict[str, Any]:
    """An endpoint created with an Idempotency-Key, its secret then rotated, and a sysco
    supplier with an SFTP password, all through the API."""
    request = {"url": url, "events": ["delivery.sent"]}
    created = client.post("/v1/webhook-endpoints", json=request,
                          headers={"Idempotency-Key": key})
    assert created.status_code == 201, created.text
    endpoint_id = created.json()["id"]
    rotated = client.post(f"/v1/webhook-endpoints/{endpoint_id}/rotate-secret")
    assert rotated.status_code == 200, rotated.text
    supplier = client.post("/v1/suppliers", json={"name": "Sysco", "type": "sysco",
                                                  "sftp": SFTP})
    assert supplier.status_code == 201, supplier.text
    return {"request": request, "created": created, "endpoint_id": endpoint_id,
            "first": created.json()["secret"], "rotated": rotated.json()["secret"],
            "supplier_id": supplier.json()["id"]}


def stored(database_url: str) -> dict[str, Any]:
    """The secrets as the database holds them (no herald code in between)."""
    engine = create_engine(database_url)
    try:
        with engine.connect() as connection:
            endpoint = connection.execute(text(
                "SELECT secret, previous_secret FROM webhook_endpoints")).one()
            password = connection.execute(text(
                "SELECT sftp->>'password' FROM suppliers")).scalar_one()
            bodies = connection.execute(text(
                "SELECT body FROM idempotency_keys WHERE body IS NOT NULL")).scalars().all()
    finally:
        engine.dispose()
    return {"secret": endpoint[0], "previous_secret": endpoint[1], "password": password,
            "body": bytes(bodies[0])}


def opens(key: bytes, value: str | bytes) -> bytes:
    """The clear value of a stored sealed ``value``, opened with ``key`` alone."""
    raw = value.encode() if isinstance(value, str) else value
    assert raw.startswith(PREFIX.encode()), raw[:20]
    return Fernet(key).decrypt(raw[len(PREFIX):])


# -- a dump reveals no secret ----------------------------------------------------------------
def test_a_dump_reveals_no_secret_and_herald_still_uses_them(herald_db: str,
                                                            receiver: Receiver) -> None:
    # Given an endpoint created with an Idempotency-Key, its secret rotated, and a sysco
    # supplier with an SFTP password
    client = TestClient(create_app())
    made = make_secrets(client, receiver.url, "create-endpoint-1")

    # When the database is dumped
    dump = pg_dump(herald_db)

    # Then the dump holds neither secret, nor the password, nor the answer that showed
    # the first secret, in any form: only ciphertext
    assert revealed(dump, made["first"], made["rotated"], PASSWORD) == []
    assert PREFIX in dump

    # And the idempotent replay still answers the first answer, byte for byte
    replay = client.post("/v1/webhook-endpoints", json=made["request"],
                         headers={"Idempotency-Key": "create-endpoint-1"})
    assert replay.headers["idempotent-replayed"] == "true"
    assert (replay.status_code, replay.content) == (201, made["created"].content)

    # And a message is signed with both secrets during the overlap (the relay reads them)
    receiver.secrets += [made["first"], made["rotated"]]
    message = WebhookMessage(endpoint_id=made["endpoint_id"], type="delivery.sent",
                             body=BODY, handed_off_at=utcnow())
    with db.session() as session:
        session.add(message)
    relay.enqueue_message(message.id, made["endpoint_id"])
    with running_worker([relay.QUEUE]):
        wait_for(lambda: receiver.received, what="the message received")
    (got,) = receiver.received
    assert set(got.verified_by) == {made["first"], made["rotated"]}

    # And the supplier's transport reads its password in clear
    with db.session() as session:
        supplier = session.get(Supplier, made["supplier_id"])
        assert supplier is not None and supplier.sftp is not None
        assert supplier.sftp["password"] == PASSWORD


# -- rotating SECRETS_KEY ----------------------------------------------------------------------
def test_a_new_key_first_and_herald_secrets_rotate_reencrypt_everything(
        herald_db: str, receiver: Receiver, monkeypatch: pytest.MonkeyPatch,
        tmp_path: Path) -> None:
    old = os.environ["SECRETS_KEY"].encode()
    client = TestClient(create_app())
    made = make_secrets(client, receiver.url, "create-endpoint-2")
    before = stored(herald_db)
    new = Fernet.generate_key()

    # When a new key is put first, the old one second, and `herald secrets rotate` runs
    env = herald_env(DATABASE_URL=herald_db, SECRETS_KEY=f"{new.decode()},{old.decode()}")
    rotated = run_herald("secrets", "rotate", cwd=tmp_path, env=env)

    # Then it reports what it re-encrypted
    assert rotated.returncode == 0, rotated.stderr
    assert rotated.stdout.splitlines() == [
        "webhook signing secrets: 0 encrypted (were in clear), 2 re-encrypted with the "
        "newest key, 0 already current",
        "SFTP passwords: 0 encrypted (were in clear), 1 re-encrypted with the newest key, "
        "0 already current",
        "idempotent answers: 0 encrypted (were in clear), 1 re-encrypted with the newest "
        "key, 0 already current"]
    # And every stored value is new ciphertext that the new key alone opens, the old not
    after = stored(herald_db)
    clear = {"secret": made["rotated"], "previous_secret": made["first"],
             "password": PASSWORD}
    for name, value in after.items():
        assert value != before[name], name
        if name in clear:
            assert opens(new, value).decode() == clear[name], name
        else:
            assert opens(new, value) == made["created"].content
        with pytest.raises(InvalidToken):
            opens(old, value)
    dump = pg_dump(herald_db)
    assert after["secret"] in dump and before["secret"] not in dump
    assert revealed(dump, made["first"], made["rotated"], PASSWORD) == []

    # And herald with the new key alone reads them all
    monkeypatch.setenv("SECRETS_KEY", new.decode())
    settings.reset_settings()
    with db.session() as session:
        endpoint = session.get(WebhookEndpoint, made["endpoint_id"])
        assert endpoint is not None
        assert endpoint.signing_secrets() == [made["rotated"], made["first"]]
    replay = TestClient(create_app()).post("/v1/webhook-endpoints", json=made["request"],
                                           headers={"Idempotency-Key": "create-endpoint-2"})
    assert (replay.status_code, replay.content) == (201, made["created"].content)

    # And a second rotation finds everything current and changes nothing
    again = run_herald("secrets", "rotate", cwd=tmp_path, env=env)
    assert again.returncode == 0, again.stderr
    assert "webhook signing secrets: 0 encrypted (were in clear), 0 re-encrypted with the " \
           "newest key, 2 already current" in again.stdout
    assert stored(herald_db) == after


def test_rotate_without_the_key_that_sealed_them_fails_and_changes_nothing(
        herald_db: str, receiver: Receiver, tmp_path: Path) -> None:
    make_secrets(TestClient(create_app()), receiver.url, "create-endpoint-3")
    before = stored(herald_db)
    env = herald_env(DATABASE_URL=herald_db, SECRETS_KEY=Fernet.generate_key().decode())
    result = run_herald("secrets", "rotate", cwd=tmp_path, env=env)
    assert result.returncode == 1
    assert "opens with none of SECRETS_KEY's keys" in result.stderr
    assert "nothing was changed" in result.stderr
    assert stored(herald_db) == before


# -- no key -------------------------------------------------------------------------------------
def test_without_a_key_outside_the_embedded_default_no_secret_is_made(
        herald_db: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given PostgreSQL and SECRETS_KEY unset
    monkeypatch.delenv("SECRETS_KEY")
    settings.reset_settings()
    client = TestClient(create_app(), raise_server_exceptions=False)

    # When an endpoint or a sysco supplier is created
    answers = [client.post("/v1/webhook-endpoints", json={
                   "url": "https://93.184.215.14/hooks", "events": ["delivery.sent"]},
                   headers={"Idempotency-Key": "no-key"}),
               client.post("/v1/suppliers", json={"name": "Sysco", "type": "sysco",
                                                  "sftp": SFTP})]

    # Then each is a 503 naming SECRETS_KEY, and nothing is written
    for answer in answers:
        assert answer.status_code == 503, answer.text
        assert answer.json()["error"]["code"] == "secrets_key_unset"
        assert "SECRETS_KEY" in answer.json()["error"]["message"]
    assert client.get("/v1/webhook-endpoints").json() == {"items": []}
    with db.autocommit() as connection:
        assert connection.execute(text("SELECT count(*) FROM suppliers")).scalar_one() == 0
        assert connection.execute(text(
            "SELECT count(*) FROM idempotency_keys")).scalar_one() == 0


# -- secrets stored in clear before ------------------------------------------------------------
def test_the_upgrade_encrypts_secrets_stored_in_clear_and_refuses_without_a_key(
        fresh_postgres: str, redis_url: str, monkeypatch: pytest.MonkeyPatch,
        tmp_path: Path) -> None:
    from alembic import command

    from herald.db.migrations import alembic_config

    # Given a database at the schema before encryption, with secrets stored in clear
    monkeypatch.setenv("DATABASE_URL", fresh_postgres)
    settings.reset_settings()
    command.upgrade(alembic_config(fresh_postgres), "0015")
    first, second = "whsec_" + base64.b64encode(os.urandom(32)).decode(), \
        "whsec_" + base64.b64encode(os.urandom(32)).decode()
    answer = b'{"id":"e1","secret":"' + first.encode() + b'"}'
    engine = create_engine(fresh_postgres)
    with engine.begin() as connection:
        connection.execute(text(
            "INSERT INTO webhook_endpoints (id, url, events, description, disabled, secret, "
            "previous_secret, previous_secret_until, created_at, updated_at) VALUES ('e1', "
            "'https://93.184.215.14/h', '[\"delivery.sent\"]', '', false, :first, :second, "
            "now() + interval '1 hour', now(), now())"), {"first": first, "second": second})
        connection.execute(text(
            "INSERT INTO suppliers (id, name, type, cc, sftp, active, created_at, updated_at) "
            "VALUES ('s1', 'Sysco', 'sysco', '[]', CAST(:sftp AS json), true, now(), now())"),
            {"sftp": '{"host": "h", "password": "' + PASSWORD + '"}'})
        connection.execute(text(
            "INSERT INTO idempotency_keys (scope, key, fingerprint, claim, claimed_at, status, "
            "headers, body) VALUES ('-', 'k', 'f', 'c', now(), 201, '[]', :body)"),
            {"body": answer})
    engine.dispose()

    # When `herald migrate` runs without a key
    env = herald_env(DATABASE_URL=fresh_postgres, REDIS_URL=redis_url)
    env.pop("SECRETS_KEY")
    refused = run_herald("migrate", cwd=tmp_path, env=env)

    # Then it stops naming SECRETS_KEY, and nothing changed
    assert refused.returncode == 1
    assert "SECRETS_KEY is not set" in refused.stderr and "4 secrets" in refused.stderr
    dump = pg_dump(fresh_postgres)
    assert first in dump and "0015" in dump

    # When it runs with a key
    done = run_herald("migrate", cwd=tmp_path,
                      env=herald_env(DATABASE_URL=fresh_postgres, REDIS_URL=redis_url))
    assert done.returncode == 0, done.stderr

    # Then the dump reveals none of them, and herald reads each in clear
    assert revealed(pg_dump(fresh_postgres), first, second, PASSWORD) == []
    db.reset_engine()
    try:
        with db.session() as session:
            endpoint = session.get(WebhookEndpoint, "e1")
            supplier = session.get(Supplier, "s1")
            assert endpoint is not None and supplier is not None and supplier.sftp
            assert (endpoint.secret, endpoint.previous_secret) == (first, second)
            assert supplier.sftp["password"] == PASSWORD
        from models.idempotency import Answered, claim_key

        with db.autocommit() as connection:
            replayed = claim_key(connection, "-", "k", "f")
        assert isinstance(replayed, Answered) and replayed.body == answer
    finally:
        db.reset_engine()
        settings.reset_settings()


# -- the embedded default (SQLite) -----------------------------------------------------------
def test_the_embedded_default_keeps_a_key_file_and_its_database_file_no_secret(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given the embedded default (no DATABASE_URL, no SECRETS_KEY) in a new directory
    monkeypatch.chdir(tmp_path)
    for name in ("DATABASE_URL", "SECRETS_KEY"):
        monkeypatch.delenv(name, raising=False)
    settings.reset_settings()
    db.reset_engine()
    try:
        db.migrate()
        # When an endpoint and a sysco supplier are stored
        endpoint = WebhookEndpoint(url="https://93.184.215.14/h", events=["delivery.sent"])
        with db.session() as session:
            session.add_all([endpoint, Supplier(name="Sysco", type="sysco", sftp=SFTP)])
        secret = endpoint.secret

        # Then a key was made in .herald/secrets.key, readable by its owner alone
        key_file = tmp_path / ".herald" / "secrets.key"
        assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
        # And the database file holds neither the secret nor the password
        database = b"".join(path.read_bytes() for path in tmp_path.glob("herald.db*"))
        assert not [form for form in [*forms(secret), *forms(PASSWORD)]
                    if form.encode() in database]
        # And herald reads both back
        with db.session() as session:
            read = session.get(WebhookEndpoint, endpoint.id)
            assert read is not None and read.secret == secret
            (supplier,) = session.exec(select(Supplier)).all()
            assert supplier.sftp is not None and supplier.sftp["password"] == PASSWORD
    finally:
        db.reset_engine()
        settings.reset_settings()


# -- SECRETS_KEY itself ------------------------------------------------------------------------
def test_a_malformed_secrets_key_stops_herald_at_start_naming_it(tmp_path: Path) -> None:
    env = herald_env(SECRETS_KEY=f"{Fernet.generate_key().decode()},not-a-key")
    result = run_herald("migrate", cwd=tmp_path, env=env)
    assert result.returncode == 1
    assert "SECRETS_KEY" in result.stderr and "key 2 is neither a Fernet key" in result.stderr
    assert "not-a-key" not in result.stderr  # the value is never echoed
    assert not (tmp_path / "herald.db").exists()


def test_64_hex_digits_as_app_json_generates_them_make_a_hkdf_derived_key() -> None:
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF

    generated = os.urandom(32).hex()
    (key,) = settings.fernet_keys(generated)
    expected = HKDF(algorithm=hashes.SHA256(), length=32, salt=None,
                    info=b"herald SECRETS_KEY").derive(bytes.fromhex(generated))
    assert key == base64.urlsafe_b64encode(expected)
    Fernet(key)  # a usable Fernet key
