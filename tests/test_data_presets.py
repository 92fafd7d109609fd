"""Dataset presets on files the tests write in each dataset's own layout: the tasks carry the right prompt,
reference and verifier, a correct answer passes the verifier and a wrong one fails it."""

import json

import pytest

datasets = pytest.importorskip("datasets")

from rlvr.tasks import DataError, load_tasks  # noqa: E402
from rlvr.verifiers import verify  # noqa: E402


def parquet(tmp_path, name, rows):
    path = tmp_path / f"{name}.parquet"
    datasets.Dataset.from_list(rows).to_parquet(path)
    return str(path)


def jsonl(tmp_path, name, rows):
    path = tmp_path / f"{name}.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_gsm8k(tmp_path):
    path = parquet(tmp_path, "gsm8k", [{"question": "Tom has 1200 apples, then 34 more.", "answer": "1200+34\n#### 1,234"}])
    [task] = load_tasks(f"gsm8k:{path}")
    assert task.prompt.startswith("Tom") and task.reference == "1234" and task.verifier == "math"
    assert task.meta["source"] == "gsm8k:gsm8k" and task.meta["answer"].endswith("1,234")
    assert verify("math", "so 1234 apples", task.reference).score == 1.0


def test_math_and_math500_boxed_or_answer_and_level(tmp_path):
    rows = [{"problem": "1/2+1/4?", "solution": "We get \\boxed{\\frac{3}{4}}.", "level": "Level 2", "unique_id": "a/1"},
            {"problem": "x?", "solution": "long", "answer": "7", "level": "Level 5", "unique_id": "a/2"}]
    for preset in ("math", "math500"):
        tasks = load_tasks(f"{preset}:{jsonl(tmp_path, preset, rows)}")
        assert [t.reference for t in tasks] == ["\\frac{3}{4}", "7"]
        assert [t.id for t in tasks] == ["a/1", "a/2"] and [t.meta["difficulty"] for t in tasks] == ["Level 2", "Level 5"]
    assert verify("math", "\\boxed{0.75}", tasks[0].reference).score == 1.0


def test_aime_deepscaler_dapo(tmp_path):
    [aime] = load_tasks(f"aime:{parquet(tmp_path, 'aime', [{'ID': '2024-I-1', 'Problem': 'p', 'problem': 'Find n.', 'answer': 204}])}")
    assert aime.reference == "204" and aime.id == "2024-I-1"
    [ds] = load_tasks(f"deepscaler:{parquet(tmp_path, 'ds', [{'problem': 'Find m.', 'answer': '12', 'solution': 'x'}])}")
    assert ds.reference == "12" and ds.prompt == "Find m."
    dapo_row = {"prompt": [{"role": "user", "content": "Solve: 3+4"}], "reward_model": {"ground_truth": "7", "style": "rule"},
                "data_source": "math_dapo"}
    [dapo] = load_tasks(f"dapo:{parquet(tmp_path, 'dapo', [dapo_row])}")
    assert dapo.prompt == [{"role": "user", "content": "Solve: 3+4"}] and dapo.reference == "7"
    bad = parquet(tmp_path, "dapo_bad", [{"prompt": "x", "reward_model": {"style": "rule", "ground_truth": None}}])
    with pytest.raises(DataError, match=r"dapo_bad\.parquet: row 0: field 'reward_model\.ground_truth': missing"):
        load_tasks(f"dapo:{bad}")


def test_apps_stdin_and_call_based(tmp_path):
    rows = [
        {"problem_id": 1, "question": "Add two numbers.",
         "input_output": json.dumps({"inputs": ["1 2\n", ["3 4"]], "outputs": ["3\n", ["7"]]})},
        {"problem_id": 2, "question": "Write twice(x).",
         "input_output": json.dumps({"fn_name": "twice", "inputs": [[2], [[1, 2]]], "outputs": [[4], [[1, 2, 1, 2]]]})},
    ]
    stdin, call = load_tasks(f"apps:{parquet(tmp_path, 'apps', rows)}")
    assert stdin.verifier == "code" and stdin.reference["io"][1] == {"input": "3 4\n", "output": "7\n"}
    good = "```python\na, b = map(int, input().split())\nprint(a + b)\n```"
    assert verify("code", good, stdin.reference).score == 1.0
    assert verify("code", "```python\nprint(0)\n```", stdin.reference).score == 0.0
    assert verify("code", "```python\ndef twice(x):\n    return x * 2\n```", call.reference).score == 1.0
    assert verify("code", "```python\ndef twice(x):\n    return x\n```", call.reference).score == 0.0
    [taco] = load_tasks(f"taco:{parquet(tmp_path, 'taco', [dict(rows[0], difficulty='EASY')])}")
    assert taco.meta["difficulty"] == "EASY" and taco.reference == stdin.reference


