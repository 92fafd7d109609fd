"""The sql tool: read-only queries on a SQLite database, with the sql verifier's guards (rlvr.verifiers.sql): one
SELECT/WITH statement, ``PRAGMA query_only``, an authorizer that allows reading only, a file database opened
read-only, a budget of VM steps, at most ``max_rows`` rows. Each call runs in a supervised worker (a deadline and
a memory cap on top)."""

from __future__ import annotations

from typing import Any

from rlvr.envs.tools import Tool
from rlvr.verifiers import sql as sqlv


def run_query(query: str, *, db: str | None = None, schema: str | None = None, rows: dict | None = None,
              max_rows: int = 20, max_steps: int = 1_000_000) -> str:
    """The query's rows, one line each (``|``-separated values), or the reason it was refused."""
    problem = sqlv.static_problem(query)
    if problem:
        raise ValueError(f"only one read query (SELECT or WITH) may run: {problem}")
    reference: dict[str, Any] = {"db": db} if db else {"schema": schema or "", "rows": rows or {}}
    try:
        conn = sqlv.open_database(reference, None)
    except sqlv.ReferenceDataError as exc:
        raise RuntimeError(f"the database cannot be opened: {exc}") from None
    guard = sqlv.QueryGuard(max_steps)
    conn.set_authorizer(guard.authorize)
    try:
        found, _, cut = sqlv.run_query(conn, guard, query, max_rows)
    except sqlv.QueryFailed as exc:
        raise RuntimeError(str(exc)) from None
    finally:
        conn.close()
    lines = [" | ".join("NULL" if v is None else str(v) for v in row) for row in found]
    if cut:
        lines.append(f"... (more than {max_rows} rows)")
    return "\n".join(lines) if lines else "(no rows)"


def sql_tool(name: str = "sql", *, db: str | None = None, schema: str | None = None, rows: dict | None = None,
             max_rows: int = 20, timeout_s: float = 5.0) -> Tool:
    """A database file (``db``, opened read-only) or one built in memory from ``schema`` and ``rows``."""
    if not db and not schema:
        raise ValueError("tool sql: give db (a SQLite file) or schema (CREATE TABLE ...; INSERT ...;)")
    options = {"db": db, "schema": schema, "rows": rows, "max_rows": max_rows}
    return Tool(name, "Run one read-only SQL query (SQLite) and see the rows.",
                {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
                run_query, isolation="process", timeout_s=timeout_s, options=options)
