"""The "sql" verifier (execution match): run the predicted and the gold query on SQLite and compare the results.

    ref = {"gold": "SELECT name FROM users WHERE age > 30", "schema": "CREATE TABLE users(name TEXT, age INT);",
           "rows": {"users": [["ann", 31], ["bob", 25]]}}
    verify("sql", "```sql\\nSELECT name FROM users WHERE age >= 31\\n```", ref)          # correct, "result_match"

reference (a dict):
- ``{"gold": "SELECT ...", "db": "path/to/file.sqlite"}``: an existing database file, opened READ-ONLY
  (SQLite URI ``mode=ro``; a relative path is resolved against option ``db_dir`` when given, else the working dir);
- ``{"gold": ..., "schema": "CREATE TABLE ...; INSERT ...;"}``: a fresh in-memory database built by that script,
  plus optionally ``"rows": {"table": [[v1, v2, ...], ...]}`` inserted into existing tables.

The predicted query is the LAST ```sql (or ```sqlite) fenced block (an unclosed final fence runs to the end), else
the whole response. Only one read statement may run: it must start with SELECT or WITH (comments aside) and be a
single statement, else status "incorrect", reason "not_a_query"; on top of that static check, every query runs with
``PRAGMA query_only=ON`` and an authorizer that denies anything but reading tables and calling functions (so
``WITH x AS (...) DELETE ...`` or ``ATTACH`` fail too, also "not_a_query"), and a file database is opened read-only.

Results are compared as multisets of rows (column names are ignored, column order and count matter, 1 == 1.0;
option ``float_digits`` rounds floats first), and as sequences when the gold query has a top-level ORDER BY (one
outside all parentheses). Ties under that ORDER BY are compared in the order SQLite returned them.

Limits: a progress handler aborts a query after ``max_steps`` SQLite VM steps (predicted: status "timeout", reason
"timeout"); at most ``max_rows`` result rows are read (a predicted result with more rows than that cannot equal a
gold result within the limit: "result_mismatch"); strings and blobs are capped at ``max_value_bytes``. The verifier
is registered with isolation="process", so the runner's hard timeout and memory cap apply on top.

Reasons: "result_match", "result_mismatch", "query_error" (the predicted query failed; details["error"] has the
SQLite message), "not_a_query", "timeout", "no_query_found" (undecidable, empty response), "bad_reference" (a
missing/unreadable database, a broken schema, a gold query that is not a read query, fails or runs past the
limits: status "error"), "bad_option" and "bad_response" (status "error").
"""

from __future__ import annotations

import re
import sqlite3
from collections import Counter
from pathlib import Path
from typing import Any

from rlvr.verifiers.base import Status, Verdict
from rlvr.verifiers.registry import register_verifier

_FENCE = re.compile(
    r"^[ \t]*```[ \t]*(?:sql|sqlite3?)[ \t]*\r?\n(.*?)(?:^[ \t]*```[ \t]*$|\Z)",
    re.IGNORECASE | re.MULTILINE | re.DOTALL,
)
_TOKEN = re.compile(
    r"""
      (?P<ws>\s+)
    | (?P<comment>--[^\n]*|/\*.*?(?:\*/|\Z))
    | (?P<string>'(?:[^']|'')*'?)
    | (?P<ident>"(?:[^"]|"")*"?|`[^`]*`?|\[[^\]]*\]?)
    | (?P<word>[A-Za-z_][A-Za-z0-9_$]*)
    | (?P<other>.)
    """,
    re.VERBOSE | re.DOTALL,
)
_READ_ACTIONS = frozenset(
    {sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION, sqlite3.SQLITE_RECURSIVE}
)
_DENIED_FUNCTIONS = frozenset({"load_extension"})
_STEPS_PER_CALL = 1000
_MAX_EXTRACTED = 2000


# ------------------------------------------------------------------------------------------------ static checks


def _tokens(sql: str) -> list[tuple[str, str]]:
    """(kind, text) for the significant tokens of ``sql`` (no whitespace, no comments)."""
    return [(m.lastgroup, m.group()) for m in _TOKEN.finditer(sql) if m.lastgroup not in ("ws", "comment")]


def static_problem(sql: str) -> str | None:
    """Why ``sql`` is not a single read query (None if it is one): it must start with SELECT or WITH."""
    toks = _tokens(sql)
    if not toks:
        return "empty statement"
    kind, text = toks[0]
    if kind != "word" or text.upper() not in ("SELECT", "WITH"):
        return f"the statement starts with {text[:40]!r}, not SELECT or WITH"
    for i, (kind, text) in enumerate(toks):
        if kind == "other" and text == ";" and any(t != ";" for _, t in toks[i + 1 :]):
            return "more than one statement"
    return None


def has_top_level_order_by(sql: str) -> bool:
    """Whether ``sql`` has an ORDER BY outside every parenthesis (so its result order is defined)."""
    depth = 0
    toks = _tokens(sql)
    for i, (kind, text) in enumerate(toks):
        if kind == "other":
            depth += {"(": 1, ")": -1}.get(text, 0)
        elif kind == "word" and depth == 0 and text.upper() == "ORDER":
            if i + 1 < len(toks) and toks[i + 1][0] == "word" and toks[i + 1][1].upper() == "BY":
                return True
    return False


