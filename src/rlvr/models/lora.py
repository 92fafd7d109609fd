"""LoRA through PEFT: wrapping a model with trainable low-rank adapters, loading an adapter checkpoint, the
reference forward with the adapter switched off, and the merged export.

LoRA (Hu et al., 2021, "LoRA: Low-Rank Adaptation of Large Language Models", Eq. 3) keeps a weight W0 frozen
and trains h = W0 x + (alpha / r) B A x with A in R^{r x k}, B in R^{d x r} and B = 0 at the start, so the
adapted model begins as the base model. With the adapter disabled the same weights compute the base model,
which is the KL reference of an RL run: no second copy of the model is held in memory.

``model.lora`` = null or {r, alpha, dropout, target_modules, sampling}; peft is the ``lora`` extra. ``sampling``
says how the hf engine's lean decoder samples the policy (rollout/llama_decoder.py): ``adapters`` (the default) from
W0 and the adapter's own tensors, with no copy; ``merged`` from a fused, packed copy of W0 + (alpha / r) B A built
once per generate call, which costs one more copy of the adapted weights while sampling and samples about twice as
fast.
"""

from __future__ import annotations

import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from rlvr.errors import UserError

LORA_KEYS = {"r": int, "alpha": (int, float), "dropout": (int, float), "target_modules": (list, str), "sampling": str}
LORA_DEFAULTS: dict[str, Any] = {"r": 8, "alpha": 16, "dropout": 0.0, "target_modules": "all-linear",
                                 "sampling": "adapters"}
LORA_SAMPLING = ("merged", "adapters")  # how the lean decoder samples a LoRA policy (module docstring)
SAMPLING_ATTRIBUTE = "rlvr_lora_sampling"  # where a wrapped model carries its ``sampling`` choice
ADAPTER_CONFIG = "adapter_config.json"


class LoraUnavailable(UserError):
    """peft is not installed (a setup error the user fixes by installing the extra)."""


def require_peft():
    try:
        import peft
    except ImportError:
        raise LoraUnavailable("model.lora needs peft: pip install 'rlvr[lora]'") from None
    return peft


def lora_problem(spec: Any) -> str | None:
    """What is wrong with a ``model.lora`` mapping (None when it is valid); the caller names the key."""
    if not isinstance(spec, dict):
        return f"expected null or a mapping {{r, alpha, dropout, target_modules}}, got {type(spec).__name__}"
    unknown = sorted(set(spec) - set(LORA_KEYS))
    if unknown:
        return f"unknown key(s) {', '.join(unknown)}; known: {', '.join(LORA_KEYS)}"
    expected = {"target_modules": "a list of module names or a string",
                "sampling": f"one of {', '.join(LORA_SAMPLING)}"}
    for key, kinds in LORA_KEYS.items():
        if key in spec and (isinstance(spec[key], bool) or not isinstance(spec[key], kinds)):
            return f"{key}: expected {expected.get(key, 'a number')}"
    merged = {**LORA_DEFAULTS, **spec}
    if merged["sampling"] not in LORA_SAMPLING:
        return f"sampling: expected one of {', '.join(LORA_SAMPLING)}, got {merged['sampling']!r}"
    if merged["r"] < 1:
        return f"r: expected >= 1, got {merged['r']}"
    if merged["alpha"] <= 0:
        return f"alpha: expected > 0, got {merged['alpha']}"
    if not 0 <= merged["dropout"] < 1:
        return f"dropout: expected 0 <= dropout < 1, got {merged['dropout']}"
    targets = merged["target_modules"]
    if not targets or (isinstance(targets, list) and not all(isinstance(t, str) and t for t in targets)):
        return "target_modules: expected a non-empty list of module names or a string such as all-linear"
    return None


