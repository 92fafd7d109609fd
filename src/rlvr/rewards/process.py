"""Process rewards: a reward per reasoning step, placed on the step's last token (docs/rewards.md, "Process rewards").

    from rlvr.rewards.process import compute_process, step_metrics
    pr = compute_process("arith_steps", batch, responses, tasks, tokenizer)   # ProcessRewards
    pr.values    # [N, T] float32: each step's reward on its last token, 0 elsewhere
    pr.step_end  # [N, T] bool: True on the last token of each step

``batch`` is the RolloutBatch of the responses (``response_ids`` / ``response_mask`` [N, T], right-padded),
``responses[i]`` the decoded text of row i, ``tasks[i]`` its Task and ``tokenizer`` the policy's. A step is a span
of response tokens ending at a delimiter (``step_spans``). Sources (``process_source_names()``):

- ``arith_steps``: rule-checked lines ``a op b = c`` (+1 true, -1 false), the step checker of ``arithmetic:chain``
  tasks and of a CPU reward-hacking demonstration of PURE (Cheng et al. 2025, "Stop Summation: Min-Form Credit
  Assignment Is All Process Reward Model Needs for Reasoning", arXiv 2504.15275).
- ``prm``: a local process reward model folder, read by ``reader``: a Hugging Face token classifier with two labels
  (as in Math-Shepherd, Wang et al. 2024: the step score is p(label 1) - p(label 0) at the step's last token), or
  a causal LM trained with rlvr on ``steps:`` tasks that writes a "+" or "-" label per step (``reader: labels``).

A source is ``fn(batch, responses, tasks, tokenizer, **options) -> ProcessRewards``, registered with
``@register_process_source(name)``; ``compute_process`` checks its options and its output.
"""

from __future__ import annotations

import difflib
import inspect
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from rlvr.errors import UnknownName, UserError


@dataclass
class ProcessRewards:
    """values[N, T] float32: the step's reward on its last token, 0 elsewhere; step_end[N, T] bool: True on the last
    token of each step (a step may have reward 0 and still be a step)."""

    values: torch.Tensor
    step_end: torch.Tensor


ProcessSource = Callable[..., ProcessRewards]
_SOURCES: dict[str, ProcessSource] = {}


def register_process_source(name: str) -> Callable[[ProcessSource], ProcessSource]:
    """Decorator registering ``fn(batch, responses, tasks, tokenizer, **options) -> ProcessRewards`` under ``name``.
    Registering a different function under a taken name is a UserError; re-registering the same one is a no-op."""
    if not isinstance(name, str) or not name.strip() or name != name.strip():
        raise UserError(f"a process source name must be a non-empty string without surrounding spaces, got {name!r}")

    def decorator(fn: ProcessSource) -> ProcessSource:
        old = _SOURCES.get(name)
        if old is not None and (old.__module__, old.__qualname__) != (fn.__module__, fn.__qualname__):
            raise UserError(f"process source {name!r} is already registered ({old.__module__}.{old.__qualname__})")
        _SOURCES[name] = fn
        return fn

    return decorator


def process_source_names() -> list[str]:
    return sorted(_SOURCES)


def get_process_source(name: str) -> ProcessSource:
    try:
        return _SOURCES[name]
    except (KeyError, TypeError):
        close = difflib.get_close_matches(str(name), list(_SOURCES), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise UnknownName(f"unknown process source {name!r}{hint}; known: {', '.join(sorted(_SOURCES))}") from None


def check_process_options(name: str, options: dict[str, Any]) -> None:
    """A UserError unless ``name`` is a registered source that takes every option in ``options`` (a config check
    before any model is loaded)."""
    _check_options(name, get_process_source(name), options)


def _check_options(name: str, fn: ProcessSource, options: dict[str, Any]) -> None:
    params = list(inspect.signature(fn).parameters.values())
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return
    known = [p.name for p in params[4:] if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)]
    unknown = sorted(set(options) - set(known))
    if unknown:
        raise UserError(f"reward.process options: {', '.join(map(repr, unknown))} not known to process source "
                        f"{name!r}; known: {', '.join(known) or 'none'}")


