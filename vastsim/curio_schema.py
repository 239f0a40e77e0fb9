"""curio's cluster schema (``curio_schema.sql``) on the simulated cluster's PostgreSQL, and
YugabyteDB's ``yb_servers()`` answering with the simulated cluster's nodes."""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from importlib.resources import files
from typing import Any

# A production cluster's tservers, as yb_servers() and system.local/peers advertise them.
DEFAULT_NODES: tuple[str, ...] = ("10.0.0.5", "10.0.0.6", "10.0.0.7")


def schema_sql() -> str:
    return files("vastsim").joinpath("curio_schema.sql").read_text(encoding="utf-8")


def yb_servers_sql(nodes: Sequence[str], port: int = 5433) -> str:
    """YugabyteDB's yb_servers() (host, port, num_connections, node_type, cloud, region, zone,
    public_ip, uuid), read by the smart driver's LB_QUERY (yugabyte/pgx load_balance.go) to
    find the servers it connects to. ``nodes`` are IP addresses (checked: they go into SQL)."""
    rows = []
    for i, node in enumerate(nodes):
        ip = str(ipaddress.ip_address(node))
        rows.append(
            f"('{ip}'::text, {int(port)}::bigint, 0::bigint, 'primary'::text, 'cloud1'::text, "
            f"'datacenter1'::text, 'rack1'::text, ''::text, 'sim-tserver-{i}'::text)"
        )
    return (
        "CREATE OR REPLACE FUNCTION yb_servers() RETURNS TABLE (host text, port bigint, "
        "num_connections bigint, node_type text, cloud text, region text, zone text, "
        "public_ip text, uuid text) LANGUAGE sql STABLE AS $$ VALUES " + ", ".join(rows) + " $$"
    )


def apply(conn: Any, nodes: Sequence[str] = DEFAULT_NODES) -> None:
    """Create the schema on a psycopg connection (autocommit or not: one transaction)."""
    with conn.transaction():
        conn.execute(schema_sql())
        conn.execute(yb_servers_sql(nodes))


__all__ = ["DEFAULT_NODES", "apply", "schema_sql", "yb_servers_sql"]
