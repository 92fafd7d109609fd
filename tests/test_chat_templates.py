"""Chat templates that re-render earlier turns (Qwen3's drops the empty think block of an assistant turn once later
messages follow): episodes keep what was actually sent and sampled, rollout.chat_template_kwargs reach every
rendering, a template that cannot carry an episode is refused with the text it rendered, and a Qwen3-template
agent trained multi-turn with tools evaluates through `rlvr eval` exactly as it did during training."""

from __future__ import annotations

import json

import pytest
import torch
from agent_fixtures import ScriptedEngine, qwen3_style_tokenizer, qwen_style_tokenizer
from transformers import LlamaConfig, LlamaForCausalLM

from rlvr.cli import main
from rlvr.config import config_from_dict
from rlvr.demo.agent import sft_transcripts
from rlvr.jsonl import write_jsonl
from rlvr.models import encode_prompt
from rlvr.rollout.agent import TemplateError, check_template, observation_ids, render, run_episodes
from rlvr.rollout.base import SamplingParams
from rlvr.rollout.episodes import PromptPolicy, Scoring, generate_and_score
from rlvr.tasks import Task
from rlvr.train import train
from rlvr.train.metrics import read_metrics

CALC = {"tools": [{"tool": "calculator", "name": "calc"}], "tool_format": "fenced", "max_turns": 3,
        "max_turn_tokens": 24}
NO_THINK = {"enable_thinking": False}


def product_task(a: int, b: int, tid: str | None = None) -> Task:
    return Task([{"role": "user", "content": f"{a}*{b}"}], str(a * b), tid or f"p{a}x{b}", env="tools",
                env_options=CALC)


def calc_teacher(text: str) -> str:
    """A fenced calculator call for the last question, then the tool's result as the answer."""
    last = text.rsplit("<|im_start|>user\n", 1)[1]
    if last.startswith("<tool_response>\n"):
        return last.split("\n", 1)[1].split("\n</tool_response>", 1)[0]
    return f"```calc\n{last.split('<|im_end|>', 1)[0]}\n```"


def spans(tok, batch, row):
    """(trained ids, environment ids, whole row's ids) of one episode row."""
    n = int(batch.response_mask[row].sum())
    ids, loss = batch.response_ids[row, :n].tolist(), batch.loss_mask[row, :n].tolist()
    return [t for t, m in zip(ids, loss) if m], [t for t, m in zip(ids, loss) if not m], ids


class Recorder(ScriptedEngine):
    """A scripted engine that records what it sampled per call and row (the model's own tokens)."""

    def __init__(self, tok, script):
        super().__init__(tok, script)
        self.sampled: list[list[int]] = []
        self.prompts: list[list[int]] = []

    def generate(self, prompts, params):
        out = super().generate(prompts, params)
        self.prompts += [list(p) for p in prompts]
        self.sampled += [out.response_ids[i, : int(out.response_mask[i].sum())].tolist() for i in range(len(prompts))]
        return out


def test_qwen3_template_re_renders_earlier_turns():
    """The premise: the template is not prefix-stable, so a re-rendered conversation is not what was sampled."""
    tok = qwen3_style_tokenizer()
    turn = [{"role": "user", "content": "2*3"}, {"role": "assistant", "content": "```calc\n2*3\n```"}]
    before = render(tok, turn, None, False)
    after = render(tok, turn + [{"role": "tool", "content": "6"}], None, True)
    assert "<think>\n\n</think>\n\n```calc" in before and not after.startswith(before)


