"""`agui-gateway edge`: an AG-UI HTTP endpoint backed by Kafka (`gateway.edge.app`)."""

from __future__ import annotations

import asyncio
import logging
import ssl
import sys
from typing import Any

from prometheus_client import CollectorRegistry

from gateway.commands import lifecycle
from gateway.edge.app import Edge
from gateway.edge.auth import JwksError
from gateway.edge.guard import guarded_protocol
from gateway.kafka.wire import clients
from gateway.kafka.wire.attestation import AttestationError
from gateway.observe import logs
from gateway.settings import Settings

log = logging.getLogger("gateway.edge")  # the name operators filter on, kept


async def serve(settings: Settings) -> bool:
    """Serve until stopped; False when the edge could not start."""
    import uvicorn

    edge = Edge(settings, CollectorRegistry())
    config = uvicorn.Config(
        edge.app(),
        host=settings.edge_host,
        port=settings.edge_port,
        log_config=None,  # our JSON logs (gateway.observe.logs)
        access_log=False,
        lifespan="on",
        timeout_graceful_shutdown=5,
        # h11 with the header deadline and the connection cap (gateway.edge.guard)
        http=guarded_protocol(
            settings.edge_header_timeout_s, settings.edge_max_connections, edge.metrics
        ),
        **_tls(settings),
    )
    _check_open_file_limit(settings.edge_max_connections)
    server = uvicorn.Server(config)
    await server.serve()
    return bool(server.started)


def _tls(settings: Settings) -> dict[str, Any]:
    """uvicorn's TLS settings: the edge's certificate and, with edge_client_certs, the
    client certificates' CA and whether one is required."""
    if settings.edge_ssl_certfile is None:
        return {}
    reqs = {"off": ssl.CERT_NONE, "optional": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}
    tls: dict[str, Any] = {
        "ssl_certfile": str(settings.edge_ssl_certfile),
        "ssl_keyfile": str(settings.edge_ssl_keyfile),
        "ssl_cert_reqs": reqs[settings.edge_client_certs],
    }
    if settings.edge_ssl_ca_certs is not None:
        tls["ssl_ca_certs"] = str(settings.edge_ssl_ca_certs)
    return tls


def _check_open_file_limit(max_connections: int) -> None:
    """Warn when the process may not open edge_max_connections: past its open-file limit
    new connections fail to be accepted (uvicorn logs and retries) rather than get 503."""
    import resource

    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    needed = max_connections + 256  # Kafka connections, files, the listening socket
    if soft != resource.RLIM_INFINITY and soft < needed:
        log.warning(
            f"the open-file limit ({soft}) is below edge_max_connections "
            f"({max_connections}) plus headroom: raise it (ulimit -n {needed}) "
            "or lower edge_max_connections"
        )


def main(settings: Settings) -> int:
    logs.configure(settings.log_level)
    try:
        asyncio.run(clients.preflight(settings))  # a refused password or certificate: exit 2
    except clients.SecurityFailure as exc:
        log.error(f"agui-gateway edge: {exc}")
        return 2
    try:
        if not lifecycle.run_loop(settings, serve(settings)):
            print(
                f"agui-gateway edge: could not start (Kafka at {settings.bootstrap_servers}, "
                f"reply topic {settings.edge_reply_topic!r}, "
                f"{settings.edge_host}:{settings.edge_port}); see the log above",
                file=sys.stderr,
            )
            return 2
    except (JwksError, AttestationError) as exc:  # keys that cannot be used: said, exit 2
        log.error(f"agui-gateway edge: {exc}")
        return 2
    except KeyboardInterrupt:
        pass
    except OSError as exc:
        print(
            f"agui-gateway edge: cannot run against Kafka at {settings.bootstrap_servers} "
            f"(or bind {settings.edge_host}:{settings.edge_port}): {exc!r}",
            file=sys.stderr,
        )
        return 2
    return 0
