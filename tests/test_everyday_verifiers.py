"""Built-in "choice", "regex", "json", "format", "sql" and "grounding" verifiers."""

import hashlib
import sqlite3
import sys
import time

import pytest

from rlvr.verifiers import Status, verifier_names, verify
from rlvr.verifiers.registry import verifier_isolation

NEW = ("choice", "regex", "json", "format", "sql", "grounding")


def test_registered_and_isolation():
    names = verifier_names()
    assert all(n in names for n in NEW)
    assert verifier_isolation("regex") == "process"
    assert verifier_isolation("sql") == "process"
    for name in ("choice", "json", "format", "grounding"):
        assert verifier_isolation(name) == "inline"


def test_no_torch_import():
    for mod in ("choice", "regex", "json_", "format", "sql", "grounding"):
        module = sys.modules[f"rlvr.verifiers.{mod}"]
        assert "torch" not in vars(module)
        assert "import torch" not in open(module.__file__).read()


@pytest.mark.parametrize("name", NEW)
def test_non_string_response_is_an_error_verdict(name):
    reference = {
        "choice": "A",
        "regex": "x",
        "json": None,
        "format": None,
        "sql": {"gold": "SELECT 1", "schema": ""},
        "grounding": [0, 0, 1, 1],
    }[name]
    v = verify(name, None, reference)
    assert (v.score, v.status, v.reason) == (0.0, Status.ERROR, "bad_response"), v


# ------------------------------------------------------------------------------------------------ choice

CHOICE_ACCEPT = [
    ("Answer: B", "B", {}),
    ("The answer is (B).", "B", {}),
    ("After checking each one, **B**", "B", {}),
    ("So we get $\\boxed{B}$.", "B", {}),
    ("The final answer is $\\boxed{\\text{B}}$", "B", {}),
    ("B) because 12 > 10", "B", {}),
    ("Option B is the only one that works.", "B", {}),
    ("B", "B", {}),
    ("  (b). ", "B", {}),
    ("A good approach is to test each option. The answer is C.", "C", {}),
    ("A good approach is elimination; option D survives.", "D", {}),
    ("A good approach: rule out the rest. I pick D.", "D", {}),
    ("The answer is (B) because A is wrong.", "B", {}),
    ("Answer: B, A is wrong because it ignores friction.", "B", {}),
    ("Options:\nA) 1\nB) 2\nC) 3\nD) 4\n\nAnswer: **C**", "C", {}),
    ("**Answer:** D", "D", {}),
    ("I believe the correct choice is D", "D", {}),
    ("I think it is C.", "C", {}),
    ("Answer: A. It is clearly A.", ["A", "C"], {}),
    ("Answer: E", "E", {"choices": "ABCDE"}),
    ("The answer is (I)", "I", {"choices": "ABCDEFGHIJ"}),
    ("First I thought A, but the answer is B.", "B", {}),
    ("The answer is: **(C)**", "C", {}),
    ("Final Answer: The final answer is $\\boxed{C}$. I hope it is correct.", "C", {}),
    ("ANSWER: c", "(c)", {"choices": "abcde"}),
    ("Looking at A, B, C and D, only C works.", "C", {}),
    ("The answer is B.\n\nWhy not A? Because A is too small.", "B", {}),
]

CHOICE_REJECT = [
    ("Answer: C", "B", {}, Status.INCORRECT, "choice_mismatch"),
    ("A or B", "A", {}, Status.INCORRECT, "multiple_answers"),
    ("Answer: A, C", "A", {}, Status.INCORRECT, "multiple_answers"),
    ("The answer is A or B, I cannot decide.", "B", {}, Status.INCORRECT, "multiple_answers"),
    ("\\boxed{A} or \\boxed{B}", "A", {}, Status.INCORRECT, "multiple_answers"),
    ("**A** or **B**", "B", {}, Status.INCORRECT, "multiple_answers"),
    ("It is either C or D.", "C", {}, Status.INCORRECT, "multiple_answers"),
    ("answer: A/B", "A", {}, Status.INCORRECT, "multiple_answers"),
    ("Answer: E.", "A", {}, Status.INCORRECT, "invalid_choice"),
    ("A good approach is to think harder about it.", "A", {}, Status.UNDECIDABLE, "no_choice_found"),
    ("I am not sure.", "A", {}, Status.INCORRECT, "refusal"),
    ("", "A", {}, Status.UNDECIDABLE, "no_choice_found"),
    ("Options:\nA) 1\nB) 2\nC) 3\nD) 4", "A", {}, Status.UNDECIDABLE, "no_choice_found"),
    ("Answer: Both A and C", "A", {}, Status.INCORRECT, "multiple_answers"),
    ("The answer is B and C is wrong.", "C", {}, Status.INCORRECT, "choice_mismatch"),
]


@pytest.mark.parametrize("response, reference, options", CHOICE_ACCEPT)
def test_choice_accepts(response, reference, options):
    v = verify("choice", response, reference, **options)
    assert (v.score, v.status, v.reason) == (1.0, Status.CORRECT, "choice_match"), v
    accepted = reference if isinstance(reference, list) else [reference]
    assert v.extracted in [r.strip("()").upper() for r in accepted]


