"""The Redis store, on one server or a Redis Cluster: the store (redis_store.py), the cluster's
store that runs its scripts shard by shard in steps (redis_cluster.py) and how its commands reach
the cluster's masters (cluster_routing.py), the publish ledger and dead letters, key names and
shard tags (keys.py), writes that wait for replicas (replicas.py) and the Lua scripts (lua.py
and the .lua files)."""