def compute_process(name: str, batch: Any, responses: list[str], tasks: list[Any], tokenizer: Any,
                    **options: Any) -> ProcessRewards:
    """The step rewards of every row of ``batch`` from the source ``name``, without gradients, checked: values
    float32 and step_end bool, both [N, T] on the batch's device, non-zero values only on step ends, and step ends
    only on response tokens."""
    fn = get_process_source(name)
    _check_options(name, fn, options)
    ids, mask = batch.response_ids, batch.response_mask
    if not len(responses) == len(tasks) == ids.shape[0]:
        raise ValueError(f"process source {name!r}: {ids.shape[0]} rows, {len(responses)} responses and "
                         f"{len(tasks)} tasks (expected one of each per row)")
    with torch.no_grad():
        out = fn(batch, responses, tasks, tokenizer, **options)
    if not isinstance(out, ProcessRewards):
        raise TypeError(f"process source {name!r} returned {type(out).__name__}, expected ProcessRewards")
    for field, tensor in (("values", out.values), ("step_end", out.step_end)):
        if not isinstance(tensor, torch.Tensor) or tuple(tensor.shape) != tuple(ids.shape):
            got = tuple(tensor.shape) if isinstance(tensor, torch.Tensor) else type(tensor).__name__
            raise ValueError(f"process source {name!r}: {field} is {got}, expected a tensor of shape "
                             f"{tuple(ids.shape)} (the response tokens)")
    values, step_end = out.values.detach().float().to(ids.device), out.step_end.bool().to(ids.device)
    if (values.masked_select(~step_end) != 0).any() or (step_end & ~mask.bool()).any():
        raise ValueError(f"process source {name!r} put rewards off its step ends, or step ends off the response")
    if not torch.isfinite(values).all():
        raise ValueError(f"process source {name!r} returned a non-finite step reward")
    return ProcessRewards(values, step_end)


# --------------------------------------------------------------------------------------------------- steps


def _blank(text: str, delimiter: str) -> bool:
    """Nothing but whitespace and delimiters: no step of its own."""
    return not text.replace(delimiter, "").strip()


def _closing(body: str, delimiter: str) -> int:
    """Where the text of a finished step ends in ``body`` (just past its last delimiter), or -1 while ``body`` holds
    no delimiter that follows some text (a blank line does not end a step: it joins the next one)."""
    masked = body.replace(delimiter, " " * len(delimiter))  # same indices; delimiters read as blanks
    content = len(masked) - len(masked.lstrip())
    if content == len(body) or body.find(delimiter, content) < 0:
        return -1
    return body.rfind(delimiter) + len(delimiter)