@contextmanager
def _quiet():
    """peft asks transformers a deprecated question (is_gradient_checkpointing) while wrapping; that warning is
    about peft's code, not the user's run."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
        yield


def lora_config(spec: dict[str, Any]):
    """PEFT's LoraConfig for a ``model.lora`` mapping (defaults: r=8, alpha=16, dropout=0, all linear layers);
    ``sampling`` is rlvr's, not PEFT's (``apply_lora`` puts it on the model)."""
    peft = require_peft()
    merged = {**LORA_DEFAULTS, **spec}
    return peft.LoraConfig(r=int(merged["r"]), lora_alpha=merged["alpha"], lora_dropout=float(merged["dropout"]),
                           target_modules=merged["target_modules"], task_type="CAUSAL_LM", bias="none")


def apply_lora(model: torch.nn.Module, spec: dict[str, Any], base_path: str | Path) -> torch.nn.Module:
    """The model wrapped with a fresh trainable adapter; only the adapter's parameters require gradients. The
    adapter records ``base_path`` (absolute) so AutoPeftModelForCausalLM can load a checkpoint on its own; the
    wrapped model carries ``spec``'s ``sampling`` choice for the sampler."""
    peft = require_peft()
    with _quiet():
        wrapped = peft.get_peft_model(model, lora_config(spec))
    wrapped.peft_config["default"].base_model_name_or_path = str(Path(base_path).resolve())
    setattr(wrapped, SAMPLING_ATTRIBUTE, {**LORA_DEFAULTS, **spec}["sampling"])
    return wrapped


def load_adapter(model: torch.nn.Module, checkpoint: str | Path, *, trainable: bool = True,
                 sampling: str | None = None) -> torch.nn.Module:
    """The base ``model`` with the adapter saved in ``checkpoint`` (trainable to continue a run), sampled as
    ``sampling`` says (None: the default, LORA_DEFAULTS)."""
    peft = require_peft()
    with _quiet():
        wrapped = peft.PeftModel.from_pretrained(model, str(checkpoint), is_trainable=trainable)
    setattr(wrapped, SAMPLING_ATTRIBUTE, sampling or LORA_DEFAULTS["sampling"])
    return wrapped


def lora_sampling(model) -> str:
    """How the sampler samples ``model``'s adapters: its ``sampling`` choice, or the default."""
    return getattr(model, SAMPLING_ATTRIBUTE, None) or LORA_DEFAULTS["sampling"]


def is_adapter_folder(path: str | Path) -> bool:
    return (Path(path) / ADAPTER_CONFIG).is_file()


def adapter_base_path(checkpoint: str | Path) -> str:
    import json

    return json.loads((Path(checkpoint) / ADAPTER_CONFIG).read_text())["base_model_name_or_path"]


def is_lora_model(model: torch.nn.Module) -> bool:
    return hasattr(model, "peft_config") and hasattr(model, "disable_adapter")


class AdapterDisabled:
    """The reference forward of a LoRA policy: calling it runs the same model with its adapter switched off (and
    dropout off), i.e. the base model, so KL(pi || pi_ref) needs no second copy of the weights in memory."""

    def __init__(self, model: torch.nn.Module):
        self.model = model

    def __call__(self, *args, **kwargs):
        was_training = self.model.training
        self.model.eval()
        try:
            with self.model.disable_adapter():
                return self.model(*args, **kwargs)
        finally:
            self.model.train(was_training)

    def parameters(self):
        return self.model.parameters()


def export_merged(checkpoint: str | Path, out: str | Path) -> Path:
    """Merge a LoRA checkpoint's adapter into its base weights (W = W0 + (alpha / r) B A) and write a plain
    Hugging Face folder (model and tokenizer) to ``out``."""
    require_peft()
    from peft import AutoPeftModelForCausalLM
    from transformers import AutoTokenizer

    checkpoint, out = Path(checkpoint), Path(out)
    if not is_adapter_folder(checkpoint):
        raise FileNotFoundError(f"{checkpoint}: no {ADAPTER_CONFIG} (expected a checkpoint of a run with model.lora)")
    base = adapter_base_path(checkpoint)
    if not Path(base).is_dir():
        raise FileNotFoundError(f"{checkpoint}: its base model {base} (adapter_config.json's base_model_name_or_path) "
                                "is not a directory")
    with _quiet():
        merged = AutoPeftModelForCausalLM.from_pretrained(checkpoint).merge_and_unload()
    out.mkdir(parents=True, exist_ok=True)
    merged.save_pretrained(out)
    tokenizer_from = checkpoint if (checkpoint / "tokenizer_config.json").is_file() else Path(base)
    AutoTokenizer.from_pretrained(tokenizer_from).save_pretrained(out)
    return out
