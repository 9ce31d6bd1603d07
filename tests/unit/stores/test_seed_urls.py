"""A Redis Cluster store URL may name several seed nodes (redis-py's startup_nodes): how it is
cut into one URL per node, and what is refused."""

from __future__ import annotations

import pytest

from worker.errors import ConfigurationError
from worker.settings import Settings, redis_db, redis_seeds
from worker.stores.identity import store_identity


@pytest.mark.parametrize(
    ("url", "seeds"),
    [
        ("redis://a:7000/0", ["redis://a:7000/0"]),
        ("redis://a:7000,b:7001/0", ["redis://a:7000/0", "redis://b:7001/0"]),
        ("rediss://user:pw@a:7000,b:7001,c:7002/0?ssl_cert_reqs=none",
         ["rediss://user:pw@a:7000/0?ssl_cert_reqs=none",
          "rediss://user:pw@b:7001/0?ssl_cert_reqs=none",
          "rediss://user:pw@c:7002/0?ssl_cert_reqs=none"]),
        ("redis://a:7000,b:7001", ["redis://a:7000", "redis://b:7001"]),
        ("redis://a,b?db=0", ["redis://a?db=0", "redis://b?db=0"]),
        ("sqlite:///a,b.db", ["sqlite:///a,b.db"]),
    ],
)  # fmt: skip
def test_each_seed_node_gets_the_url_s_credentials_database_and_query(
    url: str, seeds: list[str]
) -> None:
    assert redis_seeds(url) == seeds


def test_the_database_of_a_seed_list_is_checked_node_by_node() -> None:
    """Database 0 for every node; a node without a host is refused with the spelling."""
    assert redis_db("redis://a:7000,b:7001/0") == 0
    with pytest.raises(ValueError, match="a seed node has no host") as raised:
        redis_db("redis://a:7000,,b:7001/0")

    assert str(raised.value) == (
        "redis://a:7000,,b:7001/0: a seed node has no host: name a Redis Cluster's seed "
        "nodes as redis://host1:port1,host2:port2/0"
    )


def test_a_seed_list_is_a_valid_store_url_setting() -> None:
    """EVIDENCE_STORE_URL takes it as it is (the port check reads each node's)."""
    url = "redis://a:7000,b:7001/0"

    assert Settings(store_url=url).store_url == url


def test_a_seed_list_s_identity_without_an_answer_names_every_node() -> None:
    """A cluster that did not answer is named by its seed nodes, without the password."""
    identity = store_identity("redis://u:secret@10.0.0.1:7000,10.0.0.2:7001/0", "p")

    assert identity == "redis://10.0.0.1:7000/0, redis://10.0.0.2:7001/0 (key prefix p)"


def test_configuration_error_is_what_open_store_raises_for_a_bad_seed() -> None:
    from worker.stores import open_store

    with pytest.raises(ConfigurationError) as raised:
        open_store("redis://a:7000,,b:7001/0", Settings())

    assert str(raised.value) == (
        "store URL redis://a:7000,,b:7001/0: a seed node has no host: name a Redis "
        "Cluster's seed nodes as redis://host1:port1,host2:port2/0"
    )