def _spans_and_ends(tokenizer: Any, ids: list[int], delimiter: str, *, with_ends: bool = False,
                    window: int = 8) -> tuple[list[tuple[int, int, str]], list[int]]:
    """step_spans, and (``with_ends``) the character offset in the decoded response where each step's text ends:
    just past its delimiter (blank text a last step was given at the end does not count), or at the end of the
    response for a last step without one."""
    if not isinstance(delimiter, str) or not delimiter:
        raise UserError(f"a process-reward step delimiter must be a non-empty string, got {delimiter!r}")

    def decode(part: list[int]) -> str:
        return tokenizer.decode(part, skip_special_tokens=True, clean_up_tokenization_spaces=False)

    spans: list[tuple[int, int, str]] = []
    tails: list[int] = []  # per step: characters its last token's decoded prefix holds after the step's end
    start, carry = 0, ""  # first token of the open step; text of the previous step's last token after its delimiter
    has_text = False  # the open step holds more than blanks
    window = max(window, 2 * len(delimiter))
    for t in range(len(ids)):
        # Only the last few tokens can complete a delimiter or bring the step's first text: decode those (cheap),
        # and the whole open step only when they hold a delimiter after some text, so that a step costs
        # O(window x length) however long it is, and a flood of blank lines costs no more.
        low = max(start, t - window + 1)
        recent = (carry if low == start else "") + decode(ids[low:t + 1])
        has_text = has_text or not _blank(recent, delimiter)
        if not has_text or delimiter not in recent:
            continue
        body = carry + decode(ids[start:t + 1])
        close = _closing(body, delimiter)
        if close < 0:
            continue
        spans.append((start, t, body[:close]))
        tails.append(len(body) - close)
        start, carry, has_text = t + 1, body[close:], False
    if start < len(ids):
        rest = carry + decode(ids[start:])
        if not _blank(rest, delimiter) or not spans:
            spans.append((start, len(ids) - 1, rest))
            tails.append(0)
        else:  # only blank text after the last delimiter (and EOS): the last step ends at the last token
            first, _, text = spans[-1]
            spans[-1], tails[-1] = (first, len(ids) - 1, text + rest), len(rest)
    elif carry:  # the last token ended a step and began another ("=2\n#4"): one step holds both lines (a blank
        first, last, text = spans[-1]  # rest only joins it)
        spans[-1], tails[-1] = (first, last, text + carry), len(carry) if _blank(carry, delimiter) else 0
    if not with_ends:
        return spans, []
    texts = [text for _, _, text in spans]
    if "".join(texts) == decode(ids):  # the steps' texts tile the response: offsets add up (no decoding)
        offsets, total = [], 0
        for text, (_, last, _), tail in zip(texts, spans, tails):
            total += len(text)
            offsets.append(total - (tail if last == len(ids) - 1 else 0))
        return spans, offsets
    # A tokenizer whose decoding of a slice differs from its part of the whole (SentencePiece drops a leading
    # space): measure each step's end in the decoded prefix.
    return spans, [len(decode(ids[:last + 1])) - tail for (_, last, _), tail in zip(spans, tails)]


def step_spans(tokenizer: Any, response_ids: list[int], delimiter: str = "\n") -> list[tuple[int, int, str]]:
    """(first token, last token, text) of each step of a response's valid tokens.

    A step ends at the token whose decoded text first holds the delimiter after the previous step's end, so a
    token of several characters ("=2\\n", or a BPE merge of "\\n\\n") ends the step it closes; characters of that
    token after the delimiter start the next step's text. A blank line does not make a step of its own (it joins
    the next one), and the last step ends at the last token (EOS included when it is given): trailing blank text
    joins it. Blank means nothing but whitespace and delimiters. Special tokens decode to nothing. Texts are what
    each step's tokens decode to."""
    return _spans_and_ends(tokenizer, [int(i) for i in response_ids], delimiter)[0]


def _rows(batch: Any) -> list[tuple[list[int], list[int]]]:
    """Each row's response token ids and their positions (mask 1), in order, read on the CPU."""
    ids, mask = batch.response_ids.cpu(), batch.response_mask.bool().cpu()
    rows = []
    for i in range(ids.shape[0]):
        positions = torch.nonzero(mask[i], as_tuple=False).flatten()
        rows.append((ids[i, positions].tolist(), positions.tolist()))
    return rows


def _empty(batch: Any) -> ProcessRewards:
    """All-zero step rewards on the CPU, filled element by element (compute_process moves them to the batch's
    device)."""
    shape = tuple(batch.response_ids.shape)
    return ProcessRewards(torch.zeros(shape, dtype=torch.float32), torch.zeros(shape, dtype=torch.bool))


def step_metrics(pr: ProcessRewards, mask: torch.Tensor) -> dict[str, float]:
    """``process/steps_mean`` (steps per row that has tokens in ``mask``), ``process/reward_mean`` (mean step
    reward) and ``process/false_step_frac`` (the share of steps with a negative reward); steps off ``mask`` are
    not counted."""
    ends = pr.step_end.bool() & mask.bool()
    rewards = pr.values[ends].double()
    rows = int(mask.bool().any(dim=1).sum())
    steps = rewards.numel()
    return {"process/steps_mean": steps / rows if rows else 0.0,
            "process/reward_mean": float(rewards.mean()) if steps else 0.0,
            "process/false_step_frac": float((rewards < 0).double().mean()) if steps else 0.0}


