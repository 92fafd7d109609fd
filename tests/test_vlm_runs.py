"""`rlvr train` on a tiny vision-language model with image tasks, end to end: a LoRA run on the language side (with a
KL term, so the reference forward sees the images too), two learners taking the update one learner takes, and
kill -9 + ``--resume`` ending with the weights and metrics of the uninterrupted run; `rlvr eval` answers image
prompts with a trained checkpoint."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from transformers import AutoModelForImageTextToText, AutoProcessor

from rlvr.models import build_tiny_vlm
from rlvr.train.metrics import read_metrics

ROOT = Path(__file__).resolve().parents[1]
COLOURS = {"red": (255, 0, 0), "green": (0, 255, 0), "blue": (0, 0, 255)}
# The reward must vary within groups for the rows to be trained on: about half of random answers hold one of these.
REFERENCE = {"pattern": "[a-m]", "mode": "search"}
LANGUAGE_LORA = "{r: 4, alpha: 8, target_modules: '.*language_model.*[.](q_proj|v_proj|gate_proj|down_proj)'}"


@pytest.fixture(scope="module")
def vlm_data(tmp_path_factory):
    """A tiny LLaVA folder and a JSONL file of coloured-square images (plain-text and chat prompts alike)."""
    root = tmp_path_factory.mktemp("vlm")
    model = build_tiny_vlm(root / "model", "llava", seed=0)
    (root / "img").mkdir()
    rows = []
    for i in range(24):
        pixels = np.zeros((32, 32, 3), dtype="uint8")
        r, c = (i // 3) % 4, (i * 5) % 4
        pixels[r * 8:(r + 1) * 8, c * 8:(c + 1) * 8] = list(COLOURS.values())[i % 3]
        Image.fromarray(pixels).save(root / "img" / f"{i}.png")
        prompt = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "colour?"}]}] \
            if i % 2 else "colour? "
        rows.append({"prompt": prompt, "reference": REFERENCE, "images": [f"img/{i}.png"]})
    (root / "data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return model, root / "data.jsonl"


def _env():
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT / "src")}


def _command(vlm_data, out, *extra, steps=3, save_every=3):
    model, data = vlm_data
    return [sys.executable, "-m", "rlvr.cli", "train", str(ROOT / "examples" / "arithmetic.yaml"),
            f"model.path={model}", f"train.out={out}", f"data.train={data}", "data.verifier=regex",
            "data.prompts_per_step=4", "rollout.group_size=4", "rollout.max_new_tokens=4", f"train.steps={steps}",
            f"train.save_every={save_every}", "train.lr=1e-3", "train.progress=false", *extra]


def _train(vlm_data, out, *extra, **kw):
    done = subprocess.run(_command(vlm_data, out, *extra, **kw), capture_output=True, text=True, env=_env())
    assert done.returncode == 0, done.stderr[-3000:]
    return read_metrics(out)


def _weights(checkpoint: Path) -> dict[str, torch.Tensor]:
    return AutoModelForImageTextToText.from_pretrained(checkpoint).state_dict()


def test_lora_run_trains_the_language_side_and_saves_the_processor(tmp_path, vlm_data):
    pytest.importorskip("peft")
    from peft import PeftModel

    rows = _train(vlm_data, tmp_path / "run", f"model.lora={LANGUAGE_LORA}", "algo.kl_coef=0.1")
    assert len(rows) == 3 and all(r["rows_backpropagated"] > 0 for r in rows)
    checkpoint = tmp_path / "run" / "checkpoint-3"
    assert (checkpoint / "adapter_config.json").is_file() and (checkpoint / "processor_config.json").is_file()
    assert type(AutoProcessor.from_pretrained(checkpoint)).__name__ == "LlavaProcessor"
    base = AutoModelForImageTextToText.from_pretrained(vlm_data[0])
    adapted = PeftModel.from_pretrained(base, checkpoint)
    names = [n for n, _ in adapted.named_parameters() if "lora_B" in n]
    assert names and all("language_model" in n for n in names), "the adapter sits on the language side only"
    assert any(p.abs().sum() > 0 for n, p in adapted.named_parameters() if "lora_B" in n), "the adapter moved"


@pytest.fixture(scope="module")
def one_learner_run(tmp_path_factory, vlm_data):
    out = tmp_path_factory.mktemp("one") / "run"
    return out, _train(vlm_data, out)


@pytest.mark.parametrize("strategy", ["ddp", "fsdp2"])
def test_two_learners_take_the_update_one_learner_takes(tmp_path, vlm_data, one_learner_run, strategy):
    one_dir, one = one_learner_run
    two = _train(vlm_data, tmp_path / "two", "cluster.learners=2", f"cluster.learner_strategy={strategy}")
    assert [r["reward_mean"] for r in one] == [r["reward_mean"] for r in two]
    a, b = _weights(one_dir / "checkpoint-3"), _weights(tmp_path / "two" / "checkpoint-3")
    start = _weights(vlm_data[0])
    assert max((a[k] - start[k]).abs().max().item() for k in a) > 1e-4, "the runs moved the weights"
    assert max((a[k] - b[k]).abs().max().item() for k in a) < 1e-5  # gradients summed over ranks: rounding only


def test_qwen2_vl_run_trains_and_its_checkpoint_loads_back(tmp_path, vlm_data):
    """Qwen2-VL (3-D M-RoPE positions from the model) through the whole step, with a KL term; its checkpoint loads
    back with rlvr's loader, processor included (AutoProcessor needs torchvision for Qwen2-VL's video part)."""
    from rlvr.models import encode_multimodal, load_model, processor_of

    model = build_tiny_vlm(tmp_path / "qwen", "qwen2_vl", seed=0)
    rows = _train((model, vlm_data[1]), tmp_path / "run", "algo.kl_coef=0.1")
    assert len(rows) == 3 and all(r["rows_backpropagated"] > 0 for r in rows) and rows[-1]["kl"] > 0
    trained, tokenizer = load_model(tmp_path / "run" / "checkpoint-3", device="cpu")
    assert type(trained).__name__ == "Qwen2VLForConditionalGeneration"
    ids, inputs = encode_multimodal(processor_of(tokenizer), "colour? ", [vlm_data[1].parent / "img" / "0.png"])
    assert inputs["image_grid_thw"].tolist() == [[1, 4, 4]]


def test_sigkill_then_resume_is_exact(tmp_path, vlm_data):
    from test_reliability import _kill_when

    steps = 6
    _train(vlm_data, tmp_path / "whole", steps=steps, save_every=2)
    out = tmp_path / "killed"
    proc = subprocess.Popen(_command(vlm_data, out, steps=steps, save_every=2), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, env=_env())
    _kill_when(proc, lambda: (out / "checkpoint-2").is_dir())
    assert proc.returncode == -9 and not (out / f"checkpoint-{steps}").exists()
    resumed = subprocess.run(_command(vlm_data, out, "--resume", steps=steps, save_every=2), capture_output=True,
                             text=True, env=_env())
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    a, b = _weights(out / f"checkpoint-{steps}"), _weights(tmp_path / "whole" / f"checkpoint-{steps}")
    assert max((a[k] - b[k]).abs().max().item() for k in a) == 0.0
    drop = lambda row: {k: v for k, v in row.items() if k not in {"time_s", "tokens_per_s"} and "latency" not in k}  # noqa: E731
    assert [drop(r) for r in read_metrics(out)] == [drop(r) for r in read_metrics(tmp_path / "whole")]


def test_eval_answers_image_prompts_with_a_trained_checkpoint(tmp_path, vlm_data, one_learner_run):
    """`rlvr eval` on the trained checkpoint: each greedy answer is the model's own generate with the task's image."""
    from rlvr.models import encode_multimodal, load_model, processor_of
    from rlvr.models.multimodal import placeholder_ids
    from rlvr.tasks.jsonl import load_jsonl

    checkpoint = one_learner_run[0] / "checkpoint-3"
    done = subprocess.run([sys.executable, "-m", "rlvr.cli", "eval", "--model", str(checkpoint), "--data",
                           str(vlm_data[1]), "--limit", "4", "--samples", "1", "--max-new-tokens", "4", "--out",
                           str(tmp_path / "eval.json")], capture_output=True, text=True, env=_env())
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [json.loads(line) for line in (tmp_path / "eval.tasks.jsonl").read_text().splitlines()]
    model, tokenizer = load_model(checkpoint, device="cpu")
    processor = processor_of(tokenizer)
    tasks = {t.id: t for t in load_jsonl(vlm_data[1])}
    assert len(rows) == 4
    for row in rows:
        task = tasks[row["task_id"]]
        ids, inputs = encode_multimodal(processor, task.prompt, task.images)
        out = model.generate(input_ids=torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                             max_new_tokens=4, do_sample=False, suppress_tokens=placeholder_ids(model), **inputs)
        assert row["samples"][0]["response"] == tokenizer.decode(out[0, len(ids):], skip_special_tokens=True)


@pytest.mark.parametrize("extra", [
    ("algo.advantage=gae", "algo.critic=head"),                  # the value head on the multimodal trunk
    ("algo.advantage=gae", "algo.critic=model"),                 # a separate critic model reads the images
    ("algo.recipe=lp_reg",),                                     # the min-p proxy's own forward pass
    ("algo.entropy_coef=0.01",),                                 # entropy over logits with suppressed placeholders
    ("algo.papo_coef=0.01", "algo.papo_entropy_coef=0.03"),      # PAPO's masked-image forward
], ids=["value_head", "critic_model", "lp_reg", "entropy_bonus", "papo"])
def test_parts_with_forwards_of_their_own_train_a_vlm(tmp_path, vlm_data, extra):
    rows = _train(vlm_data, tmp_path / "run", *extra, steps=2, save_every=0)
    assert len(rows) == 2 and all(np.isfinite(r["loss"]) for r in rows)
    if "algo.papo_coef=0.01" in extra:
        assert all(any(k.startswith("papo/") for k in r) for r in rows), rows[0].keys()


def test_ray_rollout_workers_sample_with_the_images(tmp_path, vlm_data):
    pytest.importorskip("ray")
    ray_tmp = Path(tempfile.mkdtemp(prefix="rlvr-ray-"))
    (tmp_path / "home").mkdir()
    env = {**_env(), "HOME": str(tmp_path / "home"), "RAY_TMPDIR": str(ray_tmp)}
    try:
        done = subprocess.run(_command(vlm_data, tmp_path / "run", "cluster.backend=ray", "cluster.rollout_workers=2",
                                       steps=2, save_every=0), capture_output=True, text=True, env=env, timeout=600)
    finally:
        subprocess.run(["rm", "-rf", str(ray_tmp)], check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert len(read_metrics(tmp_path / "run")) == 2