@pytest.mark.parametrize("kwargs", [{}, NO_THINK], ids=["default", "no_thinking"])
def test_qwen3_episode_rows_are_what_was_sent_and_sampled(kwargs):
    tok = qwen3_style_tokenizer()
    engine = Recorder(tok, calc_teacher)
    tasks = [product_task(123, 45), product_task(7, 8)]
    run = run_episodes(engine, tok, tasks, SamplingParams(n=2, max_new_tokens=200),
                       PromptPolicy(chat_template_kwargs=kwargs))
    assert run.answers == ["5535", "5535", "56", "56"]
    assert [s["turns"] for s in run.stats] == [2, 2, 2, 2] and [s["tool_calls"] for s in run.stats] == [1] * 4
    b = run.batch
    for row in range(b.size):
        trained, env_ids, ids = spans(tok, b, row)
        prompt = b.prompt_ids[row][b.prompt_mask[row].bool()].tolist()
        # the engine's calls, in order: turn 1 of every row, then turn 2 of every row
        first, second = engine.sampled[row], engine.sampled[b.size + row]
        assert trained == first + second  # trained ids == sampled ids, never re-tokenized
        assert engine.prompts[b.size + row] == prompt + first + env_ids  # turn 2 was sampled on exactly this row
        assert ids == first + env_ids + second
        # the observation ids are the template's rendering of the observation turn, up to the next generation prompt
        task = tasks[row // 2]
        history = list(task.prompt) + [{"role": "assistant", "content": tok.decode(first, skip_special_tokens=True)}]
        observation = [{"role": "tool", "name": "calc", "content": task.reference}]
        whole = render(tok, history + observation, engine_tools(), True, kwargs)
        assert whole.endswith(tok.decode(env_ids))
        assert tok.decode(env_ids) == ("\n<|im_start|>user\n<tool_response>\n" + task.reference
                                       + "\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
                                       + ("<think>\n\n</think>\n\n" if kwargs else ""))
        assert env_ids == observation_ids(tok, history, observation, engine_tools(), "<|im_end|>", kwargs)


def engine_tools():
    from rlvr.envs import make_env

    return list(make_env("tools", **CALC).tools)


def test_enable_thinking_false_reaches_every_rendered_prompt():
    tok = qwen3_style_tokenizer()
    messages = [{"role": "user", "content": "2*3"}]
    assert tok.decode(encode_prompt(tok, messages, NO_THINK)).endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert tok.decode(encode_prompt(tok, messages)).endswith("<|im_start|>assistant\n")
    seen = []
    engine = ScriptedEngine(tok, lambda text: seen.append(text) or "6")
    single = [Task(messages, "6", "s1")]
    generate_and_score(engine, tok, single, SamplingParams(n=1, max_new_tokens=8), Scoring(),
                       prompts=PromptPolicy(chat_template_kwargs=NO_THINK))
    episodes = [product_task(2, 3)]
    engine.script = lambda text: seen.append(text) or calc_teacher(text)
    generate_and_score(engine, tok, episodes, SamplingParams(n=1, max_new_tokens=200), Scoring(),
                       prompts=PromptPolicy(chat_template_kwargs=NO_THINK))
    assert len(seen) == 3 and all(text.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n") for text in seen)


UNUSABLE = [  # (template, what the error shows)
    ("{% for m in messages %}{% if m['role'] != 'assistant' %}{{ m['role'] + ': ' + m['content'] + '\\n' }}"
     "{% else %}{{ 'assistant: [hidden]\\n' }}{% endif %}{% endfor %}{% if add_generation_prompt %}assistant: "
     "{% endif %}", "assistant: [hidden]"),
    ("{% for m in messages %}{% if m['role'] in ['user', 'assistant'] %}{{ m['role'] + ': ' + m['content'] + '\\n' }}"
     "{% endif %}{% endfor %}{% if add_generation_prompt %}assistant: {% endif %}", "'tool' message 'probe result'"),
    ("{% for m in messages %}{% if m['role'] == 'tool' %}{{ raise_exception('roles must alternate') }}{% endif %}"
     "{{ m['content'] }}{% endfor %}", "roles must alternate"),
]


@pytest.mark.parametrize("template,shown", UNUSABLE, ids=["hides_assistant_text", "drops_tool_messages", "raises"])
def test_an_unusable_template_is_refused_with_what_it_rendered(template, shown, tmp_path):
    """check_template needs the tokenizer only (it runs before any model loads) and says what it rendered and
    what to do."""
    tok = qwen_style_tokenizer()
    tok.chat_template = template
    with pytest.raises(TemplateError) as err:
        check_template(tok, [Task("plain", "1", "plain"), product_task(2, 3, "agent-task")])
    message = str(err.value)
    assert shown in message and "agent-task" in message and "chat_template" in message


def test_a_template_that_escapes_tool_text_runs_episodes():
    """Llama 3.1's template writes tool results through tojson: quotes and newlines come out escaped, which is the
    template's rendering and no reason to stop a run."""
    tok = qwen_style_tokenizer()
    tok.chat_template = tok.chat_template.replace("m['content'] + '\\n</tool_response>", "(m['content'] | tojson) + "
                                                  "'\\n</tool_response>")
    history = [{"role": "user", "content": "2*3"}, {"role": "assistant", "content": "x"}]
    tail = observation_ids(tok, history, [{"role": "tool", "content": 'error: "2*" \nis not valid'}], None, "")
    assert tok.decode(tail).startswith('<|im_end|>\n<|im_start|>user\n<tool_response>\n"error: \\"2*\\" \\nis')


@pytest.mark.parametrize("make", [qwen3_style_tokenizer, qwen_style_tokenizer])
def test_usable_templates_pass_the_check(make):
    check_template(make(), [product_task(2, 3)], NO_THINK)


def test_a_template_without_kwargs_support_still_renders_with_them():
    """Templates ignore variables they do not use: enable_thinking is harmless for a template without it."""
    tok = qwen_style_tokenizer()
    assert encode_prompt(tok, [{"role": "user", "content": "x"}], NO_THINK) == \
        encode_prompt(tok, [{"role": "user", "content": "x"}])


# --- the Qwen3-template agent, trained and then evaluated by `rlvr eval` ------------------------------------------

def qwen3_model_dir(path, sft_steps: int):
    """A tiny Llama with the Qwen3-style tokenizer, warm-started on teacher episodes rendered by that template (a
    calculator call, then the tool's result as the answer), so that it calls the tool and runs several turns."""
    tok = qwen3_style_tokenizer()
    config = LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=1024,
                         tie_word_embeddings=True, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                         pad_token_id=tok.pad_token_id)
    torch.manual_seed(0)
    model = LlamaForCausalLM(config)
    model.generation_config.pad_token_id = tok.pad_token_id
    tasks = [product_task(a, b) for a in range(100, 130) for b in range(10, 14)]
    run = run_episodes(ScriptedEngine(tok, calc_teacher), tok, tasks, SamplingParams(n=1, max_new_tokens=200))
    b, rows = run.batch, []
    for i in range(b.size):
        prompt = b.prompt_ids[i][b.prompt_mask[i].bool()].tolist()
        n = int(b.response_mask[i].sum())
        response, loss = b.response_ids[i, :n].tolist(), b.loss_mask[i, :n].tolist()
        rows.append((prompt + response, [-100] * len(prompt) + [t if m else -100 for t, m in zip(response, loss)]))
    torch.set_num_threads(1)
    sft_transcripts(model, tok, rows, steps=sft_steps, batch_size=16, lr=3e-3, seed=0, progress=False)
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


def responses(path):
    return {r["task_id"]: [s["response"] for s in r["samples"]] for r in map(json.loads, open(path))}


def test_qwen3_agent_trains_multi_turn_and_rlvr_eval_reproduces_its_evaluation(tmp_path, capsys):
    data = tmp_path / "train.jsonl"
    write_jsonl(data, [{"id": f"t{i}", "prompt": [{"role": "user", "content": f"{a}*{b}"}], "reference": str(a * b)}
                       for i, (a, b) in enumerate([(123, 45), (131, 12), (305, 11), (111, 13)])])
    held = tmp_path / "eval.jsonl"
    write_jsonl(held, [{"id": f"e{i}", "prompt": [{"role": "user", "content": f"{a}*{b}"}], "reference": str(a * b)}
                       for i, (a, b) in enumerate([(102, 11), (117, 12), (140, 13), (128, 10), (99, 14)])])
    model_dir = qwen3_model_dir(tmp_path / "model", sft_steps=120)
    out = train(config_from_dict({
        "model": {"path": str(model_dir)},
        "data": {"train": str(data), "eval": str(held), "verifier": "exact", "prompts_per_step": 2, "env": "tools",
                 "env_options": {**CALC, "format_penalty": -0.1, "tool_error_penalty": -0.1}},
        "rollout": {"group_size": 2, "max_new_tokens": 96},
        "train": {"steps": 2, "save_every": 2, "eval_every": 2, "out": str(tmp_path / "run"),
                  "seed": 0, "progress": False, "lr": 1e-3, "threads": 1},
    }))
    rows = read_metrics(out)
    assert max(r["turns_mean"] for r in rows) > 1 and max(r["tool_calls_mean"] for r in rows) > 0  # multi-turn, tools
    assert all(r["grad_norm"] > 0 for r in rows)  # the episodes were trained on
    assert main(["eval", "--model", str(out / "checkpoint-2"), "--out", str(tmp_path / "e.json"), "--quiet"]) == 0
    ours, theirs = json.loads((tmp_path / "e.json").read_text()), json.loads((out / "eval" / "step-2.json").read_text())
    assert ours["pass@1"]["value"] == theirs["pass@1"]["value"] and ours["n_tasks"] == theirs["n_tasks"] == 5
    mine, training = responses(tmp_path / "e.tasks.jsonl"), responses(out / "eval" / "step-2.tasks.jsonl")
    assert mine == training and len(mine) == 5 and any(r for rs in mine.values() for r in rs)


@pytest.mark.parametrize("kwargs, thinks", [({}, False), (NO_THINK, True)])
def test_rollout_chat_template_kwargs_reach_training_from_the_config(tmp_path, kwargs, thinks):
    from rlvr.rollout import register_engine, unregister_engine

    seen = []
    register_engine("test.records_prompts")(
        lambda model, tokenizer, **_: ScriptedEngine(tokenizer, lambda text: seen.append(text) or "6"))
    data = tmp_path / "train.jsonl"
    write_jsonl(data, [{"id": "t0", "prompt": [{"role": "user", "content": "2*3"}], "reference": "6"}])
    try:
        train(config_from_dict({
            "model": {"path": str(qwen3_model_dir(tmp_path / "model", sft_steps=0))},
            "data": {"train": str(data), "prompts_per_step": 1},
            "rollout": {"group_size": 2, "max_new_tokens": 8, "engine": "test.records_prompts",
                        "chat_template_kwargs": kwargs},
            "train": {"steps": 1, "out": str(tmp_path / "run"), "progress": False},
        }))
    finally:
        unregister_engine("test.records_prompts")
    assert seen and all(text.endswith("<think>\n\n</think>\n\n") == thinks for text in seen)


def test_an_unusable_template_stops_the_run_before_the_model_loads(tmp_path, monkeypatch):
    import rlvr.train.run as run_module

    model = qwen3_model_dir(tmp_path / "model", sft_steps=0)
    config = json.loads((model / "tokenizer_config.json").read_text())
    config["chat_template"] = UNUSABLE[0][0]
    (model / "tokenizer_config.json").write_text(json.dumps(config))
    for extra in model.glob("chat_template.jinja"):
        extra.write_text(UNUSABLE[0][0])
    monkeypatch.setattr(run_module, "load_model", lambda *a, **k: pytest.fail("the model was loaded"))
    data = tmp_path / "train.jsonl"
    write_jsonl(data, [{"id": "t0", "prompt": [{"role": "user", "content": "2*3"}], "reference": "6"}])
    with pytest.raises(TemplateError, match=r"assistant: \[hidden\]"):
        train(config_from_dict({
            "model": {"path": str(model)},
            "data": {"train": str(data), "prompts_per_step": 1, "env": "tools", "env_options": CALC},
            "rollout": {"group_size": 2, "max_new_tokens": 8},
            "train": {"steps": 1, "out": str(tmp_path / "run"), "progress": False},
        }))
