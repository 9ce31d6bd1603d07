"""The Redis store on a Redis Cluster: RedisStore itself, opened on a cluster's client, whose
key layout (keys.ClusterKeyLayout), router (routing.ClusterRouter) and record steps
(record_steps.py) are the cluster's; and the questions that tell a cluster from one server."""

from __future__ import annotations

from worker.stores.redis.record_steps import DRIFT_LUA
from worker.stores.redis.redis_store import RedisStore
from worker.stores.redis.routing import (
    CLUSTER_SLOTS,
    cluster_enabled,
    cluster_masters,
    cluster_name,
)

__all__ = [
    "CLUSTER_SLOTS",
    "DRIFT_LUA",
    "RedisClusterStore",
    "cluster_enabled",
    "cluster_masters",
    "cluster_name",
]


class RedisClusterStore(RedisStore):
    """The name open_store() and the tests open a cluster's store by: from_url() opens the
    cluster's client, and the store takes its layout and router from that client. No method
    of RedisStore is overridden here."""

    on_cluster = True