@pytest.mark.parametrize("response, reference, options, status, reason", CHOICE_REJECT)
def test_choice_rejects(response, reference, options, status, reason):
    v = verify("choice", response, reference, **options)
    assert (v.score, v.status, v.reason) == (0.0, status, reason), v


def test_choice_extracted_and_source():
    v = verify("choice", "Answer: A, C", "A")
    assert v.extracted == "A,C"
    assert verify("choice", "Option B", "B").details["source"] == "marked"
    assert verify("choice", "Answer: B", "B").details["source"] == "strong"


@pytest.mark.parametrize(
    "reference, options, reason",
    [
        ("E", {}, "bad_reference"),  # not among the default ABCD
        ("AB", {}, "bad_reference"),
        (["A", 3], {}, "bad_reference"),
        ([], {}, "bad_reference"),
        (None, {}, "bad_reference"),
        ("A", {"choices": "AAB"}, "bad_option"),
        ("A", {"choices": "A1"}, "bad_option"),
        ("A", {"choices": 4}, "bad_option"),
    ],
)
def test_choice_bad_reference_or_option(reference, options, reason):
    v = verify("choice", "Answer: A", reference, **options)
    assert (v.score, v.status, v.reason) == (0.0, Status.ERROR, reason), v


@pytest.mark.parametrize(
    "junk",
    [
        "answer" + " " * 200_000 + "x",
        "**A** or " * 50_000 + "B",
        "\\boxed{" * 100_000,
        "A good idea. " * 50_000,
        "*" * 100_000 + "1",
        "(" * 100_000 + "1",
    ],
)
def test_choice_adversarial_responses_stay_fast(junk):
    start = time.process_time()  # the inline verifier's own work, whatever else loads the machine
    verify("choice", junk + "\nAnswer: C", "C")
    assert time.process_time() - start < 5


# ------------------------------------------------------------------------------------------------ regex

REGEX_ACCEPT = [
    ("2024-05-01", r"\d{4}-\d{2}-\d{2}"),
    ("  2024-05-01 \n", r"\d{4}-\d{2}-\d{2}"),
    ("YES", {"pattern": "yes", "flags": "i"}),
    ("The date is 2024-05-01.", {"pattern": r"\d{4}-\d{2}-\d{2}", "mode": "search"}),
    ("abc\ndef", {"pattern": "abc.def", "flags": "s"}),
    ("line1\nfoo", {"pattern": "^foo$", "flags": "m", "mode": "search"}),
    ("42 apples", {"pattern": r"\d+", "mode": "match"}),
    ("", ""),
    ("café", r"caf\w"),
]

REGEX_REJECT = [
    ("The date is 2024-05-01.", r"\d{4}-\d{2}-\d{2}"),  # fullmatch by default
    ("YES", "yes"),
    ("abc\ndef", "abc.def"),
    ("2024-5-1", r"\d{4}-\d{2}-\d{2}"),
    ("apples 42", {"pattern": r"\d+", "mode": "match"}),
    ("no digits here", {"pattern": r"\d", "mode": "search"}),
    ("x", ""),
    ("foo bar", {"pattern": "^bar", "mode": "search"}),
]


@pytest.mark.parametrize("response, reference", REGEX_ACCEPT)
def test_regex_accepts(response, reference):
    v = verify("regex", response, reference)
    assert (v.score, v.status, v.reason) == (1.0, Status.CORRECT, "regex_match"), v


@pytest.mark.parametrize("response, reference", REGEX_REJECT)
def test_regex_rejects(response, reference):
    v = verify("regex", response, reference)
    assert (v.score, v.status, v.reason) == (0.0, Status.INCORRECT, "regex_no_match"), v


def test_regex_extracted():
    assert verify("regex", "  ab  ", "ab").extracted == "ab"
    assert verify("regex", "on 2024-05-01.", {"pattern": r"\d{4}-\d\d-\d\d", "mode": "search"}).extracted == "2024-05-01"


def test_regex_catastrophic_backtracking_is_killed():
    start = time.perf_counter()
    v = verify("regex", "a" * 40 + "!", "(a+)+$", timeout_s=1)
    assert (v.score, v.status) == (0.0, Status.TIMEOUT), v
    assert time.perf_counter() - start < 20


def test_regex_too_long():
    v = verify("regex", "a" * 101, "a+", max_chars=100)
    assert (v.score, v.status, v.reason) == (0.0, Status.UNDECIDABLE, "response_too_long"), v
    assert verify("regex", "a" * 100 + "   ", "a+", max_chars=100).status == Status.CORRECT
    assert verify("regex", "a" * 100_001, "a+").reason == "response_too_long"


