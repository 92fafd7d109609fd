"""The ``hf`` engine: batched sampling from a Hugging Face causal LM with its KV cache, in-process.

It shares the trainer's model object, so syncing weights is a reference swap and its log-probs are the
trainer's own (up to kernel rounding), fit to serve as the old policy's for a single update per batch. Rows that finish early drop out of
the batch, so the cost of a step follows the live responses, not the longest one.

With ``SamplingParams.temperature_schedule`` (EAD, rlvr.rollout.temperature) position t is sampled at
``temperature * tau_t`` and its log-prob and entropy are those of that distribution: the behaviour policy, which then
differs from the trainer's (a run must take its old log-probs from its own forward and correct with TIS).

Vision-language models: ``generate(prompts, params, images=...)`` takes each prompt's image inputs (a dict of the
processor's tensors, rlvr.models.prompts.encode_multimodal; {} or None for a text prompt). They are passed on the
prefill call only (the KV cache holds the image tokens' states afterwards), each distinct (prompt, image) is
prefilled once and its cache copied to its n samples, and positions are the model's own (Qwen2-VL's 3-D M-RoPE).
Image placeholder tokens are never sampled (probability 0, as in the trainer's forward).
"""

from __future__ import annotations

import torch

from rlvr.models.loading import check_context
from rlvr.models.multimodal import (decode_positions, merge_image_inputs, model_positions, next_positions,
                                    placeholder_ids, suppress_placeholders)
from rlvr.rollout.base import RolloutBatch, SamplingParams
from rlvr.rollout.llama_decoder import LlamaDecoder


def left_pad(sequences: list[list[int]], pad_id: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(s) for s in sequences)
    ids = torch.full((len(sequences), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(sequences), width), dtype=torch.long)
    for row, seq in enumerate(sequences):
        if seq:
            ids[row, width - len(seq):] = torch.tensor(seq, dtype=torch.long)
            mask[row, width - len(seq):] = 1
    return ids.to(device), mask.to(device)


def filter_logits(logits: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    """Keep the top_k largest logits and the smallest set whose probability reaches top_p; the rest -> -inf."""
    if top_k and top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, descending=True, dim=-1)
        cumulative = torch.softmax(sorted_logits, dim=-1).cumsum(-1)
        drop_sorted = cumulative - torch.softmax(sorted_logits, dim=-1) >= top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


