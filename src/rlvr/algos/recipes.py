"""Named algorithm presets: each recipe is config (algo.* keys), not code.

``algo.recipe=dapo`` fills every algo key the user did not set with the recipe's value; keys given
explicitly (in the file or as overrides) win. docs/algorithms.md has one row per recipe.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Recipe:
    name: str
    paper: str
    equation: str
    settings: dict[str, Any] = field(default_factory=dict)


# Keys every recipe states, so a recipe means the same thing whatever the defaults are.
_BASE: dict[str, Any] = {
    "advantage": "grpo", "loss": "ppo", "agg": "token-mean", "clip_low": 0.2, "clip_high": 0.2, "dual_clip": None,
    "kl_coef": 0.0, "kl_kind": "k3", "kl_placement": "loss", "entropy_coef": 0.0, "entropy_mask_rho": None,
    "dynamic_sampling": False, "overlong_filter": False, "overlong_buffer_frac": 0.0,
    "ppo_epochs": 1, "mini_batches": 1,
}


def _recipe(name: str, paper: str, equation: str, **settings: Any) -> Recipe:
    return Recipe(name, paper, equation, {**_BASE, **settings})


# DAPO's update structure (Yu et al., 2025, Sec. 4.1): 512 prompts per rollout batch, mini-batches of 32 prompts, so 16
# gradient updates per rollout batch; scaled to rlvr's batches as 16 mini-batches of one pass.
_DAPO = dict(clip_high=0.28, agg="token-mean", dynamic_sampling=True, overlong_buffer_frac=0.2, overlong_penalty_factor=1.0,
             mini_batches=16)

# Dr. GRPO's update structure, from the authors' script (sail-sg/understand-r1-zero, README.md "python
# train_zero_math.py" and examples/qwen2.5-math-1.5b.sh, run by oat's PPOLearner, oat/algorithms/ppo.py):
# --rollout_batch_size 128 prompts x --num_samples 8 = 1024 responses per rollout batch, --train_batch_size 128,
# --num_ppo_epochs 1, cliprange 0.2 (oat's default), --beta 0: 1024 / 128 = 8 optimizer steps per rollout batch,
# the rows permuted once per epoch.
_DR_GRPO_UPDATES = dict(ppo_epochs=1, mini_batches=8, clip_low=0.2, clip_high=0.2)

# REINFORCE++'s update structure, from OpenRLHF's scripts (examples/scripts/train_reinforce_llama_ray_hybrid_engine.sh
# and train_reinforce_baseline_llama_ray_hybrid_engine.sh, as of commit 7d3e07bf, 2025-05): --rollout_batch_size
# 1024 x --n_samples_per_prompt 1 (the baseline variant: 128 x 8), --train_batch_size 128, --max_epochs 1, the
# actor's PPO-clip loss (openrlhf/models/loss.py PolicyLoss, a token mean) with --eps_clip 0.2 (the default of
# openrlhf/cli/train_ppo_ray.py): 8 clipped mini-batch updates per rollout batch.
_REINFORCE_PP_UPDATES = dict(ppo_epochs=1, mini_batches=8, clip_low=0.2, clip_high=0.2, agg="token-mean")

RECIPES: dict[str, Recipe] = {r.name: r for r in [
    _recipe("grpo", "Shao et al., 2024, DeepSeekMath (arXiv:2402.03300)",
            "Eq. 3: clipped surrogate with group-normalised advantages (r - mean)/std, per-sequence token mean, k3 KL in the loss (beta 0.04); Sec. 4.2: a single policy update per exploration stage",
            agg="seq-mean-token-mean", kl_coef=0.04, kl_kind="k3"),
    _recipe("dr_grpo", "Liu et al., 2025, Understanding R1-Zero-Like Training (arXiv:2503.20783)",
            "Sec. 3.1: advantages r - mean without std scaling; token sums over a constant length, rollout.max_new_tokens (no per-sequence length normaliser); update structure of the authors' script (sail-sg/understand-r1-zero README.md and examples/qwen2.5-math-1.5b.sh on oat's PPOLearner: rollout_batch_size 128 x num_samples 8, train_batch_size 128, num_ppo_epochs 1, cliprange 0.2): 8 optimizer steps per rollout batch",
            advantage="dr_grpo", agg="seq-mean-token-sum-norm", **_DR_GRPO_UPDATES),
    _recipe("dapo", "Yu et al., 2025, DAPO (arXiv:2503.14476)",
            "Eq. 8: clip-higher (0.2/0.28), token-level mean, dynamic sampling of informative groups (Eq. 11), soft overlong punishment (Eq. 13; 4096 of 20480 tokens = 0.2), no KL; Sec. 4.1: 16 gradient updates per rollout batch (mini_batches=16)",
            **_DAPO),
    _recipe("gspo", "Zheng et al., 2025, Group Sequence Policy Optimization (arXiv:2507.18071)",
            "Eqs. 5-7: sequence-level ratio (length-normalised), clipped at 3e-4/4e-4, group-normalised advantages; Sec. 5.1: each rollout batch split into 4 mini-batches for gradient updates",
            loss="gspo", agg="seq-mean-token-mean", clip_low=3e-4, clip_high=4e-4, mini_batches=4),
    _recipe("cispo", "MiniMax, 2025, MiniMax-M1 (arXiv:2506.13585)",
            "Eq. 4: stop-gradient clipped importance weight times A log-prob; no lower bound (clip_low 1.0), only the upper bound tuned; the paper's off-policy updates per batch are not stated, so 4 mini-batches let the weight act",
            loss="cispo", clip_low=1.0, clip_high=0.28, mini_batches=4),
    _recipe("rloo", "Ahmadian et al., 2024, Back to Basics: REINFORCE-style optimization (arXiv:2402.14740)",
            "Eq. 6: leave-one-out baseline r_i - mean of the other k-1 samples; sequence-level REINFORCE (token sums), on-policy: one update per batch",
            advantage="rloo", agg="seq-mean-token-sum"),
    _recipe("reinforce_pp", "Hu et al., 2025, REINFORCE++ (arXiv:2501.03262)",
            "Sec. 3: REINFORCE++, no per-prompt baseline: rewards minus the batch mean, plus the return-to-go of a k1 KL per-token reward penalty (beta 0.001, tuned in the paper), normalised over the global batch; update structure of OpenRLHF's examples/scripts/train_reinforce_llama_ray_hybrid_engine.sh (rollout_batch_size 1024 x 1 sample, train_batch_size 128, max_epochs 1, PPO-clip eps_clip 0.2, token mean): 8 clipped mini-batch updates per rollout batch",
            advantage="reinforce_pp", kl_placement="reward", kl_kind="k1", kl_coef=0.001, **_REINFORCE_PP_UPDATES),
    _recipe("reinforce_pp_baseline", "Hu et al., 2025, REINFORCE++ (arXiv:2501.03262)",
            "Sec. 3: REINFORCE++-baseline for group sampling: group-mean baseline, then global normalisation; k1 KL as a per-token reward penalty (beta 0.001); update structure of OpenRLHF's examples/scripts/train_reinforce_baseline_llama_ray_hybrid_engine.sh (rollout_batch_size 128 x 8 samples, train_batch_size 128, max_epochs 1, PPO-clip eps_clip 0.2, token mean): 8 clipped mini-batch updates per rollout batch",
            advantage="reinforce_pp_baseline", kl_placement="reward", kl_kind="k1", kl_coef=0.001, **_REINFORCE_PP_UPDATES),
    _recipe("remax", "Li et al., 2023, ReMax (arXiv:2310.10505)",
            "Algorithm 1: REINFORCE with the reward of the greedy response as baseline, A = r - r_greedy",
            advantage="remax", agg="seq-mean-token-sum"),
    _recipe("ppo", "Schulman et al., 2017, PPO (arXiv:1707.06347); Ouyang et al., 2022 (arXiv:2203.02155)",
            "Eq. 7 clipped surrogate with GAE advantages (Schulman et al., 2016, Eq. 16) from a learned value head, clipped value loss, k1 KL as a per-token reward penalty (beta 0.02 as in Ouyang et al.); Algorithm 1: K epochs of minibatch updates per batch (Table 3: 10 epochs of 32 mini-batches), scaled to 4 epochs x 4 mini-batches",
            advantage="gae", kl_placement="reward", kl_kind="k1", kl_coef=0.02, value_coef=0.5, value_clip=0.2, ppo_epochs=4,
            mini_batches=4),
    _recipe("nsr", "Zhu et al., 2025, The Surprising Effectiveness of Negative Reinforcement in LLM Reasoning (arXiv:2506.01347)",
            "NSR objective: only incorrect samples, advantage -1 (push their probability down), no baseline",
            advantage="nsr"),
    _recipe("w_reinforce", "Zhu et al., 2025, The Surprising Effectiveness of Negative Reinforcement in LLM Reasoning (arXiv:2506.01347)",
            "Weighted-REINFORCE: lambda * PSR + NSR with lambda = 0.1 (+0.1 for correct, -1 for incorrect samples)",
            advantage="w_reinforce"),
    _recipe("forking_tokens", "Wang et al., 2025, Beyond the 80/20 Rule (arXiv:2506.01939)",
            "DAPO with the policy gradient restricted to the top 20% highest-entropy tokens of each batch (rho = 0.2)",
            **_DAPO, entropy_mask_rho=0.2),
    # the seed papers' families that change the step (docs/algorithms.md, "Opening the step" and "Collection stages")
    _recipe("ghpo", "Liu et al., 2025, GHPO: Adaptive Guidance for Stable and Efficient LLM Reinforcement Learning (arXiv:2507.10628)",
            "Sec. 3: a group whose every answer is wrong is sampled again with the first round(len x w) characters of the reference solution in the prompt, w = 0.25, 0.5, 0.75 in turn (released trainer hkgc-1/GHPO ghpo_trainer.py); the hinted rows replace the group and are trained in the hinted context; GRPO's loss, KL beta 0, one update per rollout batch",
            hint_stages=[0.25, 0.5, 0.75], hint_mode="replace", agg="seq-mean-token-mean"),
    _recipe("guide", "Nath et al., 2025, Adaptive Guidance Accelerates Reinforcement Learning of Reasoning Models (arXiv:2506.13923)",
            "Algorithm 1: the same trigger (all G answers wrong) and hints, but the policy is trained on the unhinted prompt through the off-context ratio pi_theta(o | q) / pi_old(o | q, h), PPO-clipped with the group advantage",
            hint_stages=[0.25, 0.5, 0.75], hint_mode="guide", agg="seq-mean-token-mean"),
    _recipe("luffy", "Yan et al., 2025, Learning to Reason under Off-Policy Guidance (arXiv:2504.14945)",
            "Sec. 3: one expert trace in each group (8 rows: 7 sampled + 1 expert, n_prefix=1 in ElliottYan/LUFFY exp_scripts/train.sh), advantages r - group mean (no std), on-policy tokens unclipped -A r, expert tokens policy-shaped -A p/(p + 0.1) (mix_core_alg.py), token sums over the constant length; entropy coefficient 0.001, no KL; 128 prompts per rollout batch in mini-batches of 64: 2 updates",
            expert_rows=1, advantage="dr_grpo", loss="mixed_policy", loss_options={"shaping": "luffy", "gamma": 0.1},
            agg="seq-mean-token-sum-norm", entropy_coef=0.001, mini_batches=2),
    _recipe("rl_plus", "Dong et al., 2025, RL-PLUS: Countering Capability Boundary Collapse of LLMs in Reinforcement Learning with Hybrid-policy Optimization (arXiv:2508.00222)",
            "Eqs. 5-7: LUFFY's group layout and on-policy term; expert tokens weighted by multiple importance sampling 2 pi_theta / (pi_old + (pi_old + 1)/2) and the exploration-based advantage A (1 - sg(pi_theta))^0.5 (YihongDong/RL-PLUS rlplus_core_alg.py); entropy 0.001, no KL; 2 updates per rollout batch",
            expert_rows=1, advantage="dr_grpo", loss="mixed_policy", loss_options={"shaping": "rl_plus", "explore_exp": 0.5},
            agg="seq-mean-token-sum-norm", entropy_coef=0.001, mini_batches=2),
    _recipe("pure", "Cheng et al., 2025, Stop Summation: Min-Form Credit Assignment Is All Process Reward Model Needs for Reasoning (arXiv:2504.15275)",
            "Sec. 4: step rewards transformed to min form (softmin weights, temperature 0.1), a leave-one-out per-token baseline, the verifiable reward solved - 1 (leave-one-out) on the last token, a k1 KL per-token reward (0.001), returns with the step ends zeroed and whitened (CJReinforce/PURE examples/scripts/train_pure.sh); step rewards from reward.process (here the rule checker arith_steps; a PRM: {source: prm}); PPO clip 0.2; 64 prompts x 4 samples in train batches of 128: 2 updates",
            **{"advantage": "pure", "kl_coef": 0.001, "kl_kind": "k1", "kl_placement": "reward", "mini_batches": 2,
               "reward.process": {"source": "arith_steps"}}),
    _recipe("prime", "Cui et al., 2025, Process Reinforcement through Implicit Rewards (arXiv:2502.01456)",
            "Sec. 3: an implicit PRM (a copy of the initial policy, its own AdamW) updated first on the batch with BCE(sigmoid(beta sum log pi_phi/pi_ref), correct), then token rewards beta (log pi_phi - log pi_ref), beta 0.05; advantages in verl recipe/prime's order: prime_norm, the masked leave-one-out of the token rewards x 5 plus the outcome's RLOO x 5, returns, whitening; PPO clip 0.2, entropy 0.001; one update per rollout batch (train batch 64 = mini-batch 64)",
            advantage="prime", implicit_prm=True, prm_beta=0.05, entropy_coef=0.001),
    _recipe("prof", "Ye et al., 2025, Beyond Correctness: Harmonizing Process and Outcome Rewards through RL Training (arXiv:2509.03403)",
            "Algorithm 1: within each group, drop the correct rollouts with the lowest mean step reward and the incorrect ones with the highest, balancing correct and incorrect (amazon-science/PROF-GRPO filter_trajectories); advantages from the outcome reward on the kept rows (GRPO); step rewards from reward.process (here arith_steps)",
            **{"prof_filter": True, "agg": "seq-mean-token-mean", "reward.process": {"source": "arith_steps"}}),
    _recipe("dars", "Yang et al., 2025, Depth-Breadth Synergy in RLVR: Unlocking LLM Reasoning Gains with Adaptive Exploration (arXiv:2508.13755)",
            "Sec. 4: a prompt at accuracy a < 0.5 gets extra rollouts joining its group, topping its cumulative advantage up to an a = 0.5 prompt's (equal treatment, with the released scripts' spread without the std: N / (4 a (1 - a)) rows in all), at most 24 more for N = 8 (yangzhch6/DARS schedule_ET with grpo_use_std=False, n_max 32: a prompt nothing solved gets the 24); advantages r - group mean without std as the released scripts run",
            dars_max_extra=24, dars_schedule="equal", dars_use_std=False, advantage="dr_grpo", agg="seq-mean-token-mean"),
    # exploration, trust regions and confidence (docs/algorithms.md, "Exploration and trust regions")
    _recipe("clip_cov", "Cui et al., 2025, The Entropy Mechanism of Reinforcement Learning for Reasoning Language Models (arXiv:2505.22617)",
            "Sec. 4: PPO's loss, with the gradient of a random max(1, floor(r N)) of the unclipped tokens whose covariance (A - mean A)(logp - mean logp) lies in (1, 5) detached, r = 2e-4 (verl core_algos compute_policy_loss_clip_cov); the released scripts' clip 1.0/1.0, dynamic sampling, 256 prompts per rollout batch in mini-batches of 32: 8 updates",
            loss="clip_cov", clip_low=1.0, clip_high=1.0, loss_options={"cov_ratio": 0.0002, "cov_lb": 1.0, "cov_ub": 5.0},
            dynamic_sampling=True, mini_batches=8),
    _recipe("kl_cov", "Cui et al., 2025, The Entropy Mechanism of Reinforcement Learning for Reasoning Language Models (arXiv:2505.22617)",
            "Sec. 4: -A r on every token (no clipping), plus beta |logp - old logp| on the top kappa N tokens by covariance, kappa 2e-3, beta 1 (verl core_algos compute_policy_loss_kl_cov); dynamic sampling; 8 updates per rollout batch",
            loss="kl_cov", loss_options={"kl_cov_ratio": 0.002, "kl_coef": 1.0}, dynamic_sampling=True, mini_batches=8),
    _recipe("lp_reg", "Low-probability Tokens Sustain Exploration in Reinforcement Learning with Verifiable Reward (arXiv:2510.03222)",
            "Eqs. 4-6: PPO's loss plus beta k3(pi_proxy || pi_theta) on the 1% lowest-probability negative-advantage tokens below their min-p proxy (kappa 0.02) of the old policy, beta 1 (CarlanLark/Lp-Reg-dev compute_policy_loss_lp_reg); the on-policy recipe's clip 1.0/9.0, one update",
            clip_low=1.0, clip_high=9.0, loss_options={"lp_reg": {"kappa": 0.02, "neg_frac": 0.01, "pos_frac": 0.0, "coef": 1.0}}),
    _recipe("dcpo", "Yang et al., 2025, DCPO: Dynamic Clipping Policy Optimization (arXiv:2509.02333)",
            "Eqs. 4-9: clip bounds from the old token probability q, 0.5 + 0.5 sqrt(max(1 - 4 eps_low/q, 0)) <= r <= 0.5 + 0.5 sqrt(1 + 4 eps_high/q), eps 0.16/0.2, capped at 10 (lime-RL/DCPO get_clip_low_high); smooth advantage standardisation over each prompt's running statistics (step_state, saved in checkpoints); sum over tokens, mean over responses; 8 updates per rollout batch",
            advantage="dcpo_sas", loss="dcpo", agg="seq-mean-token-sum", clip_low=0.16, clip_high=0.2, dual_clip=10.0, mini_batches=8),
    _recipe("ace", "Overconfident Errors Need Stronger Correction (arXiv:2602.21420)",
            "Sec. 3: for an incorrect rollout (A < 0) A <- A (1 + alpha softplus(c)), c = log pi_old(y|x) - log pi_ref(y|x) summed over the response; correct rollouts unchanged; GRPO advantages, alpha 1.0 (the paper's default not verified)",
            advantage="ace", advantage_options={"alpha": 1.0, "base": "grpo"}),
    _recipe("sapo", "Gao et al., 2025, Soft Adaptive Policy Optimization (arXiv:2511.20347)",
            "Eq. 6: a smooth gate sigma(tau (r - 1)) 4 / tau in place of the hard clip, tau_pos 1.0 for A > 0 and tau_neg 1.05 for A < 0 (verl compute_policy_loss_sapo, TRL loss_type=sapo); 8 updates per rollout batch",
            loss="sapo", agg="seq-mean-token-mean", loss_options={"tau_pos": 1.0, "tau_neg": 1.05}, mini_batches=8),
    # exploration by decoding, calibration and distillation (docs/algorithms.md, "Exploration and trust regions")
    _recipe("ead", "Yang et al., 2025, Let it Calm: Exploratory Annealed Decoding for Verifiable Reinforcement Learning (arXiv:2510.05251)",
            "Sec. 3: position t sampled at tau_t = 1 for t < c, else max(1 + tau_max - exp(t / (20 d_s)), tau_min), d_s = min(d0 + 5 s, 40000) at training step s; c 10, tau_max 1.2, tau_min 0.1, d0 25 (the authors' yangalan123/EAD-RLVR annealed_sampling.py and run script); the trained policy stays at temperature 1, decoupled TIS min(pi_old / pi_behaviour, 2) corrects for the annealed sampler; GRPO's advantages and PPO-clip loss, one update per rollout batch",
            **{"tis_cap": 2.0,
               "rollout.temperature_schedule": {"start": 10, "tau_max": 1.2, "tau_min": 0.1, "decay": 25, "length_scale": 20}}),
    _recipe("rlcr", "Damani et al., 2025, Beyond Binary Rewards: Training LMs to Reason About Their Uncertainty (arXiv:2507.16806)",
            "R_RLCR = 1[correct] - (q - 1[correct])^2 for the confidence q stated in <confidence>q</confidence> (correctness plus the negative Brier score, a bounded proper scoring rule), a missing or unparsable q scored -2 (the calibrated verifier), as the reward term rlcr that replaces the task verifier's reward (inner verifier exact: for other tasks set the term's options.inner); GRPO's advantages and PPO-clip loss, one update per rollout batch; the prompt must ask for the confidence tag",
            **{"reward.terms": [{"name": "rlcr", "verifier": "calibrated", "options": {"inner": "exact", "mode": "brier"}}]}),
    _recipe("opd", "Lu et al., 2025, On-Policy Distillation (Thinking Machines); Agarwal et al., 2024, On-Policy Distillation of Language Models (arXiv:2306.13649)",
            "per-token reward -(log pi_student(y_t) - log pi_teacher(y_t)) x algo.teacher_coef (1.0) on the student's sampled tokens, the teacher (algo.teacher, a model folder with the student's tokenizer) scoring them in a no-grad forward; advantage A_t = that reward, discount 0, plus outcome_coef (0: pure distillation) x the group-centred verifier reward; importance-sampling policy gradient with one update per rollout batch, so the PPO ratio is 1 (tinker-cookbook distillation/train_on_policy.py: kl_penalty_coef 1, kl_discount_factor 0, loss importance_sampling, num_substeps 1)",
            advantage="opd", advantage_options={"outcome_coef": 0.0}, teacher_coef=1.0),
    # models that check: the policy rates its own answers (docs/algorithms.md, "Self-verification")
    _recipe("rise", "Liu et al., 2025, Trust, But Verify: A Self-Verification Approach to Reinforcement Learning with Verifiable Rewards (arXiv:2505.13445)",
            "Sec. 3: a share of each step's own answers come back as rating tasks (1 correct / -0.5 wrong / -1 no answer in \\boxed{}), referenced by the outcome verifier's verdict and scored by the same rule, in groups of their own, trained in the one update with the solutions; the released script (xyliu-cs/RISE scripts/train/start_qwen3b_rise_example.sh on verl main_ppo): PPO with a critic model (GAE, gamma = lambda = 1, verl's value clip 0.5), k1 KL in the reward (0.01), critique_batch_size 128 per 1024 prompts (1/8: 4 of the example config's 32 prompts), 1024 prompts in mini-batches of 128: 8 updates",
            **{"advantage": "gae", "critic": "model", "value_clip": 0.5, "kl_placement": "reward", "kl_kind": "k1",
               "kl_coef": 0.01, "mini_batches": 8, "self_verify_per_step": 4, "self_verify_mode": "rise"}),
    _recipe("critique_rl", "Xi et al., 2025, Critique-RL: Training Language Models for Critiquing through Two-Stage Reinforcement Learning (arXiv:2510.24320)",
            "Stage I: the discriminability reward r_dis = 1(the critic's judgement = the oracle's correctness), paid +1 / -1 (WooooDyy/Critique-RL RL/Critique-RL/reward/reward_func.py), here with the policy as its own critic on 8 of its answers per step; the released stage-I script (examples/step2-Critique-RL-stage1.sh on OpenRLHF): RLOO advantages over 4 samples, k1 KL in the reward (init_kl_coef 0.01), PPO clip 0.2 with a token mean, rollout batch 64 prompts x 4 samples = 256 rows in train batches of 64: 4 mini-batches, 2 epochs (max_epochs 2); stage II (the refinement reward) is not built",
            **{"advantage": "rloo", "kl_placement": "reward", "kl_kind": "k1", "kl_coef": 0.01, "ppo_epochs": 2,
               "mini_batches": 4, "self_verify_per_step": 8, "self_verify_mode": "critique"}),
    # models that check: a verifier trained beside the policy (rlvr.train.parts_verifier, docs/algorithms.md)
    _recipe("tango", "Zha et al., 2025, RL Tango: Reinforcing Generator and Verifier Together for Language Reasoning (arXiv:2505.15034)",
            "a generative verifier (algo.verifier_model; policy = a copy of the policy's starting folder) trained by RL from an outcome-level verification-correctness reward alone: 4 sampled verdicts per answer, reward 1 when a verdict equals the rule verifier's, GRPO advantages, one on-policy update per step with its own AdamW; the policy's reward is the rule verifier's score plus the verifier's share of yes verdicts (term model_verifier, weight 1); Tango's step-level verdicts are one verdict word here; GRPO and PPO-clip for the policy, one update per rollout batch",
            **{"verifier_model": "policy", "verifier_objective": "rl",
               "reward.terms": [{"name": "correct", "verifier": "task"}, {"name": "checker", "verifier": "model_verifier"}]}),
    _recipe("cooper", "Hong et al., 2025, Cooper: Co-Optimizing Policy and Reward Models in Reinforcement Learning for Large Language Models (arXiv:2508.05613)",
            "a reference-based reward model (algo.verifier_model; policy = a copy of the policy's starting folder) scoring sigmoid(log P(yes) - log P(no)) and updated each step by the pairwise loss -log sigmoid(s_pos - s_neg) (ZJU-REAL/Cooper recipe/cooper/dp_reward.py update_reward), the positive each prompt's first rule-correct response, the negative here the group's first rule-wrong one (the released code has an assistant LLM rewrite the positive); the policy's reward is the reward model's score (term model_verifier); GRPO and PPO-clip, one update per rollout batch",
            **{"verifier_model": "policy", "verifier_objective": "contrastive",
               "reward.terms": [{"name": "checker", "verifier": "model_verifier"}]}),
]}


def names() -> list[str]:
    return sorted(RECIPES)


def get(name: str) -> Recipe:
    try:
        return RECIPES[name]
    except KeyError:
        raise ValueError(f"unknown recipe {name!r}; known: {', '.join(names())}") from None


def _format(value: Any) -> str:
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_format(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_format(v) for v in value) + "]"
    return "null" if value is None else str(value).lower() if isinstance(value, bool) else str(value)


def expansion(name: str) -> str:
    """The algo.* settings a recipe expands to, as dotted overrides."""
    shown = ("advantage", "loss", "agg", "ppo_epochs", "mini_batches")
    return " ".join(f"{k if '.' in k else 'algo.' + k}={_format(v)}" for k, v in get(name).settings.items()
                    if _BASE.get(k, object()) != v or k in shown)


def markdown_table() -> str:
    """One row per recipe: name, paper, what it computes, and the keys it sets beyond the common base."""
    rows = ["| recipe | paper | equation | expands to |", "| --- | --- | --- | --- |"]
    for name in names():
        r = get(name)
        rows.append(f"| `{name}` | {r.paper} | {r.equation} | `{expansion(name)}` |")
    return "\n".join(rows) + "\n"
