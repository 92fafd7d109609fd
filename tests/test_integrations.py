"""Adapters: a real TRL GRPOTrainer scoring with an rlvr verifier, and verl's custom reward signature."""

import inspect

import pytest

from rlvr.integrations.trl import reward_function
from rlvr.integrations.verl import compute_score


def test_trl_reward_function_signature_and_values():
    reward = reward_function("numeric")
    assert reward.__name__ == "rlvr_numeric"
    scores = reward(prompts=["1+2=", "2+2="], completions=["3", "5"], reference=["3", "4"])
    assert scores == [1.0, 0.0]
    conversational = reward(prompts=[[{"role": "user", "content": "1+2="}]],
                            completions=[[{"role": "assistant", "content": "it is 3"}]], reference=["3"])
    assert conversational == [1.0]


def test_trl_reward_function_names_a_missing_column():
    with pytest.raises(KeyError, match="no 'reference' column"):
        reward_function("exact")(prompts=["x"], completions=["y"], answer=["y"])


def test_trl_grpo_trainer_runs_two_steps_with_an_rlvr_reward(tiny_model_dir, tmp_path, monkeypatch):
    import datasets  # installed with trl by the dev extras

    for name in ("LOCAL_RANK", "RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)  # accelerate reads these as a distributed launch: one process here
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    rows = [{"prompt": f"{a}+{b}=", "reference": str(a + b)} for a in range(4) for b in range(4)]
    calls = []
    reward = reward_function("exact")

    def counting_reward(prompts, completions, **columns):
        scores = reward(prompts, completions, **columns)
        calls.append(len(scores))
        return scores

    counting_reward.__name__ = "rlvr_exact"
    config = GRPOConfig(
        output_dir=str(tmp_path), per_device_train_batch_size=4, num_generations=4, max_completion_length=4,
        max_steps=2, learning_rate=1e-4, beta=0.0, use_cpu=True, report_to=[], logging_steps=1,
        save_strategy="no", bf16=False, fp16=False, dataloader_num_workers=0,
    )
    trainer = GRPOTrainer(
        model=AutoModelForCausalLM.from_pretrained(tiny_model_dir),
        processing_class=AutoTokenizer.from_pretrained(tiny_model_dir),
        reward_funcs=[counting_reward], args=config, train_dataset=datasets.Dataset.from_list(rows),
    )
    trainer.train()
    assert trainer.state.global_step == 2
    assert sum(calls) >= 8 and all(n > 0 for n in calls)
    logged = [entry for entry in trainer.state.log_history if "reward" in entry]
    assert logged, trainer.state.log_history


def test_verl_compute_score_uses_verls_argument_names():
    params = list(inspect.signature(compute_score).parameters)
    assert params[:4] == ["data_source", "solution_str", "ground_truth", "extra_info"]
    assert compute_score(data_source="openai/gsm8k", solution_str="... so #### 72", ground_truth="72") == {"score": 1.0, "acc": 1.0}
    assert compute_score(data_source="openai/gsm8k", solution_str="#### 71", ground_truth="72")["score"] == 0.0
    wrong_format = compute_score(data_source="custom", solution_str="<answer>B</answer>", ground_truth="B",
                                 extra_info={"verifier": "format"})
    assert wrong_format["score"] == 0.0  # no <think> block
    assert compute_score("custom", "Answer: (C)", "C", {"verifier": "choice"})["acc"] == 1.0
