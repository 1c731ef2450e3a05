"""herald's queue wiring: the one place its ``Settings`` become the queue library's
:class:`~herald.queue.QueueConfig`, and the App each herald process builds at start
(``herald worker``, ``herald clock``, ``herald sweep``, each process of ``herald web``,
the queue commands, ``herald demo``).

On the embedded default (neither REDIS_URL nor REDIS_SENTINELS) herald starts its
embedded Redis (:mod:`herald.embedded_redis`) and gives the library its socket's
``unix://`` URL: the library never hears of it. REDIS_SHARDS puts queues on Redis
servers of their own (docs/queue.md#shards); a shard naming a queue herald does not
declare stops the App's build with an error naming both.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from herald.embedded_redis import embedded_socket_path, ensure_embedded_redis
from herald.queue import App, QueueConfig, Registry, ShardConfig, installed_app
from herald.settings import Settings, SettingsError, get_settings


def queue_config(settings: Settings, *, start_embedded: bool = True) -> QueueConfig:
    """The queue library's configuration from herald's settings. On the embedded default
    the embedded Redis is started first (unless ``start_embedded`` is False: a command
    that only looks, and must not start it)."""
    shards = {name: ShardConfig(redis_url=url, queues=queues)
              for name, (url, queues) in settings.redis_shard_map.items()}

    def config(**where: Any) -> QueueConfig:
        return QueueConfig(broker=settings.broker, rabbitmq_url=settings.rabbitmq_url,
                           prefix=settings.queue_prefix, shards=shards, **where)

    if settings.sentinel_hosts:
        return config(sentinel_hosts=tuple(settings.sentinel_hosts),
                      sentinel_name=settings.redis_sentinel_name)
    if settings.redis_url:
        return config(redis_url=settings.redis_url)
    socket_path = ensure_embedded_redis() if start_embedded else embedded_socket_path()
    return config(redis_url=f"unix://{socket_path}")


def build_queue_app(settings: Settings | None = None, *, start_embedded: bool = True,
                    extra: Sequence[Registry] = ()) -> App:
    """A new App on herald's settings (read now when not given), herald's registry
    (``actors.queues.registry``: its queue table is read now) and the ``extra``
    registries of an application's own modules, not yet installed. A REDIS_SHARDS that
    names a queue twice or one no registry declares raises :class:`SettingsError`
    naming it (nothing is connected yet)."""
    from actors.queues import registry

    settings = settings or get_settings()
    try:
        return App(queue_config(settings, start_embedded=start_embedded), registry, *extra)
    except ValueError as error:  # the shards named a queue twice, or one herald lacks
        if not settings.redis_shards:
            raise
        raise SettingsError(f"invalid configuration: REDIS_SHARDS: {error}") from None


def start_queue_app(settings: Settings | None = None, *, start_embedded: bool = True,
                    extra: Sequence[Registry] = ()) -> App:
    """Build herald's App and install it as the process's (see :meth:`App.install`)."""
    return build_queue_app(settings, start_embedded=start_embedded, extra=extra).install()


def describe_redis(settings: Settings) -> str:
    """Where herald's Redis is, for logs and command output, without credentials."""
    if settings.embedded_redis:
        return f"embedded {embedded_socket_path()}"
    return queue_config(settings).describe()


def close_installed_app() -> None:
    """Close the process's installed App, if one is (its clients, before the embedded
    Redis they talk to is stopped)."""
    app = installed_app()
    if app is not None:
        app.close()


def reinstall_queue_app(settings: Settings | None = None, *,
                        extra: Sequence[Registry] = ()) -> App:
    """Close the installed App (if any) and install a new one on the settings (read now
    when not given) and the ``extra`` registries: after a change of the settings the
    queues run on."""
    close_installed_app()
    return start_queue_app(settings, extra=extra)
