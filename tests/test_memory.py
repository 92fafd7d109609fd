"""Memory: chunked log-probs and entropy equal the full computation (values and gradients) and keep no
positions x vocabulary tensor for the backward pass; gradient checkpointing leaves loss and gradients unchanged."""

from __future__ import annotations

import copy

import pytest
import torch

from rlvr.algos.entropy import chunked_logprobs_entropy, entropy_from_logits, token_logprobs
from rlvr.models import TinySpec, build_tiny_model
from rlvr.train.policy import ValueHead, policy_forward

SPEC = TinySpec(hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64)


def _batch(vocab: int, n: int = 3, prompt: int = 5, width: int = 7, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    prompt_ids = torch.randint(3, vocab, (n, prompt), generator=g)
    prompt_mask = torch.ones(n, prompt, dtype=torch.long)
    prompt_mask[0, :2] = 0  # left padding
    response_ids = torch.randint(3, vocab, (n, width), generator=g)
    response_mask = torch.ones(n, width, dtype=torch.long)
    response_mask[1, 4:] = 0  # right padding
    return prompt_ids, prompt_mask, response_ids, response_mask


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_chunked_logprobs_and_entropy_equal_the_full_computation_and_gradients(temperature):
    torch.manual_seed(0)
    hidden = torch.randn(3, 11, 16, requires_grad=True)
    head = torch.nn.Linear(16, 50, bias=False)
    tokens = torch.randint(0, 50, (3, 11))
    logits = head(hidden).float() / temperature
    full_logp, full_ent = token_logprobs(logits, tokens), entropy_from_logits(logits)
    (full_logp.sum() + 0.3 * full_ent.sum()).backward()
    expected = hidden.grad.clone(), head.weight.grad.clone()
    hidden.grad, head.weight.grad = None, None

    logp, ent = chunked_logprobs_entropy(hidden, head, tokens, temperature=temperature, chunk_rows=4,
                                         with_entropy=True, entropy_grad=True)
    torch.testing.assert_close(logp, full_logp, atol=1e-6, rtol=0)
    torch.testing.assert_close(ent, full_ent, atol=1e-6, rtol=0)
    (logp.sum() + 0.3 * ent.sum()).backward()
    torch.testing.assert_close(hidden.grad, expected[0], atol=1e-6, rtol=0)
    torch.testing.assert_close(head.weight.grad, expected[1], atol=1e-6, rtol=0)


def test_chunked_entropy_is_detached_unless_asked():
    hidden = torch.randn(2, 5, 8, requires_grad=True)
    head = torch.nn.Linear(8, 20, bias=False)
    logp, ent = chunked_logprobs_entropy(hidden, head, torch.zeros(2, 5, dtype=torch.long), chunk_rows=3,
                                         with_entropy=True)
    assert logp.requires_grad and not ent.requires_grad


def _saved_numel(fn, vocab: int) -> int:
    """The largest tensor over the vocabulary (last dimension ``vocab``) autograd keeps for the backward pass."""
    largest = 0

    def pack(t):
        nonlocal largest
        if t.dim() and t.shape[-1] == vocab:
            largest = max(largest, t.numel())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    return largest


@pytest.mark.parametrize("with_values", [False, True])
def test_policy_forward_in_chunks_equals_the_full_forward_and_its_gradients(with_values):
    model, _ = build_tiny_model(SPEC, seed=0)
    value_head = ValueHead(SPEC.hidden_size) if with_values else None
    if value_head is not None:
        torch.nn.init.normal_(value_head.linear.weight)
    batch = _batch(model.config.vocab_size)
    results = []
    for chunk in (0, 4):  # 0: the model's own forward and full logits
        model.zero_grad(set_to_none=True)
        out = policy_forward(model, *batch, temperature=0.8, with_entropy=True, entropy_grad=True,
                             value_head=value_head, chunk=chunk)
        loss = (out.logp * batch[3]).sum() + 0.1 * out.entropy.sum() + (out.values.sum() if with_values else 0)
        loss.backward()
        results.append((out, {n: p.grad.clone() for n, p in model.named_parameters()}))
    (full, full_grads), (chunked, chunked_grads) = results
    torch.testing.assert_close(chunked.logp, full.logp, atol=1e-6, rtol=0)
    torch.testing.assert_close(chunked.entropy, full.entropy, atol=1e-6, rtol=0)
    if with_values:
        torch.testing.assert_close(chunked.values, full.values, atol=1e-6, rtol=0)
    for name, grad in full_grads.items():
        torch.testing.assert_close(chunked_grads[name], grad, atol=1e-5, rtol=1e-5, msg=name)


def test_chunks_keep_no_positions_by_vocabulary_tensor_for_backward():
    model, _ = build_tiny_model(SPEC, seed=0)
    batch = _batch(model.config.vocab_size, n=4, width=32)
    positions_by_vocab = batch[2].numel() * model.config.vocab_size

    def run(chunk):
        return lambda: policy_forward(model, *batch, with_entropy=True, entropy_grad=True, chunk=chunk).logp.sum()

    vocab = model.config.vocab_size
    assert _saved_numel(run(0), vocab) >= positions_by_vocab  # the full path keeps the logits
    assert _saved_numel(run(16), vocab) <= max(16 * vocab, model.lm_head.weight.numel())  # one chunk, or the head


def test_gradient_checkpointing_leaves_loss_and_gradients_unchanged():
    model, _ = build_tiny_model(SPEC, seed=0)
    model.train()
    checkpointed = copy.deepcopy(model)
    checkpointed.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    assert checkpointed.is_gradient_checkpointing and not model.is_gradient_checkpointing
    batch = _batch(model.config.vocab_size)
    grads, losses = [], []
    for m in (model, checkpointed):
        out = policy_forward(m, *batch, with_entropy=True, entropy_grad=True, chunk=0)
        loss = -(out.logp * batch[3]).sum() / batch[3].sum() - 0.01 * out.entropy.mean()
        loss.backward()
        losses.append(loss.item())
        grads.append({n: p.grad for n, p in m.named_parameters()})
    assert losses[0] == losses[1]
    for name, grad in grads[0].items():
        assert torch.equal(grads[1][name], grad), name


def test_gradient_checkpointing_reaches_a_lora_adapter(tiny_model_dir):
    pytest.importorskip("peft")
    from rlvr.models import load_model
    from rlvr.models.lora import apply_lora

    grads = []
    for checkpointing in (False, True):
        model, _ = load_model(tiny_model_dir, device="cpu")
        torch.manual_seed(0)
        model = apply_lora(model, {"r": 4, "target_modules": ["q_proj", "down_proj"]}, tiny_model_dir)
        with torch.no_grad():
            for n, p in model.named_parameters():
                if "lora_B" in n:
                    p.normal_()
        if checkpointing:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.train()
        batch = _batch(model.config.vocab_size)
        policy_forward(model, *batch, chunk=0).logp.sum().backward()
        grads.append({n: p.grad for n, p in model.named_parameters() if p.requires_grad})
    assert grads[0] and all(g is not None and g.abs().sum() > 0 for g in grads[1].values())
    for name, grad in grads[0].items():
        torch.testing.assert_close(grads[1][name], grad, atol=1e-6, rtol=0, msg=name)


ALLOCATOR_CHILD = r"""
import ctypes, importlib.util, sys
spec = importlib.util.spec_from_file_location("allocator", sys.argv[2])  # the module alone: no torch in the child
allocator = importlib.util.module_from_spec(spec)
spec.loader.exec_module(allocator)
if sys.argv[1] == "fixed":
    assert allocator.return_large_blocks_to_the_system()
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype, libc.malloc.argtypes, libc.free.argtypes = ctypes.c_void_p, [ctypes.c_size_t], [ctypes.c_void_p]
size = 8 << 20

def rss():
    return int(open("/proc/self/status").read().split("VmRSS:")[1].split()[0]) * 1024

def touch_and_free():
    block = libc.malloc(size)
    ctypes.memset(block, 1, size)
    libc.free(block)

touch_and_free()  # the first large block is mapped on its own; freeing it is what raises glibc's threshold
before = rss()
touch_and_free()
print(rss() - before)
"""


def test_freed_large_blocks_go_back_to_the_system():
    """After return_large_blocks_to_the_system, a freed 8 MiB block leaves the resident set; with glibc's dynamic
    threshold (the default) the same block stays in the process after it is freed."""
    import os
    import subprocess
    import sys

    from rlvr.train import allocator

    if allocator._glibc() is None:
        pytest.skip("glibc only")
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}  # glibc's own defaults
    retained = {}
    for mode in ("default", "fixed"):
        done = subprocess.run([sys.executable, "-c", ALLOCATOR_CHILD, mode, allocator.__file__], capture_output=True,
                              text=True, env=env)
        assert done.returncode == 0, done.stderr
        retained[mode] = int(done.stdout)
    assert retained["default"] >= 6 << 20, retained
    assert retained["fixed"] < 1 << 20, retained