@pytest.mark.parametrize(
    "reference, reason",
    [
        ("(unclosed", "bad_pattern"),
        ("a{2,1}", "bad_pattern"),
        ({"pattern": "[z-a]"}, "bad_pattern"),
        (123, "bad_reference"),
        ({"pattern": "a", "flags": "q"}, "bad_reference"),
        ({"pattern": "a", "mode": "findall"}, "bad_reference"),
        ({"regex": "a"}, "bad_reference"),
        ({"flags": "i"}, "bad_reference"),
    ],
)
def test_regex_errors(reference, reason):
    v = verify("regex", "a", reference)
    assert (v.score, v.status, v.reason) == (0.0, Status.ERROR, reason), v


# ------------------------------------------------------------------------------------------------ json

SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "tags": {"type": "array", "items": {"type": "string"}}},
    "required": ["name"],
}

JSON_ACCEPT = [
    ('{"a": 1}', None, "valid_json"),
    ("[1, 2, 3]", {}, "valid_json"),
    ("  42  ", None, "valid_json"),
    ('Sure! Here it is:\n```json\n{"name": "x"}\n```\nHope that helps.', {"schema": SCHEMA}, "schema_valid"),
    ('Result: {"name": "x", "tags": ["a", "b"]} -- done', {"schema": SCHEMA}, "schema_valid"),
    ('```JSON\n{"name": "y"}', {"schema": SCHEMA}, "schema_valid"),  # unclosed final fence
    ('{"b": [1, 2], "a": 1.0}', {"equals": {"a": 1, "b": [1, 2]}}, "json_equal"),
    ('The list: [3, {"k": null}]', {"equals": [3, {"k": None}]}, "json_equal"),
    ('```json\n{"a": 1}\n```\n```json\n{"name": "last"}\n```', {"schema": SCHEMA, "equals": {"name": "last"}}, "json_equal"),
    ('{"x": "{not json}"}', None, "valid_json"),
]

JSON_REJECT = [
    ("{'a': 1}", None, "invalid_json"),
    ('{"a": 1,}', None, "invalid_json"),
    ("The answer is 42 apples", None, "invalid_json"),
    ("NaN", None, "non_finite_number"),
    ('{"a": Infinity}', None, "non_finite_number"),
    ('```json\n{"a": \n```', None, "invalid_json"),
    ('{"tags": []}', {"schema": SCHEMA}, "schema_violation"),
    ('{"name": 3}', {"schema": SCHEMA}, "schema_violation"),
    ("[1, 2]", {"equals": [2, 1]}, "not_equal"),
    ("true", {"equals": 1}, "not_equal"),
    ('"1"', {"equals": 1}, "not_equal"),
    ('{"a": 1}', {"equals": {"a": 1, "b": 2}}, "not_equal"),
]


@pytest.mark.parametrize("response, reference, reason", JSON_ACCEPT)
def test_json_accepts(response, reference, reason):
    v = verify("json", response, reference)
    assert (v.score, v.status, v.reason) == (1.0, Status.CORRECT, reason), v


@pytest.mark.parametrize("response, reference, reason", JSON_REJECT)
def test_json_rejects(response, reference, reason):
    v = verify("json", response, reference)
    assert (v.score, v.status, v.reason) == (0.0, Status.INCORRECT, reason), v


def test_json_schema_violation_details_have_paths():
    v = verify("json", '{"name": "x", "tags": ["ok", 5, {"z": 1}]}', {"schema": SCHEMA})
    assert v.reason == "schema_violation"
    paths = [e["path"] for e in v.details["errors"]]
    assert paths == ["$.tags[1]", "$.tags[2]"]
    assert "is not of type 'string'" in v.details["errors"][0]["message"]
    v = verify("json", "{}", {"schema": SCHEMA})
    assert v.details["errors"] == [{"path": "$", "message": "'name' is a required property"}]
    many = {"type": "array", "items": {"type": "string"}}
    assert len(verify("json", "[1,2,3,4,5,6,7,8]", {"schema": many}, max_errors=3).details["errors"]) == 3


def test_json_extracted_is_the_parsed_text():
    assert verify("json", 'Here: {"a": [1]} ok', None).extracted == '{"a": [1]}'
    assert verify("json", '```json\n[1]\n```', None).extracted == "[1]"


def test_json_deep_and_huge_inputs_are_undecidable():
    v = verify("json", "[" * 100_000 + "]" * 100_000, None)
    assert (v.score, v.status, v.reason) == (0.0, Status.UNDECIDABLE, "too_deep"), v
    v = verify("json", '{"a": ' * 5000 + "1" + "}" * 5000, {"equals": 1})
    assert v.reason == "too_deep"
    v = verify("json", "[" * 900 + "]" * 900, {"schema": {"type": "array"}}, max_depth=10_000)
    assert v.status in (Status.UNDECIDABLE, Status.CORRECT), v  # RecursionError is caught, never raised
    v = verify("json", "[1]" + " " * 100, None, max_chars=50)
    assert (v.status, v.reason) == (Status.UNDECIDABLE, "response_too_long")