# ------------------------------------------------------------------------------------------ arith_steps

_EQUATION = re.compile(r"[ \t]*(-?[0-9]+)[ \t]*([-+*])[ \t]*(-?[0-9]+)[ \t]*=[ \t]*(-?[0-9]+)[ \t]*")


def line_verdict(line: str, max_digits: int = 30) -> str:
    """"true" / "false" for an equation ``a op b = c`` (integers; + - *), "answer" for a ``#...`` line, "blank",
    or "other". An equation with a number of more than ``max_digits`` digits is "false" (nothing huge is computed)."""
    text = line.strip()
    if not text:
        return "blank"
    if text.startswith("#"):
        return "answer"
    match = _EQUATION.fullmatch(text)
    if match is None:
        return "other"
    a, op, b, c = match.groups()
    if max(len(x.lstrip("-")) for x in (a, b, c)) > max_digits:
        return "false"
    x, y = int(a), int(b)
    value = x + y if op == "+" else x - y if op == "-" else x * y
    return "true" if value == int(c) else "false"


@register_process_source("arith_steps")
def arith_steps(batch: Any, responses: list[str], tasks: list[Any], tokenizer: Any, *, true_reward: float = 1.0,
                false_reward: float = -1.0, other: float = 0.0, answer: float | str = 0.0, delimiter: str = "\n",
                max_digits: int = 30) -> ProcessRewards:
    """Each step (a line) is checked: ``a op b = c`` scores ``true_reward`` when it holds and ``false_reward`` when
    it does not, the ``#answer`` line scores ``answer`` (0: the outcome is the verifier's, not a step's; "check": the
    final step is checked like the others, ``true_reward`` when its answer equals the task's reference, as a PRM
    judges a solution's last step) and any other line ``other``. A step of several lines (one token ending several) scores false if any equation is
    false, else true if it holds one, else its answer or other score. No text is ever evaluated. The rule-checked
    steps for PURE's sum-form vs min-form comparison (Stop Summation, arXiv 2504.15275) on chain arithmetic."""
    out = _empty(batch)
    if isinstance(answer, str) and answer != "check":
        raise UserError(f"arith_steps: option 'answer' is a number or \"check\", got {answer!r}")
    score = {"true": float(true_reward), "false": float(false_reward), "other": float(other)}
    for i, (ids, positions) in enumerate(_rows(batch)):
        for _, last, text in step_spans(tokenizer, ids, delimiter):
            lines = text.replace(delimiter, "\n").split("\n")  # the delimiter is not part of an equation
            kinds = {line_verdict(line, int(max_digits)) for line in lines} - {"blank"}
            kind = next((k for k in ("false", "true", "answer") if k in kinds), "other")
            if kind == "answer":
                value = _answer_score(lines, tasks[i], answer, score) if answer == "check" else float(answer)
            else:
                value = score[kind]
            out.values[i, positions[last]] = value
            out.step_end[i, positions[last]] = True
    return out


def _answer_score(lines: list[str], task: Any, answer: str, score: dict[str, float]) -> float:
    """``answer="check"``: the last ``#`` line's answer against the task's reference (text, spaces ignored)."""
    given = [line.strip()[1:].strip() for line in lines if line.strip().startswith("#")][-1]
    reference = str(getattr(task, "reference", "")).strip()
    return score["true"] if given.replace(" ", "") == reference.replace(" ", "") else score["false"]


# -------------------------------------------------------------------------------------------------- prm
#
# A PRM folder is read by one of PRM_READERS (``reader`` option): how its model is loaded and checked, and how it
# turns a batch's steps into one score per step in [-1, 1].

_PRM_LOCK = threading.Lock()
_PRM_CACHE: dict[tuple[str, str, str, str], tuple[Any, Any]] = {}