class HFEngine:
    logprobs_serve_as_old_policy = True

    def __init__(self, model: torch.nn.Module, *, pad_id: int, eos_ids: list[int] | int, batch_size: int = 0,
                 fast: bool = True):
        self.model = model
        self.pad_id = pad_id
        self.eos_ids = torch.tensor([eos_ids] if isinstance(eos_ids, int) else list(eos_ids), dtype=torch.long)
        self.batch_size = batch_size
        self.fast = fast  # sample Llama-family models with llama_decoder.LlamaDecoder (same function, less overhead)
        self.idle_fraction = 0.25  # lean decoder: finished rows leave the batch once they are this share of it

    def sync_weights(self, model: torch.nn.Module) -> None:
        self.model = model

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def generate(self, prompts: list[list[int]], params: SamplingParams,
                 images: list[dict[str, torch.Tensor] | None] | None = None) -> RolloutBatch:
        check_context(self.model, max((len(p) for p in prompts), default=0), params.max_new_tokens)
        if images is not None and len(images) != len(prompts):
            raise ValueError(f"{len(images)} image entries for {len(prompts)} prompts")
        per_prompt = [{k: v.to(self.device) for k, v in (e or {}).items()} for e in images] if images else None
        if per_prompt is not None and not any(per_prompt):
            per_prompt = None
        expanded = [p for p in prompts for _ in range(params.n)]
        expanded_images = [e for e in per_prompt for _ in range(params.n)] if per_prompt else None
        chunk = self.batch_size or len(expanded)
        parts = [self._generate_chunk(expanded[i:i + chunk], params,
                                      expanded_images[i:i + chunk] if expanded_images else None)
                 for i in range(0, len(expanded), chunk)]
        prompt_ids, prompt_mask = left_pad(expanded, self.pad_id, self.device)
        width = max(p[0].shape[1] for p in parts)

        def cat(k: int, fill) -> torch.Tensor:
            return torch.cat([torch.nn.functional.pad(p[k], (0, width - p[k].shape[1]), value=fill) for p in parts])

        response_ids, response_mask, logprobs, entropy = cat(0, self.pad_id), cat(1, 0), cat(2, 0.0), cat(4, 0.0)
        truncated = torch.cat([p[3] for p in parts])
        group_index = torch.arange(len(prompts), device=self.device).repeat_interleave(params.n)
        batch = RolloutBatch(prompt_ids, prompt_mask, response_ids, response_mask, logprobs, truncated, group_index,
                             entropy)
        if per_prompt is not None:
            batch.prompt_images = per_prompt
            has = torch.tensor([bool(e) for e in per_prompt], device=self.device)
            batch.image_index = torch.where(has, torch.arange(len(prompts), device=self.device), -1
                                            ).repeat_interleave(params.n)
        return batch

    def _prefill_with_images(self, ids, attn, positions, images: list[dict[str, torch.Tensor]]):
        """The cache and last logits of a prefill with image inputs, each distinct (prompt, image) computed once."""
        first: dict[tuple, int] = {}
        keys = [(tuple(row.tolist()), id(image)) for row, image in zip(ids, images)]
        expand = torch.tensor([first.setdefault(key, len(first)) for key in keys], device=ids.device)
        unique_rows = torch.zeros(len(first), dtype=torch.long, device=ids.device)
        unique_rows[expand] = torch.arange(len(keys), device=ids.device)
        rows = unique_rows.tolist()
        out = self.model(input_ids=ids[unique_rows], attention_mask=attn[unique_rows],
                         position_ids=positions[..., unique_rows, :], use_cache=True, logits_to_keep=1,
                         **merge_image_inputs([images[r] for r in rows]))
        cache, logits = out.past_key_values, out.logits[:, -1, :].float()
        if len(first) < len(keys):
            cache.batch_select_indices(expand)
            logits = logits[expand]
        return cache, logits

    @torch.inference_mode()
    def _generate_chunk(self, prompts: list[list[int]], params: SamplingParams,
                        images: list[dict[str, torch.Tensor]] | None = None):
        model, device = self.model, self.device
        was_training = model.training
        model.eval()
        ids, attn = left_pad(prompts, self.pad_id, device)
        n = ids.shape[0]
        eos = self.eos_ids.to(device)
        positions = model_positions(model, ids, attn, merge_image_inputs(images or []))
        if images is not None:
            decoder = None
            cache, logits = self._prefill_with_images(ids, attn, positions, images)
        elif self.fast and LlamaDecoder.supports(model, reach=ids.shape[1] + params.max_new_tokens):
            # the n samples of a prompt share its prefix: run each distinct prompt once, then copy its cache
            first: dict[tuple[int, ...], int] = {}
            expand = torch.tensor([first.setdefault(tuple(p), len(first)) for p in prompts], device=device)
            unique_rows = torch.zeros(len(first), dtype=torch.long, device=device)
            unique_rows[expand] = torch.arange(n, device=device)  # any one row of each distinct prompt
            decoder = LlamaDecoder(model, len(first), ids.shape[1] + params.max_new_tokens)
            logits = decoder.forward(ids[unique_rows], positions[unique_rows], attn[unique_rows].bool()).float()
            if len(first) < n:
                decoder.select(expand)
                logits = logits[expand]
            cache = None
        else:
            decoder = None
            out = model(input_ids=ids, attention_mask=attn, position_ids=positions, use_cache=True, logits_to_keep=1)
            cache, logits = out.past_key_values, out.logits[:, -1, :].float()
        next_pos = next_positions(positions)

        tokens = torch.full((n, params.max_new_tokens), self.pad_id, dtype=torch.long, device=device)
        logprobs = torch.zeros((n, params.max_new_tokens), dtype=torch.float32, device=device)
        entropies = torch.zeros((n, params.max_new_tokens), dtype=torch.float32, device=device)
        lengths = torch.zeros(n, dtype=torch.long, device=device)
        finished = torch.zeros(n, dtype=torch.bool, device=device)
        present = torch.arange(n, device=device)  # rows of the full batch in the model's batch
        generating = torch.ones(n, dtype=torch.bool, device=device)  # which of those are still generating
        schedule = params.temperature_schedule if params.temperature != 0 else None
        suppressed = placeholder_ids(model)  # a VLM never samples an image placeholder (multimodal.placeholder_ids)
        for t in range(params.max_new_tokens):
            logits = suppress_placeholders(logits, suppressed)
            # EAD: every row is at position t, so one temperature per step; log-probs are logged at it (behaviour)
            temperature = params.temperature * schedule.tau(t) if schedule is not None else params.temperature
            scaled = logits if temperature == 0 else logits / temperature
            log_dist = torch.log_softmax(scaled, dim=-1)
            if params.temperature == 0:
                choice = logits.argmax(-1)
            else:
                probs = torch.softmax(filter_logits(scaled, params.top_k, params.top_p), dim=-1)
                choice = torch.multinomial(probs, 1).squeeze(-1)
            rows = present[generating]
            tokens[rows, t] = choice[generating]
            logprobs[rows, t] = log_dist.gather(-1, choice.unsqueeze(-1)).squeeze(-1)[generating]
            entropies[rows, t] = -(log_dist.exp() * log_dist).sum(-1)[generating]
            lengths[rows] = t + 1
            done = torch.isin(choice, eos) & generating
            finished[present[done]] = True
            generating = generating & ~done
            if t + 1 == params.max_new_tokens or not bool(generating.any()):
                break
            # Finished rows leave the model's batch. Each removal copies the KV cache, so the lean decoder
            # waits until a quarter of its rows are done (it computes a few idle rows meanwhile).
            idle = int((~generating).sum())
            if idle and idle >= (max(1, int(len(present) * self.idle_fraction)) if decoder is not None else 1):
                kept = generating.nonzero().squeeze(-1)
                present, choice, attn, next_pos = present[kept], choice[kept], attn[kept], next_pos[kept]
                generating = generating[kept]
                decoder.select(kept) if decoder is not None else cache.batch_select_indices(kept)
            if decoder is not None:
                logits = decoder.forward(choice.unsqueeze(-1), next_pos.unsqueeze(-1),
                                         torch.ones_like(choice, dtype=torch.bool).unsqueeze(-1)).float()
            else:
                attn = torch.cat([attn, attn.new_ones((attn.shape[0], 1))], dim=1)
                out = model(
                    input_ids=choice.unsqueeze(-1),
                    attention_mask=attn,
                    position_ids=decode_positions(model, next_pos),
                    past_key_values=cache,
                    use_cache=True,
                )
                cache, logits = out.past_key_values, out.logits[:, -1, :].float()
            next_pos = next_pos + 1
        model.train(was_training)
        width = max(int(lengths.max()), 1)
        response_mask = (torch.arange(width, device=device).unsqueeze(0) < lengths.unsqueeze(1)).long()
        return (tokens[:, :width].clone(), response_mask, logprobs[:, :width].clone(), ~finished,
                entropies[:, :width].clone() * response_mask)
