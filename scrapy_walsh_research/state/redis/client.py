"""The options every Redis client of the bundle is made with, in one place
(the workers' connection, ``walsh-enqueue``, ``walsh-records``).

redis-py 7+ opens each RESP3 connection with ``CLIENT MAINT_NOTIFICATIONS
ON``, the handshake of Redis Enterprise's maintenance notifications (a
server that is about to move tells its clients where to). Every other
Redis (7.0, the Debian one the tests run) answers "unknown subcommand",
which redis-py logs on every connection of every worker. The bundle has no
use for the notifications: a Redis that goes away is waited for by its own
fail-closed retry loop (:class:`~.connection.RedisConnection`), and a
failover is judged by the fleet's guard, never by the client. So they are
off, and the handshake is never sent.
"""

from __future__ import annotations

from typing import Any


def client_options(**options: Any) -> dict[str, Any]:
    """*options* for ``Redis.from_url`` (sync or asyncio), with the bundle's own."""
    # here, not above: redis is the optional [redis] extra, and walsh-enqueue
    # (which Scrapy imports for every command) reaches this module
    try:  # redis-py 7+
        from redis.maint_notifications import MaintNotificationsConfig
    except ImportError:  # pragma: no cover - an older redis-py sends no such handshake
        return options
    return {"maint_notifications_config": MaintNotificationsConfig(enabled=False), **options}