@pytest.mark.parametrize(
    "reference",
    [
        "not a dict",
        {"type": "object"},  # a bare schema, not {"schema": ...}
        {"schema": "object"},
        {"schema": {"type": "no-such-type"}},
        {"schema": {"$ref": "https://example.com/remote.json"}},
        {"equals": float("nan")},
        {"equals": {1, 2}},
    ],
)
def test_json_bad_reference(reference):
    v = verify("json", '{"a": 1}', reference)
    assert (v.score, v.status, v.reason) == (0.0, Status.ERROR, "bad_reference"), v


# ------------------------------------------------------------------------------------------------ format

FORMAT_ACCEPT = [
    ("<think>2+2=4</think><answer>4</answer>", {}),
    ("  <think>\nlet me see\n</think>\n\n<answer> 4 </answer>\n", {}),
    ("<think></think><answer>4</answer>", {}),  # an empty think is allowed, an empty answer is not
    ("Sure. <think>x</think> then <answer>4</answer> done", {"allow_text_outside": True}),
    ("<answer>4</answer><think>x</think>", {"require_order": False}),
    ("<reasoning>r</reasoning><solution>s</solution>", {"tags": ["reasoning", "solution"]}),
    ("## Plan\nadd\n## Solution\n4", {"tags": [], "required_sections": ["## Plan", "## Solution"]}),
    ("<think>## Plan\nx\n## Solution: y</think><answer>4</answer>", {"required_sections": ["## Plan", "## Solution"]}),
    ("Step 1: a\nFinal: 4", {"tags": [], "required_sections": ["Step 1:", "Final:"]}),
    ("<answer>4</answer>", {"tags": ["answer"]}),
]

FORMAT_REJECT = [
    ("<answer>4</answer>", {}, "missing_tag:think"),
    ("<think>x</think>", {}, "missing_tag:answer"),
    ("just 4", {}, "missing_tag:think"),
    ("<think>a</think><think>b</think><answer>4</answer>", {}, "duplicate_tag:think"),
    ("<think>x</think><answer>4</answer><answer>5</answer>", {}, "duplicate_tag:answer"),
    ("<think>x<answer>4</answer>", {}, "unclosed_tag:think"),
    ("</think>x<think><answer>4</answer>", {}, "unclosed_tag:think"),
    ("<answer>4</answer><think>x</think>", {}, "wrong_order"),
    ("<think>x</think><answer>  </answer>", {}, "empty_tag:answer"),
    ("<think>x<answer>4</answer></think>", {}, "nested_tag:answer"),
    ("Sure! <think>x</think><answer>4</answer>", {}, "text_outside_tags"),
    ("<think>x</think>The answer: <answer>4</answer>", {}, "text_outside_tags"),
    ("<think>x</think><answer>4</answer>\nHope this helps", {}, "text_outside_tags"),
    ("<THINK>x</THINK><answer>4</answer>", {}, "missing_tag:think"),
    ("## Plan\nx", {"tags": [], "required_sections": ["## Plan", "## Solution"]}, "missing_section:## Solution"),
    ("## Solution\n4\n## Plan\nx", {"tags": [], "required_sections": ["## Plan", "## Solution"]}, "wrong_order"),
    ("### Plan\nx", {"tags": [], "required_sections": ["## Plan"]}, "missing_section:## Plan"),
    ("## Planning\nx", {"tags": [], "required_sections": ["## Plan"]}, "missing_section:## Plan"),
    ("text ## Plan", {"tags": [], "required_sections": ["## Plan"]}, "missing_section:## Plan"),
]


@pytest.mark.parametrize("response, options", FORMAT_ACCEPT)
def test_format_accepts(response, options):
    v = verify("format", response, None, **options)
    assert (v.score, v.status, v.reason) == (1.0, Status.CORRECT, "format_ok"), v


@pytest.mark.parametrize("response, options, reason", FORMAT_REJECT)
def test_format_rejects(response, options, reason):
    v = verify("format", response, None, **options)
    assert (v.score, v.status, v.reason) == (0.0, Status.INCORRECT, reason), v


def test_format_extracted_and_all_problems():
    v = verify("format", "<think>x</think>\n<answer> 42 </answer>", None)
    assert v.extracted == "42"
    v = verify("format", "hi <answer></answer>", {"ignored": True})
    assert v.reason == "missing_tag:think"
    assert v.details["problems"] == ["missing_tag:think", "empty_tag:answer", "text_outside_tags"]
    assert v.extracted == ""
    assert verify("format", "no tags", None).extracted is None


@pytest.mark.parametrize(
    "options",
    [
        {"tags": "think"},
        {"tags": ["think", "think"]},
        {"tags": ["a b"]},
        {"tags": ["<think>"]},
        {"require_nonempty": ["other"]},
        {"required_sections": "## Plan"},
        {"required_sections": ["  "]},
        {"tags": [1, 2]},
    ],
)
def test_format_bad_options(options):
    v = verify("format", "<think>x</think><answer>4</answer>", None, **options)
    assert (v.score, v.status, v.reason) == (0.0, Status.ERROR, "bad_option"), v


