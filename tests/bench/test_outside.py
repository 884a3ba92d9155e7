"""Readings of a process from outside (/proc), on this test process."""

from __future__ import annotations

import os
import socket

from bench.outside import broker_connections, rss_bytes


def test_broker_connections_counts_the_process_sockets_to_that_port() -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        assert broker_connections(os.getpid(), port) == 0
        clients = [socket.create_connection(("127.0.0.1", port)) for _ in range(3)]
        accepted = [server.accept()[0] for _ in clients]
        try:
            # the accepted ends have `port` as their local port, not the remote one
            assert broker_connections(os.getpid(), port) == 3
        finally:
            for s in clients + accepted:
                s.close()
        assert broker_connections(os.getpid(), port) == 0


def test_rss_of_this_process_is_read() -> None:
    assert rss_bytes(os.getpid()) > 1_000_000
    assert rss_bytes(2**22 + 12345) == 0  # no such process
