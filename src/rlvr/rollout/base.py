"""The interface every generation engine implements: prompts in, sampled responses with masks and log-probs out."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import torch

from rlvr.models.multimodal import merge_image_inputs

if TYPE_CHECKING:
    from rlvr.rollout.temperature import TemperatureSchedule


@dataclass(frozen=True)
class SamplingParams:
    n: int = 1  # responses per prompt (GRPO's group size)
    max_new_tokens: int = 32
    temperature: float = 1.0  # 0 means greedy
    top_p: float = 1.0
    top_k: int = 0  # 0 = off
    # EAD: position t is sampled at temperature * schedule.tau(t), the schedule resolved at the training step
    # (rlvr.rollout.temperature); None = the fixed temperature. Engines that cannot vary it refuse it.
    temperature_schedule: "TemperatureSchedule | None" = None


@dataclass
class RolloutBatch:
    """N = prompts x n responses; responses of one prompt are contiguous (rows i*n .. i*n+n-1).

    prompt_ids/prompt_mask are left-padded [N, P]; response_ids/response_mask right-padded [N, T], the mask
    covering every generated token up to and including EOS. logprobs [N, T] are the sampling log-probs of
    the temperature-scaled distribution (0 on padding); entropy [N, T], when the engine provides it, is that
    distribution's entropy at each position (so the trainer needs no forward pass to log it). truncated[N] marks
    responses that hit max_new_tokens without EOS.

    response_mask is the ATTENTION mask of the response positions; loss_mask [N, T] marks the positions the
    policy is trained on. They differ when a response holds tokens the model did not choose (tool or environment
    output, attended to but never trained on) or a filter drops a row from the loss; an engine that does not set
    loss_mask gets a copy of response_mask.

    What collection stages add (all optional, kept through ``select_rows`` and ``concat_batches``):
    row_kind [N] says where each row came from (rlvr.rollout.provenance; 0 = on-policy); behaviour_prompt_ids /
    behaviour_prompt_mask [N, P'] are the prompts the rows were SAMPLED with where they differ from the prompts they
    are trained on (Guide: the hinted prompt; the old policy's log-probs are taken in this context);
    step_rewards [N, T] and step_end [N, T] are process rewards placed on the last token of each step
    (rlvr.rewards.process).

    Images (vision-language models): ``prompt_images`` holds the image inputs of each distinct prompt ONCE (a dict of
    the processor's tensors, e.g. ``pixel_values``; {} for a text prompt) and ``image_index`` [N] says which entry
    each row's prompt has (-1: none), so the n rows of a group share one copy; ``image_inputs(rows)`` gathers them
    for a forward pass over those rows.
    """

    prompt_ids: torch.Tensor
    prompt_mask: torch.Tensor
    response_ids: torch.Tensor
    response_mask: torch.Tensor
    logprobs: torch.Tensor
    truncated: torch.Tensor
    group_index: torch.Tensor
    entropy: torch.Tensor | None = None  # [N, T] entropy of the temperature-scaled sampling distribution (0 on padding)
    loss_mask: torch.Tensor | None = None  # [N, T] positions trained on (None -> a copy of response_mask)
    row_kind: torch.Tensor | None = None  # [N] long, rlvr.rollout.provenance codes (None -> all on-policy)
    behaviour_prompt_ids: torch.Tensor | None = None  # [N, P'] left-padded prompts the rows were sampled with
    behaviour_prompt_mask: torch.Tensor | None = None
    step_rewards: torch.Tensor | None = None  # [N, T] float, each step's reward on its last token
    step_end: torch.Tensor | None = None  # [N, T] bool, the last token of each step
    prompt_images: list[dict[str, torch.Tensor]] | None = None  # image inputs per distinct prompt (see above)
    image_index: torch.Tensor | None = None  # [N] long, each row's entry of prompt_images (-1: no images)

    def __post_init__(self) -> None:
        if self.loss_mask is None:
            self.loss_mask = self.response_mask.clone()
        if self.row_kind is None:
            self.row_kind = torch.zeros(self.response_ids.shape[0], dtype=torch.long, device=self.response_ids.device)

    @property
    def size(self) -> int:
        return self.response_ids.shape[0]

    def image_inputs(self, rows: torch.Tensor) -> dict[str, torch.Tensor]:
        """The model's image inputs (pixel values and what the model family adds) for ``rows``; empty for text."""
        if self.prompt_images is None or self.image_index is None:
            return {}
        entries = self.image_index[rows].tolist()
        return merge_image_inputs([self.prompt_images[i] if i >= 0 else {} for i in entries])


class RolloutEngine(Protocol):
    def generate(self, prompts: list[list[int]], params: SamplingParams) -> RolloutBatch:
        """Sample ``params.n`` responses for each tokenized prompt."""
        ...

    def sync_weights(self, model: torch.nn.Module) -> None:
        """Make the engine sample from the trainer's current weights."""
        ...


def _pad_right(t: torch.Tensor, width: int, value) -> torch.Tensor:
    return torch.nn.functional.pad(t, (0, width - t.shape[1]), value=value)


def _pad_left(t: torch.Tensor, width: int, value) -> torch.Tensor:
    return torch.nn.functional.pad(t, (width - t.shape[1], 0), value=value)


def _behaviour_prompts(b: RolloutBatch) -> tuple[torch.Tensor, torch.Tensor]:
    if b.behaviour_prompt_ids is None:
        return b.prompt_ids, b.prompt_mask
    return b.behaviour_prompt_ids, b.behaviour_prompt_mask


def _optional_rows(batches: list[RolloutBatch], name: str, width: int, value) -> torch.Tensor | None:
    """An optional [N, T] field of the joined batch: zeros (``value``) for batches without it; None if none has it."""
    if all(getattr(b, name) is None for b in batches):
        return None
    like = next(getattr(b, name) for b in batches if getattr(b, name) is not None)
    return torch.cat([_pad_right(getattr(b, name), width, value) if getattr(b, name) is not None
                      else torch.full((b.size, width), value, dtype=like.dtype, device=like.device) for b in batches])


def _joined_images(batches: list[RolloutBatch]) -> tuple[list | None, torch.Tensor | None]:
    """The joined batches' per-prompt image inputs and row index (entries renumbered); None if none has images."""
    if all(b.prompt_images is None for b in batches):
        return None, None
    images, index = [], []
    for b in batches:
        if b.prompt_images is None:
            index.append(torch.full((b.size,), -1, dtype=torch.long, device=b.response_ids.device))
            continue
        own = b.image_index
        index.append(torch.where(own >= 0, own + len(images), own))
        images.extend(b.prompt_images)
    return images, torch.cat(index)


def concat_batches(batches: list[RolloutBatch], pad_id: int, *, keep_groups: bool = False) -> RolloutBatch:
    """One batch from several (e.g. the generation rounds of dynamic sampling); group ids stay distinct, or with
    ``keep_groups`` stay as they are (rows that join existing groups, such as extra rollouts or expert traces)."""
    if len(batches) == 1:
        return batches[0]
    prompt_width = max(b.prompt_ids.shape[1] for b in batches)
    width = max(b.response_ids.shape[1] for b in batches)
    groups, offset = [], 0
    for b in batches:
        groups.append(b.group_index if keep_groups else b.group_index + offset)
        offset += int(b.group_index.max()) + 1 if b.size else 0
    images, image_index = _joined_images(batches)
    behaviour = None
    if any(b.behaviour_prompt_ids is not None for b in batches):
        behaviour_width = max(_behaviour_prompts(b)[0].shape[1] for b in batches)
        behaviour = (torch.cat([_pad_left(_behaviour_prompts(b)[0], behaviour_width, pad_id) for b in batches]),
                     torch.cat([_pad_left(_behaviour_prompts(b)[1], behaviour_width, 0) for b in batches]))
    return RolloutBatch(
        prompt_ids=torch.cat([_pad_left(b.prompt_ids, prompt_width, pad_id) for b in batches]),
        prompt_mask=torch.cat([_pad_left(b.prompt_mask, prompt_width, 0) for b in batches]),
        response_ids=torch.cat([_pad_right(b.response_ids, width, pad_id) for b in batches]),
        response_mask=torch.cat([_pad_right(b.response_mask, width, 0) for b in batches]),
        logprobs=torch.cat([_pad_right(b.logprobs, width, 0.0) for b in batches]),
        truncated=torch.cat([b.truncated for b in batches]),
        group_index=torch.cat(groups),
        entropy=torch.cat([_pad_right(b.entropy, width, 0.0) for b in batches])
        if all(b.entropy is not None for b in batches) else None,
        loss_mask=torch.cat([_pad_right(b.loss_mask, width, 0) for b in batches]),
        row_kind=torch.cat([b.row_kind for b in batches]),
        behaviour_prompt_ids=behaviour[0] if behaviour else None,
        behaviour_prompt_mask=behaviour[1] if behaviour else None,
        step_rewards=_optional_rows(batches, "step_rewards", width, 0.0),
        step_end=_optional_rows(batches, "step_end", width, False),
        prompt_images=images,
        image_index=image_index,
    )


def select_rows(batch: RolloutBatch, rows: torch.Tensor) -> RolloutBatch:
    """The sub-batch of the given row indices, padding trimmed to its longest prompt and response."""
    response_mask = batch.response_mask[rows]
    prompt_mask = batch.prompt_mask[rows]
    width = max(int(response_mask.sum(-1).max()), 1) if rows.numel() else 1
    prompt_start = int((prompt_mask.sum(0) == 0).sum()) if rows.numel() else 0  # all-pad leading columns
    return RolloutBatch(
        prompt_ids=batch.prompt_ids[rows, prompt_start:],
        prompt_mask=prompt_mask[:, prompt_start:],
        response_ids=batch.response_ids[rows, :width],
        response_mask=response_mask[:, :width],
        logprobs=batch.logprobs[rows, :width],
        truncated=batch.truncated[rows],
        group_index=batch.group_index[rows],
        entropy=batch.entropy[rows, :width] if batch.entropy is not None else None,
        loss_mask=batch.loss_mask[rows, :width],
        row_kind=batch.row_kind[rows],
        behaviour_prompt_ids=_trim_left(batch.behaviour_prompt_ids[rows], batch.behaviour_prompt_mask[rows])[0]
        if batch.behaviour_prompt_ids is not None else None,
        behaviour_prompt_mask=_trim_left(batch.behaviour_prompt_ids[rows], batch.behaviour_prompt_mask[rows])[1]
        if batch.behaviour_prompt_ids is not None else None,
        step_rewards=batch.step_rewards[rows, :width] if batch.step_rewards is not None else None,
        step_end=batch.step_end[rows, :width] if batch.step_end is not None else None,
        **_selected_images(batch, rows),
    )


def _selected_images(batch: RolloutBatch, rows: torch.Tensor) -> dict:
    """prompt_images / image_index of the sub-batch ``rows``: only the entries its rows use, renumbered."""
    if batch.prompt_images is None or batch.image_index is None:
        return {}
    own = batch.image_index[rows]
    used = sorted({int(i) for i in own.tolist() if i >= 0})
    renumber = {old: new for new, old in enumerate(used)}
    index = torch.tensor([renumber.get(int(i), -1) for i in own.tolist()], dtype=torch.long, device=own.device)
    return {"prompt_images": [batch.prompt_images[i] for i in used], "image_index": index}


def _trim_left(ids: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-padded prompts without the columns that are padding in every row."""
    start = int((mask.sum(0) == 0).sum()) if ids.shape[0] else 0
    return ids[:, start:], mask[:, start:]