# ------------------------------------------------------------------------------------------------ sql

SQL_SCHEMA = """
CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT, age INTEGER, city TEXT);
CREATE TABLE orders (id INTEGER PRIMARY KEY, user_id INTEGER, amount REAL);
"""
SQL_ROWS = {
    "users": [[1, "ann", 31, "Oslo"], [2, "bob", 25, "Rome"], [3, "cid", 40, "Oslo"], [4, "dee", 25, "Lima"]],
    "orders": [[1, 1, 10.0], [2, 1, 5.5], [3, 3, 7.25], [4, 2, 1.0]],
}


@pytest.fixture
def sql_db(tmp_path):
    path = tmp_path / "shop.sqlite"
    conn = sqlite3.connect(path)
    conn.executescript(SQL_SCHEMA)
    for table, rows in SQL_ROWS.items():
        conn.executemany(f"INSERT INTO {table} VALUES ({', '.join('?' * len(rows[0]))})", rows)
    conn.commit()
    conn.close()
    return path


def _digest(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(params=["file", "schema"])
def sql_ref(request, sql_db):
    """A reference factory over the same data, either as a database file or as schema + rows."""
    if request.param == "file":
        return lambda gold: {"gold": gold, "db": str(sql_db)}
    return lambda gold: {"gold": gold, "schema": SQL_SCHEMA, "rows": SQL_ROWS}


SQL_ACCEPT = [
    ("SELECT name FROM users WHERE age > 30", "SELECT name FROM users WHERE age >= 31"),
    ("SELECT name FROM users WHERE age > 30", "```sql\nSELECT u.name FROM users AS u WHERE u.age > 30;\n```"),
    ("SELECT name FROM users WHERE age > 30", "Let me think.\n```sql\nSELECT 1\n```\nBetter:\n```sql\nSELECT name FROM users WHERE NOT age <= 30\n```"),
    # unordered gold: any row order is fine
    ("SELECT name FROM users WHERE city = 'Oslo'", "SELECT name FROM users WHERE city = 'Oslo' ORDER BY name DESC"),
    # ordered gold, same order
    ("SELECT name FROM users ORDER BY age DESC, name", "SELECT name FROM users ORDER BY age DESC, name ASC"),
    ("SELECT count(*) FROM users", "WITH t AS (SELECT * FROM users) SELECT count(id) FROM t"),
    ("SELECT user_id, sum(amount) FROM orders GROUP BY user_id", "SELECT user_id, total(amount) FROM orders GROUP BY 1"),
    ("SELECT age FROM users", "SELECT age FROM users UNION ALL SELECT age FROM users WHERE 0"),  # duplicates kept
    ("SELECT 2", "SELECT 2.0"),  # 2 == 2.0
    ("SELECT name FROM users WHERE age > 100", "SELECT name FROM users WHERE 0"),
    ("SELECT name FROM (SELECT * FROM users ORDER BY age) t", "SELECT name FROM users ORDER BY name"),  # inner ORDER BY only
    ("-- all names\nSELECT name FROM users", "/* names */ SELECT name FROM users -- done"),
]

SQL_REJECT = [
    ("SELECT name FROM users WHERE age > 30", "SELECT name FROM users WHERE age >= 25", Status.INCORRECT, "result_mismatch"),
    ("SELECT name, age FROM users", "SELECT age, name FROM users", Status.INCORRECT, "result_mismatch"),  # column order
    ("SELECT name FROM users", "SELECT name, age FROM users", Status.INCORRECT, "result_mismatch"),
    ("SELECT age FROM users", "SELECT DISTINCT age FROM users", Status.INCORRECT, "result_mismatch"),  # multiset
    # ordered gold, different order
    ("SELECT name FROM users ORDER BY age DESC, name", "SELECT name FROM users ORDER BY age, name", Status.INCORRECT, "result_mismatch"),
    ("SELECT name FROM users ORDER BY name", "SELECT name FROM users ORDER BY name DESC", Status.INCORRECT, "result_mismatch"),
    ("SELECT name FROM users", "SELECT nme FROM users", Status.INCORRECT, "query_error"),
    ("SELECT name FROM users", "SELEC name FROM users", Status.INCORRECT, "not_a_query"),
    ("SELECT name FROM users", "SELECT name FROM no_such_table", Status.INCORRECT, "query_error"),
    ("SELECT name FROM users", "DROP TABLE users", Status.INCORRECT, "not_a_query"),
    ("SELECT name FROM users", "DELETE FROM users", Status.INCORRECT, "not_a_query"),
    ("SELECT name FROM users", "SELECT name FROM users; DELETE FROM users", Status.INCORRECT, "not_a_query"),
    ("SELECT name FROM users", "WITH x AS (SELECT 1) DELETE FROM users", Status.INCORRECT, "not_a_query"),
    ("SELECT name FROM users", "UPDATE users SET name = 'x'", Status.INCORRECT, "not_a_query"),
    ("SELECT name FROM users", "ATTACH DATABASE ':memory:' AS other", Status.INCORRECT, "not_a_query"),
    ("SELECT name FROM users", "PRAGMA query_only=OFF", Status.INCORRECT, "not_a_query"),
    ("SELECT name FROM users", "", Status.UNDECIDABLE, "no_query_found"),
    ("SELECT name FROM users", "```sql\n-- nothing\n```", Status.UNDECIDABLE, "no_query_found"),
]


@pytest.mark.parametrize("gold, response", SQL_ACCEPT)
def test_sql_accepts(sql_ref, gold, response):
    v = verify("sql", response, sql_ref(gold))
    assert (v.score, v.status, v.reason) == (1.0, Status.CORRECT, "result_match"), v


@pytest.mark.parametrize("gold, response, status, reason", SQL_REJECT)
def test_sql_rejects(sql_ref, gold, response, status, reason):
    v = verify("sql", response, sql_ref(gold))
    assert (v.score, v.status, v.reason) == (0.0, status, reason), v


def test_sql_order_sensitivity_both_ways(sql_ref):
    ordered_gold = sql_ref("SELECT name FROM users ORDER BY id")
    unordered_gold = sql_ref("SELECT name FROM users")
    reversed_pred = "SELECT name FROM users ORDER BY id DESC"
    assert verify("sql", reversed_pred, ordered_gold).reason == "result_mismatch"
    assert verify("sql", reversed_pred, ordered_gold).details["order_differs"] is True
    assert verify("sql", reversed_pred, unordered_gold).reason == "result_match"
    assert verify("sql", "SELECT name FROM users ORDER BY id", ordered_gold).reason == "result_match"
    # ORDER BY inside a window function or a subquery does not order the outer result
    assert verify("sql", reversed_pred, sql_ref("SELECT name FROM (SELECT name, row_number() OVER (ORDER BY id) FROM users)")).score == 1.0


@pytest.mark.parametrize(
    "attack",
    [
        "DROP TABLE users",
        "DELETE FROM users",
        "```sql\nDELETE FROM users WHERE 1\n```",
        "SELECT 1; DROP TABLE users",
        "WITH x AS (SELECT 1) DELETE FROM users",
        "WITH x AS (SELECT 1) INSERT INTO users(name) SELECT 'evil' FROM x",
        "INSERT INTO users(name) VALUES ('evil')",
        "CREATE TABLE evil(x)",
        "PRAGMA writable_schema=ON",
        "VACUUM",
    ],
)
def test_sql_write_attempts_rejected_and_db_unchanged(sql_db, attack):
    before = _digest(sql_db)
    v = verify("sql", attack, {"gold": "SELECT name FROM users", "db": str(sql_db)})
    assert (v.score, v.status, v.reason) == (0.0, Status.INCORRECT, "not_a_query"), v
    assert _digest(sql_db) == before
    conn = sqlite3.connect(sql_db)
    assert conn.execute("SELECT count(*) FROM users").fetchone() == (4,)
    assert [r[0] for r in conn.execute("SELECT name FROM sqlite_master")] == ["users", "orders"]
    conn.close()


def test_sql_query_error_details(sql_ref):
    v = verify("sql", "SELECT nme FROM users", sql_ref("SELECT name FROM users"))
    assert "no such column: nme" in v.details["error"]
    assert v.extracted == "SELECT nme FROM users"


def test_sql_timeout(sql_ref):
    runaway = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c"
    v = verify("sql", runaway, sql_ref("SELECT 1"), max_steps=200_000)
    assert (v.score, v.status, v.reason) == (0.0, Status.TIMEOUT, "timeout"), v
    v = verify("sql", "SELECT count(*) FROM users a, users b, users c", sql_ref("SELECT 64"), max_steps=50)
    assert v.status == Status.TIMEOUT
    assert verify("sql", "SELECT count(*) FROM users a, users b, users c", sql_ref("SELECT 64")).score == 1.0


def test_sql_too_many_rows(sql_ref):
    v = verify("sql", "SELECT a.id FROM users a, users b", sql_ref("SELECT id FROM users"), max_rows=10)
    assert (v.status, v.reason, v.details["pred_truncated"]) == (Status.INCORRECT, "result_mismatch", True)
    v = verify("sql", "SELECT id FROM users", sql_ref("SELECT a.id FROM users a, users b"), max_rows=10)
    assert (v.status, v.reason) == (Status.ERROR, "bad_reference")


def test_sql_float_digits(sql_ref):
    ref = sql_ref("SELECT avg(amount) FROM orders")
    pred = "SELECT sum(amount) / count(*) + 1e-12 FROM orders"
    assert verify("sql", pred, ref).reason == "result_mismatch"
    assert verify("sql", pred, ref, float_digits=6).reason == "result_match"


@pytest.mark.parametrize(
    "reference",
    [
        {"gold": "SELECT nme FROM users", "schema": SQL_SCHEMA},  # gold errors
        {"gold": "DELETE FROM users", "schema": SQL_SCHEMA},  # gold not a query
        {"gold": "SELECT 1", "db": "/no/such/file.sqlite"},
        {"gold": "SELECT 1", "schema": "CREATE TABLE (broken"},
        {"gold": "SELECT 1", "schema": SQL_SCHEMA, "rows": {"nope": [[1]]}},
        {"gold": "SELECT 1", "schema": SQL_SCHEMA, "rows": {"users": [[1, 2]]}},  # wrong width
        {"gold": "SELECT 1"},
        {"gold": "SELECT 1", "schema": SQL_SCHEMA, "db": "x.sqlite"},
        {"schema": SQL_SCHEMA},
        {"gold": "SELECT 1", "rows": {"users": []}, "db": "x.sqlite"},
        "SELECT 1",
        {"gold": "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c) SELECT max(x) FROM c", "schema": ""},
    ],
)
def test_sql_bad_reference(reference):
    v = verify("sql", "SELECT 1", reference, max_steps=100_000)
    assert (v.score, v.status, v.reason) == (0.0, Status.ERROR, "bad_reference"), v


def test_sql_db_file_that_is_not_a_database(tmp_path):
    path = tmp_path / "junk.sqlite"
    path.write_text("not a database at all, just some text " * 10)
    v = verify("sql", "SELECT 1", {"gold": "SELECT 1", "db": str(path)})
    assert (v.status, v.reason) == (Status.ERROR, "bad_reference"), v


def test_sql_relative_db_path_and_db_dir(sql_db):
    v = verify("sql", "SELECT count(*) FROM users", {"gold": "SELECT 4", "db": sql_db.name}, db_dir=str(sql_db.parent))
    assert v.reason == "result_match"


# ------------------------------------------------------------------------------------------------ grounding

GROUNDING_ACCEPT = [
    ("[10, 20, 30, 40]", [10, 20, 30, 40]),
    ("<answer>[10,20,30,40]</answer>", [10, 20, 30, 40]),
    ("The cat is at (10, 20, 30, 40).", [10, 20, 30, 40]),
    ('```json\n[{"bbox_2d": [10, 20, 30, 40], "label": "cat"}]\n```', [[10, 20, 30, 40]]),
    ("<think>maybe [0, 0, 5, 5]</think><answer>[[10, 20, 30, 40]]</answer>", [10, 20, 30, 40]),
    ("<box>(10,20),(30,40)</box>", [10, 20, 30, 40]),
    ("[0.1, 0.2, 0.5, 0.6]", [0.1, 0.2, 0.5, 0.6]),
    ("[[0,0,10,10],[20,20,30,30]]", [[20, 20, 30, 30], [0, 0, 10, 10]]),
    ("First guess [10, 20, 30, 40], final [10, 20, 30, 40]", [10, 20, 30, 40]),  # a repeated box counts once
    ("[10, 20, 30, 40] and the invalid [50, 50, 40, 40]", [10, 20, 30, 40]),
]

GROUNDING_REJECT = [
    ("[100, 100, 110, 110]", [0, 0, 10, 10], Status.INCORRECT, "boxes_miss"),
    ("[10, 0, 20, 10]", [0, 0, 10, 10], Status.INCORRECT, "boxes_miss"),  # touching edges: IoU 0
    ("<answer>[100, 100, 110, 110]</answer> ([0, 0, 10, 10] was wrong)", [0, 0, 10, 10], Status.INCORRECT, "boxes_miss"),
    ("[0, 0, 5, 10]", [0, 0, 10, 10], Status.PARTIAL, "boxes_partial"),
    ("I see no box.", [0, 0, 10, 10], Status.UNDECIDABLE, "no_box_found"),
    ("[1, 2, 3]", [0, 0, 10, 10], Status.UNDECIDABLE, "no_box_found"),
    ("[10, 10, 5, 5]", [0, 0, 10, 10], Status.UNDECIDABLE, "no_valid_box"),  # x2 < x1
    ("[0, 0, 0, 10]", [0, 0, 10, 10], Status.UNDECIDABLE, "no_valid_box"),  # zero width
    ("[0, 0, 10, 10], [0, 0, 10, 10.5], [0, 0, 10, 11]", [0, 0, 10, 10], Status.PARTIAL, "boxes_partial"),
]


@pytest.mark.parametrize("response, reference", GROUNDING_ACCEPT)
def test_grounding_accepts(response, reference):
    v = verify("grounding", response, reference)
    assert (v.score, v.status, v.reason) == (1.0, Status.CORRECT, "boxes_match"), v


@pytest.mark.parametrize("response, reference, status, reason", GROUNDING_REJECT)
def test_grounding_rejects(response, reference, status, reason):
    v = verify("grounding", response, reference)
    assert v.score < 1.0 and (v.status, v.reason) == (status, reason), v
    if status != Status.PARTIAL:
        assert v.score == 0.0


def test_grounding_single_box_iou_by_hand():
    # [0,0,10,10] vs [5,0,15,10]: intersection 5*10 = 50, union 100 + 100 - 50 = 150
    assert verify("grounding", "(0, 0, 10, 10)", [5, 0, 15, 10]).score == pytest.approx(1 / 3)
    # [0,0,5,10] inside [0,0,10,10]: 50 / 100
    assert verify("grounding", "[0, 0, 5, 10]", [0, 0, 10, 10]).score == pytest.approx(0.5)


def test_grounding_multi_box_greedy_by_hand():
    gold = [[0, 0, 10, 10], [20, 20, 30, 30]]
    # P1=[0,0,10,5] vs G1: 50/100 = 0.5; P2 = G2 exactly: 1.0  ->  (1.0 + 0.5) / max(2, 2) = 0.75
    v = verify("grounding", "[[0,0,10,5],[20,20,30,30]]", gold)
    assert v.score == pytest.approx(0.75) and v.status == Status.PARTIAL
    assert [(m["pred"], m["gold"]) for m in v.details["matches"]] == [(1, 1), (0, 0)]  # highest IoU first
    # an extra unmatched prediction penalises: 1.5 / max(3, 2) = 0.5
    v = verify("grounding", "[[0,0,10,5],[20,20,30,30],[100,100,110,110]]", gold)
    assert v.score == pytest.approx(0.5)
    # a missed gold box penalises too: 1.0 / max(1, 2) = 0.5
    assert verify("grounding", "[20,20,30,30]", gold).score == pytest.approx(0.5)
    # greedy order: G1=[0,0,10,10], G2=[0,0,10,5]; P1=[0,0,10,10], P2=[0,0,10,6]
    # IoU(P1,G1)=1, IoU(P1,G2)=50/100=0.5, IoU(P2,G1)=60/100=0.6, IoU(P2,G2)=50/60=5/6
    # greedy takes (P1,G1)=1 first, then (P2,G2)=5/6  ->  (1 + 5/6) / 2 = 11/12
    v = verify("grounding", "[0,0,10,10] [0,0,10,6]", [[0, 0, 10, 10], [0, 0, 10, 5]])
    assert v.score == pytest.approx(11 / 12)
    # two predictions competing for one gold box: the better one wins, the other is unmatched
    # IoU([0,0,10,10],[0,0,10,10]) = 1, IoU([0,0,10,8],[0,0,10,10]) = 0.8  ->  1 / max(2, 1) = 0.5
    v = verify("grounding", "[0,0,10,8] [0,0,10,10]", [0, 0, 10, 10])
    assert v.score == pytest.approx(0.5) and v.details["matches"] == [{"pred": 1, "gold": 0, "iou": 1.0}]


def test_grounding_threshold():
    gold = [[0, 0, 10, 10], [20, 20, 30, 30]]
    pred = "[[0,0,10,5],[20,20,30,30],[100,100,110,110]]"  # IoUs 0.5 and 1.0, one unmatched
    assert verify("grounding", pred, gold, threshold=0.5).score == pytest.approx(2 / 3)
    assert verify("grounding", pred, gold, threshold=0.75).score == pytest.approx(1 / 3)
    v = verify("grounding", "[[0,0,10,5],[20,20,30,30]]", gold, threshold=0.5)
    assert (v.score, v.status, v.reason) == (1.0, Status.CORRECT, "boxes_match")
    v = verify("grounding", "[0,0,10,5]", [0, 0, 10, 10], threshold=0.6)
    assert (v.score, v.status, v.reason) == (0.0, Status.INCORRECT, "boxes_miss")


def test_grounding_extracted_and_limits():
    v = verify("grounding", "box: (10, 20, 30, 40) and [1.5, 2, 3, 4]", [10, 20, 30, 40])
    assert v.extracted == "[[10, 20, 30, 40], [1.5, 2, 3, 4]]"
    assert v.details["n_pred"] == 2
    spam = " ".join(f"[{i}, 0, {i + 1}, 1]" for i in range(200))
    v = verify("grounding", spam, [0, 0, 1, 1])
    assert (v.score, v.status, v.reason) == (0.0, Status.INCORRECT, "too_many_boxes")


@pytest.mark.parametrize(
    "reference, options, reason",
    [
        ([10, 10, 5, 5], {}, "bad_reference"),
        ([0, 0, 10], {}, "bad_reference"),
        ([], {}, "bad_reference"),
        ("0,0,10,10", {}, "bad_reference"),
        ([[0, 0, 10, 10], [1, 2]], {}, "bad_reference"),
        ([True, 0, 10, 10], {}, "bad_reference"),
        ([0, 0, float("inf"), 10], {}, "bad_reference"),
        ([0, 0, 10, 10], {"threshold": 0}, "bad_option"),
        ([0, 0, 10, 10], {"threshold": 1.5}, "bad_option"),
        ([0, 0, 10, 10], {"max_boxes": 0}, "bad_option"),
    ],
)
def test_grounding_errors(reference, options, reason):
    v = verify("grounding", "[0, 0, 10, 10]", reference, **options)
    assert (v.score, v.status, v.reason) == (0.0, Status.ERROR, reason), v
