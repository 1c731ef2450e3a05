"""The service fixtures point at real, working servers."""

from __future__ import annotations

import uuid

import pika
import psycopg
import redis

from tests.support.services import psycopg_dsn


def _redis_version(url: str) -> tuple[int, ...]:
    client = redis.Redis.from_url(url)
    try:
        assert client.ping() is True
        key = f"test-services:{uuid.uuid4().hex}"
        client.set(key, "ok", ex=60)
        assert client.get(key) == b"ok"
        client.delete(key)
        version = str(client.info("server")["redis_version"])
    finally:
        client.close()
    return tuple(int(part) for part in version.split("."))


def test_redis_url_is_redis_7(redis_url: str) -> None:
    assert _redis_version(redis_url)[0] >= 7


def test_redis6_url_is_redis_6_2(redis6_url: str) -> None:
    assert _redis_version(redis6_url)[:2] == (6, 2)


def test_postgres_runs_queries(database_url: str) -> None:
    assert database_url.startswith("postgresql+psycopg://")
    with psycopg.connect(psycopg_dsn(database_url), connect_timeout=10) as conn:
        row = conn.execute("select version()").fetchone()
        assert row is not None and str(row[0]).startswith("PostgreSQL ")
        row = conn.execute("select 40 + %s", (2,)).fetchone()
        assert row == (42,)


def test_rabbitmq_publishes_and_gets(rabbitmq_url: str) -> None:
    params = pika.URLParameters(rabbitmq_url)
    params.socket_timeout = 10
    queue = f"test-services-{uuid.uuid4().hex}"
    connection = pika.BlockingConnection(params)
    try:
        channel = connection.channel()
        channel.queue_declare(queue=queue, auto_delete=True)
        channel.basic_publish(exchange="", routing_key=queue, body=b"hello")
        body = None
        for _ in range(50):  # a published message may take a moment to be routable
            method, _properties, body = channel.basic_get(queue=queue, auto_ack=True)
            if method is not None:
                break
            connection.sleep(0.05)
        assert body == b"hello"
        channel.queue_delete(queue=queue)
    finally:
        connection.close()


def test_psycopg_dsn_drops_the_driver() -> None:
    assert psycopg_dsn("postgresql+psycopg://u@h:1/d") == "postgresql://u@h:1/d"
    assert psycopg_dsn("postgresql://u@h:1/d") == "postgresql://u@h:1/d"
