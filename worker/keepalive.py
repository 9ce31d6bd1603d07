"""TCP keepalive for the long-lived connections, broker and store alike.

Probe an idle connection after 30 s, every 10 s, and give up after 3 misses: a vanished peer
(a NAT that forgot the connection, a host that died) is noticed in about a minute; Linux'
defaults take over two hours.
"""

from __future__ import annotations

import socket

TCP_KEEPALIVE_OPTIONS: dict[int, int] = {
    option: value
    for name, value in (("TCP_KEEPIDLE", 30), ("TCP_KEEPINTVL", 10), ("TCP_KEEPCNT", 3))
    if (option := getattr(socket, name, None)) is not None
}