def extract_query(response: str) -> str:
    """The last ```sql fenced block, else the whole response; stripped."""
    blocks = _FENCE.findall(response)
    return (blocks[-1] if blocks else response).strip()


# ------------------------------------------------------------------------------------------------ execution


class QueryGuard:
    """Authorizer (read-only) and progress handler (a VM step budget) for one connection."""

    def __init__(self, max_steps: int):
        self.every = min(_STEPS_PER_CALL, max_steps)
        self.limit = max(1, max_steps // self.every)
        self.calls = 0
        self.exceeded = False
        self.denied: list[str] = []

    def reset(self) -> None:
        self.calls, self.exceeded, self.denied = 0, False, []

    def authorize(self, action: int, arg1: Any, arg2: Any, db_name: Any, source: Any) -> int:
        denied_function = action == sqlite3.SQLITE_FUNCTION and str(arg2).lower() in _DENIED_FUNCTIONS
        if action in _READ_ACTIONS and not denied_function:
            return sqlite3.SQLITE_OK
        self.denied.append(f"action {action} ({arg1}, {arg2})")
        return sqlite3.SQLITE_DENY

    def progress(self) -> int:
        self.calls += 1
        if self.calls > self.limit:
            self.exceeded = True
            return 1
        return 0


class ReferenceDataError(Exception):
    pass


def _quote_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def open_database(reference: dict[str, Any], db_dir: Any) -> sqlite3.Connection:
    if "db" in reference:
        db = reference["db"]
        if not isinstance(db, (str, Path)):
            raise ReferenceDataError("reference['db'] must be a path")
        path = Path(db)
        if not path.is_absolute() and db_dir is not None:
            path = Path(db_dir) / path
        if not path.is_file():
            raise ReferenceDataError(f"database file not found: {str(path)[:300]}")
        conn = sqlite3.connect(path.resolve().as_uri() + "?mode=ro", uri=True)
    else:
        conn = sqlite3.connect(":memory:")
        try:
            conn.executescript(reference["schema"])
            for table, rows in (reference.get("rows") or {}).items():
                if not isinstance(table, str) or not isinstance(rows, (list, tuple)):
                    raise ReferenceDataError("reference['rows'] must map table names to lists of rows")
                for row in rows:
                    if not isinstance(row, (list, tuple)):
                        raise ReferenceDataError(f"a row of {table!r} is not a list: {row!r}"[:300])
                    marks = ", ".join("?" * len(row))
                    conn.execute(f"INSERT INTO {_quote_ident(table)} VALUES ({marks})", tuple(row))
            conn.commit()
        except (sqlite3.Error, sqlite3.Warning, ValueError, TypeError, OverflowError) as exc:
            conn.close()
            raise ReferenceDataError(f"could not build the database: {type(exc).__name__}: {exc}"[:2000]) from None
        except BaseException:
            conn.close()
            raise
    try:
        conn.text_factory = lambda b: b.decode("utf-8", "replace")
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()  # "file is not a database" shows up here
        conn.execute("PRAGMA query_only=ON")
    except sqlite3.Error as exc:
        conn.close()
        raise ReferenceDataError(f"could not read the database: {type(exc).__name__}: {exc}") from None
    return conn


class QueryFailed(Exception):
    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind  # "timeout", "not_a_query" or "query_error"


def run_query(conn: sqlite3.Connection, guard: QueryGuard, sql: str, max_rows: int) -> tuple[list[tuple], int, bool]:
    """(rows, column count, truncated) of one read query under the guard."""
    guard.reset()
    conn.set_progress_handler(guard.progress, guard.every)
    rows: list[tuple] = []
    try:
        cur = conn.execute(sql)
        ncols = len(cur.description or ())
        while len(rows) <= max_rows:
            chunk = cur.fetchmany(min(1000, max_rows + 1 - len(rows)))
            if not chunk:
                break
            rows.extend(chunk)
        cur.close()
    except (sqlite3.Error, sqlite3.Warning, ValueError, OverflowError) as exc:
        if guard.exceeded:
            raise QueryFailed("timeout", "the query exceeded max_steps") from None
        if guard.denied:
            raise QueryFailed("not_a_query", f"not a read-only query: {guard.denied[0]}") from None
        raise QueryFailed("query_error", f"{type(exc).__name__}: {exc}"[:2000]) from None
    finally:
        conn.set_progress_handler(None, 0)
    truncated = len(rows) > max_rows
    return rows[:max_rows], ncols, truncated


def _normalize(rows: list[tuple], float_digits: int | None) -> list[tuple]:
    if float_digits is None:
        return rows
    return [tuple(round(v, float_digits) if isinstance(v, float) else v for v in row) for row in rows]


def _sample(rows: Counter, n: int = 3) -> list[str]:
    return [repr(row)[:200] for row in list(rows.elements())[:n]]


def _error(reason: str, why: str) -> Verdict:
    return Verdict(0.0, Status.ERROR, reason, details={"error": why})


def _check_reference(reference: Any) -> str | None:
    if not isinstance(reference, dict):
        return f"expected a dict with 'gold' and 'db' or 'schema', got {type(reference).__name__}"
    unknown = sorted(set(reference) - {"gold", "db", "schema", "rows"})
    if unknown:
        return f"unknown reference keys: {', '.join(map(str, unknown))}"
    if not isinstance(reference.get("gold"), str) or not reference["gold"].strip():
        return "reference['gold'] must be a non-empty SQL string"
    if ("db" in reference) == ("schema" in reference):
        return "give exactly one of reference['db'] (a database file) or reference['schema'] (a SQL script)"
    if "schema" in reference and not isinstance(reference["schema"], str):
        return "reference['schema'] must be a SQL script string"
    if "rows" in reference and ("schema" not in reference or not isinstance(reference["rows"], dict)):
        return "reference['rows'] must be a dict {table: [[...], ...]} and needs reference['schema']"
    problem = static_problem(reference["gold"])
    if problem is not None:
        return f"the gold query is not a single read query: {problem}"
    return None


def _positive_int(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, int) and value >= 1


@register_verifier("sql", isolation="process")
def sql(
    response: str,
    reference: Any,
    *,
    max_steps: int = 10_000_000,
    max_rows: int = 100_000,
    max_value_bytes: int = 10_000_000,
    float_digits: int | None = None,
    db_dir: str | None = None,
    timeout_s: float | None = None,  # enforced by the runner's worker process; max_steps bounds the work here
) -> Verdict:
    """Execution match of the predicted SQL query against the gold one (see the module docstring)."""
    problem = _check_reference(reference)
    if problem is not None:
        return _error("bad_reference", problem)
    for name, value in (("max_steps", max_steps), ("max_rows", max_rows), ("max_value_bytes", max_value_bytes)):
        if not _positive_int(value):
            return _error("bad_option", f"{name} must be an int >= 1, got {value!r}")
    if float_digits is not None and (isinstance(float_digits, bool) or not isinstance(float_digits, int)):
        return _error("bad_option", f"float_digits must be an int or None, got {float_digits!r}")
    if not isinstance(response, str):
        return _error("bad_response", f"response is {type(response).__name__}, expected str")

    predicted = extract_query(response)
    extracted = predicted if len(predicted) <= _MAX_EXTRACTED else predicted[:_MAX_EXTRACTED] + "..."
    if not _tokens(predicted):
        return Verdict(0.0, Status.UNDECIDABLE, "no_query_found", extracted=extracted)

    try:
        conn = open_database(reference, db_dir)
    except ReferenceDataError as exc:
        return _error("bad_reference", str(exc))
    except sqlite3.Error as exc:
        return _error("bad_reference", f"could not open the database: {exc}")
    try:
        guard = QueryGuard(max_steps)
        conn.set_authorizer(guard.authorize)
        conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, max_value_bytes)
        try:
            gold_rows, gold_cols, gold_truncated = run_query(conn, guard, reference["gold"], max_rows)
        except QueryFailed as exc:
            return _error("bad_reference", f"the gold query failed ({exc.kind}): {exc}")
        if gold_truncated:
            return _error("bad_reference", f"the gold query returns more than max_rows={max_rows} rows")

        problem = static_problem(predicted)
        if problem is not None:
            return Verdict(0.0, Status.INCORRECT, "not_a_query", extracted=extracted, details={"error": problem})
        try:
            pred_rows, pred_cols, pred_truncated = run_query(conn, guard, predicted, max_rows)
        except QueryFailed as exc:
            status = Status.TIMEOUT if exc.kind == "timeout" else Status.INCORRECT
            details = {"error": str(exc)}
            if exc.kind == "timeout":
                details["max_steps"] = max_steps
            return Verdict(0.0, status, exc.kind, extracted=extracted, details=details)
    finally:
        conn.close()

    ordered = has_top_level_order_by(reference["gold"])
    gold_rows, pred_rows = _normalize(gold_rows, float_digits), _normalize(pred_rows, float_digits)
    details: dict[str, Any] = {
        "ordered": ordered,
        "gold_rows": len(gold_rows),
        "pred_rows": len(pred_rows),
        "gold_columns": gold_cols,
        "pred_columns": pred_cols,
    }
    if pred_truncated:
        details["pred_truncated"] = True
        return Verdict(0.0, Status.INCORRECT, "result_mismatch", extracted=extracted, details=details)
    if gold_cols == pred_cols:
        same = gold_rows == pred_rows if ordered else Counter(gold_rows) == Counter(pred_rows)
        if same:
            return Verdict(1.0, Status.CORRECT, "result_match", extracted=extracted, details=details)
    missing, unexpected = Counter(gold_rows) - Counter(pred_rows), Counter(pred_rows) - Counter(gold_rows)
    if missing or unexpected:
        details["missing"], details["unexpected"] = _sample(missing), _sample(unexpected)
    elif ordered and gold_cols == pred_cols:
        details["order_differs"] = True
    return Verdict(0.0, Status.INCORRECT, "result_mismatch", extracted=extracted, details=details)
