"""The built-in collection stages (rlvr.rollout.stages) and the order they run in: stages that add rows (hints,
expert traces, extra rollouts) first, then the step rewards of every row, then the filters that read them, then the
verification tasks built from the step's own answers. Stages a plug-in registers run after these."""

from rlvr.rollout import stage_hints, stage_experts, stage_dars, stage_process, stage_prof, stage_self_verify  # noqa: F401

ORDER = ("hints", "experts", "dars", "process", "prof", "self_verify")
