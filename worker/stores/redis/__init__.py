"""The Redis store, on one server or a Redis Cluster: one store class (redis_store.py) whose key
names and shard tags (keys.py) and router (routing.py: its writes sent to the one server, or to
each slot's master with redirections followed, each waited on by the replicas, replicas.py) are
the server's or the cluster's; its record plan, one round trip or three steps shard by shard
(record_steps.py); the cluster's name and probing (redis_cluster.py); the publish ledger and
dead letters; the Lua scripts (lua.py and the .lua files)."""