@dataclass(frozen=True)
class PrmReader:
    """``auto_class``: the transformers Auto class the folder loads with; ``check(folder, config, tokenizer)``
    raises a UserError when the folder is not what the reader reads; ``score(model, prm_tokenizer, rows, ...)``
    gives, per row of ``rows`` (row index, step texts, step end offsets, task), one score per step."""

    auto_class: str
    check: Callable[[Path, Any, Any], None]
    score: Callable[..., list[list[float]]]


PRM_READERS: dict[str, PrmReader] = {}


def load_prm(path: str, device: str = "cpu", dtype: str = "float32", reader: str = "classifier") -> tuple[Any, Any]:
    """(model, tokenizer) of a PRM folder as ``reader`` reads it, in eval mode, loaded once per (path, device, dtype,
    reader); a folder that is not one is a UserError naming it."""
    kind = _reader(reader)
    key = (str(Path(path).resolve()), str(device), str(dtype), reader)
    with _PRM_LOCK:
        if key in _PRM_CACHE:
            return _PRM_CACHE[key]
        import transformers
        from transformers import AutoConfig, AutoTokenizer

        folder = Path(path)
        if not (folder / "config.json").is_file():
            raise UserError(f"reward.process.options.path: {folder} is not a Hugging Face model folder "
                            "(no config.json)")
        config = AutoConfig.from_pretrained(folder)
        kind.check(folder, config, None)
        if dtype not in ("float32", "bfloat16", "float16"):
            raise UserError(f"reward.process.options.dtype: expected float32, bfloat16 or float16, got {dtype!r}")
        tokenizer = AutoTokenizer.from_pretrained(folder)
        if not getattr(tokenizer, "is_fast", False):
            raise UserError(f"reward.process.options.path: {folder} has a slow tokenizer; the prm source needs a fast "
                            "one (character offsets) — save the folder with a tokenizer.json")
        kind.check(folder, config, tokenizer)
        model = getattr(transformers, kind.auto_class).from_pretrained(folder, dtype=getattr(torch, dtype))
        model = model.to(device).eval()
        _PRM_CACHE[key] = (model, tokenizer)
        return model, tokenizer


def _reader(name: str) -> PrmReader:
    if name not in PRM_READERS:
        raise UserError(f"reward.process.options.reader: expected one of {', '.join(sorted(PRM_READERS))}, "
                        f"got {name!r}")
    return PRM_READERS[name]


def prompt_text(prompt: Any) -> str:
    """The text of a task's prompt: a string as it is, chat messages' contents one per line."""
    if isinstance(prompt, list):
        return "\n".join(str(m.get("content", "")) if isinstance(m, dict) else str(m) for m in prompt)
    return "" if prompt is None else str(prompt)


def token_at(offsets: list[tuple[int, int]], end: int) -> int | None:
    """The index of the token whose characters include ``end - 1`` (the one ending a text ``end`` characters long),
    skipping tokens without characters; None when no token does (cut off)."""
    for k, (lo, hi) in enumerate(offsets):
        if hi > lo and lo < end <= hi:
            return k
    return None


