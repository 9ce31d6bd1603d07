"""The Redis store, on one server or a Redis Cluster: the store (redis_store.py), the cluster's
routing of its scripts shard by shard (redis_cluster.py), the publish ledger and dead letters,
key names and shard tags (keys.py) and writes that wait for replicas (replicas.py)."""