def test_codecontests_humaneval_mbpp(tmp_path):
    cc = {"name": "1A", "description": "Echo the number.", "public_tests": {"input": ["5\n"], "output": ["5\n"]},
          "private_tests": {"input": ["6\n"], "output": ["6\n"]}, "generated_tests": {"input": [], "output": []}}
    [task] = load_tasks(f"codecontests:{parquet(tmp_path, 'cc', [cc])}")
    assert task.id == "1A" and len(task.reference["io"]) == 2
    assert verify("code", "```python\nprint(input())\n```", task.reference).score == 1.0

    he = {"task_id": "HumanEval/0", "prompt": "def inc(x):\n", "entry_point": "inc",
          "test": "def check(candidate):\n    assert candidate(1) == 2\n    assert candidate(-1) == 0\n"}
    [task] = load_tasks(f"humaneval:{jsonl(tmp_path, 'he', [he])}")
    assert verify("code", "```python\ndef inc(x):\n    return x + 1\n```", task.reference).score == 1.0
    assert verify("code", "```python\ndef inc(x):\n    return x\n```", task.reference).score == 0.0

    mbpp = {"task_id": 11, "text": "Write sq(x).", "test_setup_code": "import math",
            "test_list": ["assert sq(2) == 4", "assert sq(3) == 9"]}
    [task] = load_tasks(f"mbpp:{parquet(tmp_path, 'mbpp', [mbpp])}")
    assert "assert sq(2) == 4" in task.prompt and task.id == "11"
    assert verify("code", "```python\ndef sq(x):\n    return x * x\n```", task.reference).score == 1.0
    assert verify("code", "```python\ndef sq(x):\n    return 4\n```", task.reference).score == 0.5


def test_ifeval_drops_the_null_keys_parquet_adds(tmp_path):
    rows = [{"key": 1, "prompt": "Write without commas.", "instruction_id_list": ["punctuation:no_comma"], "kwargs": [{}]},
            {"key": 2, "prompt": "Write 3 or more words.", "instruction_id_list": ["length_constraints:number_words"],
             "kwargs": [{"relation": "at least", "num_words": 3}]}]
    no_comma, words = load_tasks(f"ifeval:{parquet(tmp_path, 'ifeval', rows)}")
    assert words.reference["kwargs"] == [{"relation": "at least", "num_words": 3}]
    assert no_comma.reference["kwargs"] == [{}]
    assert verify("ifeval", "one two three", words.reference).score == 1.0
    assert verify("ifeval", "one, two", no_comma.reference).score == 0.0


def test_preset_errors_name_file_row_and_field(tmp_path):
    path = parquet(tmp_path, "g", [{"question": "a", "answer": "#### 1"}, {"question": "b", "answer": "no marker"}])
    with pytest.raises(DataError, match=r"g\.parquet: row 1: field 'answer': no '#### <final answer>' line"):
        load_tasks(f"gsm8k:{path}")
    path = parquet(tmp_path, "m", [{"problem": "a", "solution": "no box"}])
    with pytest.raises(DataError, match=r"m\.parquet: row 0: field 'solution': no \\boxed"):
        load_tasks(f"math:{path}")
    path = parquet(tmp_path, "apps_bad", [{"question": "q", "input_output": "{not json"}])
    with pytest.raises(DataError, match=r"apps_bad\.parquet: row 0: field 'input_output': not valid JSON"):
        load_tasks(f"apps:{path}")


def test_preset_with_template_and_system_prompt(tmp_path):
    path = parquet(tmp_path, "g", [{"question": "2+2?", "answer": "#### 4"}])
    [task] = load_tasks(f"gsm8k:{path}", template="Q: {question}\nA:", system_prompt="Think, then answer.")
    assert task.prompt == [{"role": "system", "content": "Think, then answer."}, {"role": "user", "content": "Q: 2+2?\nA:"}]
    assert task.reference == "4"