@register_process_source("prm")
def prm(batch: Any, responses: list[str], tasks: list[Any], tokenizer: Any, *, path: str | None = None,
        delimiter: str = "\n", joiner: str = "", device: str | None = None, dtype: str = "float32",
        batch_size: int = 16, max_length: int | None = None, reader: str = "classifier") -> ProcessRewards:
    """A process reward model's score of each step, in [-1, 1], on the step's last token. ``reader`` says what the
    folder is (``PRM_READERS``):

    - ``classifier``: a two-label token classifier (Math-Shepherd, arXiv 2312.08935: a step's score is read at its
      last token): p(good) - p(bad) at the PRM token that ends where the step's text ends, the PRM reading
      ``prompt text + joiner + response`` with its own tokenizer;
    - ``labels``: a causal LM that writes one label per step after the steps ("+" good, "-" bad), as ``steps:``
      tasks teach it (rlvr.tasks.steps; a PRM trained with ``rlvr sft`` / ``rlvr train``): asked with the task's
      prompt text and the response's steps one per line, it writes its labels greedily, and a step's score is
      p("+") - p("-") renormalised over the two labels where it writes that step's label.

    Inputs are left-truncated to ``max_length`` (or the model's context); a step cut off scores 0. Loaded once per
    folder."""
    if not path:
        raise UserError("the prm source needs reward.process.options.path (a PRM folder: a token classifier, or a "
                        "step labeller with reader: labels)")
    kind = _reader(reader)
    out = _empty(batch)
    model, prm_tokenizer = load_prm(str(path), str(device or batch.response_ids.device), dtype, reader)
    limit = int(max_length or getattr(model.config, "max_position_embeddings", 0) or 4096)
    rows = []  # (row, response positions of the step ends, (response text, step texts, step end offsets, task))
    for i, (ids, positions) in enumerate(_rows(batch)):
        spans, ends = _spans_and_ends(tokenizer, ids, delimiter, with_ends=True)
        if spans:
            text = tokenizer.decode(ids, skip_special_tokens=True, clean_up_tokenization_spaces=False)
            steps = [t for _, _, t in spans]
            rows.append((i, [positions[last] for _, last, _ in spans], (text, steps, ends, tasks[i])))
    chunk_size = max(1, int(batch_size))
    for b in range(0, len(rows), chunk_size):
        chunk = rows[b:b + chunk_size]
        scores = kind.score(model, prm_tokenizer, [row for _, _, row in chunk], limit=limit, joiner=joiner,
                            delimiter=delimiter)
        for (i, step_positions, _), row_scores in zip(chunk, scores):
            for position, value in zip(step_positions, row_scores):
                out.values[i, position] = float(value)
                out.step_end[i, position] = True
    return out


def _padded(sequences: list[list[int]], pad: int, left: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(s) for s in sequences)
    ids = torch.full((len(sequences), width), pad, dtype=torch.long)
    mask = torch.zeros((len(sequences), width), dtype=torch.long)
    for r, s in enumerate(sequences):
        where = slice(width - len(s), width) if left else slice(0, len(s))
        ids[r, where], mask[r, where] = torch.tensor(s, dtype=torch.long), 1
    return ids, mask


def _pad_id(prm_tokenizer: Any) -> int:
    return prm_tokenizer.pad_token_id if prm_tokenizer.pad_token_id is not None else 0


# ------------------------------------------------------------------------------- reader: a token classifier

def _check_classifier(folder: Path, config: Any, tokenizer: Any) -> None:
    if not any(a.endswith("ForTokenClassification") for a in (config.architectures or [])):
        raise UserError(f"reward.process.options.path: {folder} holds {', '.join(config.architectures or ['?'])}, "
                        "not a token-classification model (AutoModelForTokenClassification); a step labeller trained "
                        "with rlvr on steps: tasks is read with reward.process.options.reader=labels")
    if config.num_labels != 2:
        raise UserError(f"reward.process.options.path: {folder} has {config.num_labels} labels; a process reward "
                        "model here has 2 (0: bad step, 1: good step)")


def _score_classifier(model: Any, prm_tokenizer: Any, rows: list[tuple[str, list[str], list[int], Any]], *,
                      limit: int, joiner: str, delimiter: str) -> list[list[float]]:
    jobs = []  # (PRM token ids, PRM token index of each step end)
    for response, _, ends, task in rows:
        head = prompt_text(task.prompt) + joiner
        enc = prm_tokenizer(head + response, return_offsets_mapping=True)
        prm_ids, offsets = enc["input_ids"][-limit:], [tuple(o) for o in enc["offset_mapping"][-limit:]]
        jobs.append((prm_ids, [token_at(offsets, len(head) + end) for end in ends]))
    input_ids, attention = _padded([j[0] for j in jobs], _pad_id(prm_tokenizer))
    device = next(model.parameters()).device
    with _PRM_LOCK, torch.no_grad():
        logits = model(input_ids=input_ids.to(device), attention_mask=attention.to(device)).logits
    probs = torch.softmax(logits.float(), dim=-1)
    scores = (probs[..., 1] - probs[..., 0]).cpu()
    return [[float(scores[r, k]) if k is not None else 0.0 for k in at] for r, (_, at) in enumerate(jobs)]


PRM_READERS["classifier"] = PrmReader("AutoModelForTokenClassification", _check_classifier, _score_classifier)


# ------------------------------------------------------------------------------ reader: a step labeller (LM)

def _label_ids(tokenizer: Any) -> tuple[int, int] | None:
    """The token ids of the good and bad labels, when each is one token of ``tokenizer``."""
    from rlvr.tasks.steps import BAD, GOOD

    ids = [tokenizer(label, add_special_tokens=False)["input_ids"] for label in (GOOD, BAD)]
    return (ids[0][0], ids[1][0]) if all(len(x) == 1 for x in ids) else None


def _check_labeller(folder: Path, config: Any, tokenizer: Any) -> None:
    if not any(a.endswith("ForCausalLM") for a in (config.architectures or [])):
        raise UserError(f"reward.process.options.path: {folder} holds {', '.join(config.architectures or ['?'])}; "
                        "reader: labels reads a causal LM (AutoModelForCausalLM) that writes step labels")
    if tokenizer is not None and _label_ids(tokenizer) is None:
        raise UserError(f"reward.process.options.path: {folder}'s tokenizer does not spell the step labels '+' and "
                        "'-' as one token each; reader: labels reads one label token per step")


def _score_labeller(model: Any, prm_tokenizer: Any, rows: list[tuple[str, list[str], list[int], Any]], *,
                    limit: int, joiner: str, delimiter: str) -> list[list[float]]:
    """Greedy labels, one per step, each step's score p(+) - p(-) over the two label tokens where it is written: one
    forward over the prompts, then one cached token per row and step, so a response of S steps costs its prompt plus
    S tokens (equal, to float rounding, to re-reading the whole prefix per step)."""
    from rlvr.tasks.steps import labelling_prompt

    good, bad = _label_ids(prm_tokenizer)
    steps = [[" ".join(text.replace(delimiter, "\n").split("\n")).strip() for text in texts] for _, texts, _, _ in rows]
    longest = max(len(s) for s in steps)
    room = max(1, limit - longest)  # the prompt is cut from the left so that every label fits in the context
    sequences = [list(prm_tokenizer(labelling_prompt(prompt_text(task.prompt), lines))["input_ids"])[-room:]
                 for (_, _, _, task), lines in zip(rows, steps)]
    device = next(model.parameters()).device
    scores: list[list[float]] = [[] for _ in rows]
    input_ids, attention = _padded(sequences, _pad_id(prm_tokenizer), left=True)
    positions = (attention.cumsum(-1) - 1).clamp(min=0)
    input_ids, attention, positions = input_ids.to(device), attention.to(device), positions.to(device)
    past = None
    # One prefill, then one new token per step over the kept keys and values: the tokens run through the model grow
    # linearly with the steps (re-running the growing prefix per step costs steps x its length).
    for step in range(longest):
        with _PRM_LOCK, torch.no_grad():
            out = model(input_ids=input_ids, attention_mask=attention, position_ids=positions, past_key_values=past,
                        use_cache=True)
        logits = out.logits[:, -1]
        pair = torch.softmax(logits[:, [good, bad]].float(), dim=-1).cpu()
        labels = []
        for r in range(len(rows)):
            if len(scores[r]) < len(steps[r]):
                scores[r].append(float(pair[r, 0] - pair[r, 1]))
            labels.append(good if pair[r, 0] >= pair[r, 1] else bad)
        if step == longest - 1:
            break
        past = getattr(out, "past_key_values", None)
        if past is None:
            raise UserError("reward.process.options.path: the step labeller returned no key/value cache "
                            "(use_cache=True); reader: labels needs a causal LM that keeps one")
        attention = torch.cat([attention, attention.new_ones((len(rows), 1))], dim=-1)
        positions = positions[:, -1:] + 1
        input_ids = torch.tensor(labels, dtype=torch.long, device=device).unsqueeze(-1)
    return scores


PRM_READERS["labels"] = PrmReader("AutoModelForCausalLM", _check_labeller, _score_labeller)
