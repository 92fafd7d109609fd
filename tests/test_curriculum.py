"""Mixtures and difficulty-aware curricula: each rule changes what is drawn as documented, the metrics report
per source and per difficulty, and a state_dict round trip gives identical future draws."""

import json
import pickle
import random

import pytest

from rlvr.config import DataConfig
from rlvr.tasks import CurriculumRules, CurriculumSampler, DataError, PromptSampler, Task, make_sampler
from rlvr.tasks.difficulty import DifficultyTracker


def make_tasks(n, source="s", **meta):
    return [Task(prompt=f"q{i}", reference=str(i), id=f"{source}{i}", meta={"source": source, **meta}) for i in range(n)]


def play(sampler, steps, n, score_of, group=4):
    """A stand-in RL loop: draw n tasks, score `group` responses each with score_of(task_id, k), observe."""
    drawn, logged = [], []
    for _ in range(steps):
        batch = sampler.next(n)
        ids = [t.id for t in batch for _ in range(group)]
        scores = [score_of(t.id, k) for t in batch for k in range(group)]
        sampler.observe(ids, scores)
        drawn.append([t.id for t in batch])
        logged.append(sampler.metrics())
    return drawn, logged


def test_tracker_running_rate_streaks_and_buckets():
    tracker = DifficultyTracker(alpha=0.5)
    assert tracker.bucket("a") == "new" and tracker.rate("a") is None
    tracker.update("a", [1, 1, 0, 0])
    assert tracker.rate("a") == 0.5 and tracker.bucket("a") == "medium"
    tracker.update("a", [0, 0, 0, 0])
    assert tracker.rate("a") == 0.25 and tracker.record("a").failed_streak == 1
    tracker.update("a", [0, 0])
    assert tracker.record("a").failed_streak == 2 and tracker.bucket("a") == "hard"
    tracker.update("a", [1, 1])
    assert tracker.record("a").failed_streak == 0 and tracker.record("a").solved_streak == 1
    copy = DifficultyTracker()
    copy.load_state_dict(json.loads(json.dumps(tracker.state_dict())))
    assert copy.state_dict() == tracker.state_dict()


def test_plain_sampler_reports_per_source_and_difficulty_and_keeps_its_order():
    tasks = make_tasks(4, "a") + make_tasks(4, "b", difficulty="Level 2")
    plain, observed = PromptSampler(tasks, seed=1), PromptSampler(tasks, seed=1)
    drawn, logged = play(observed, 3, 4, lambda tid, k: 1.0 if tid.startswith("a") else 0.0)
    assert drawn == [[t.id for t in plain.next(4)] for _ in range(3)]  # observing never changes a plain order
    last = logged[-1]
    for key, value in last.items():
        if key.startswith("source/a/score_mean"):
            assert value == 1.0
        if key.startswith(("source/b/score_mean", "level/Level_2/score_mean")):
            assert value == 0.0
    assert sum(v for k, v in last.items() if k.startswith("source/") and k.endswith("/prompts")) == 4
    assert {k.split("/")[1] for k in last if k.startswith("difficulty/")} <= {"new", "hard", "medium", "easy"}
    assert last["data/seen_frac"] == 1.0


def test_plain_sampler_reads_a_state_from_before_difficulty_tracking():
    tasks = make_tasks(5)
    sampler = PromptSampler(tasks, seed=0)
    sampler.load_state_dict({"epoch": 1, "position": 2, "seed": 0, "n_tasks": 5})
    assert sampler.metrics()["data/seen_frac"] == 0.0
    reference = PromptSampler(tasks, seed=0)
    reference.next(7)
    assert sampler.next(3) == reference.next(3)


def test_observe_rejects_unknown_ids_and_mismatched_lengths():
    sampler = PromptSampler(make_tasks(3), seed=0)
    with pytest.raises(ValueError, match="'zz' is not one of"):
        sampler.observe(["zz"], [1.0])
    with pytest.raises(ValueError, match="2 task ids but 1 scores"):
        sampler.observe(["s0", "s1"], [1.0])


def test_mixture_draws_sources_by_weight_and_covers_each_source():
    tasks = make_tasks(10, "a") + make_tasks(30, "b")
    parts = [("a", 3.0, list(range(10))), ("b", 1.0, list(range(10, 40)))]
    sampler = CurriculumSampler(tasks, seed=0, parts=parts)
    drawn = [t.meta["source"] for _ in range(100) for t in sampler.next(20)]
    share = drawn.count("a") / len(drawn)
    assert 0.72 < share < 0.78
    first_epoch = CurriculumSampler(tasks, seed=0, parts=parts).next(10)  # distinct tasks within a batch
    assert len({t.id for t in first_epoch}) == 10
    assert set(sampler.metrics()) >= {"mixture/a/share", "mixture/b/share"}


def test_filter_retires_tasks_solved_or_failed_in_every_sample_for_k_observations():
    tasks = make_tasks(12)
    rules = CurriculumRules.parse("filter", {"skip_after": 2})
    sampler = CurriculumSampler(tasks, seed=3, rules=rules)
    # s0-s3 always solved, s4-s7 never, s8-s11 half the time
    score = lambda tid, k: 1.0 if int(tid[1:]) < 4 else 0.0 if int(tid[1:]) < 8 else float(k % 2)  # noqa: E731
    play(sampler, 2, 12, score)  # two full epochs: every task observed twice
    assert sampler.metrics()["curriculum/retired_solved"] == 4
    assert sampler.metrics()["curriculum/retired_failed"] == 4
    drawn, logged = play(sampler, 3, 4, score)
    assert {tid for batch in drawn for tid in batch} == {"s8", "s9", "s10", "s11"}
    assert logged[0]["curriculum/skipped"] > 0


def test_filter_only_solved_keeps_the_failed_ones():
    tasks = make_tasks(6)
    sampler = CurriculumSampler(tasks, seed=0, rules=CurriculumRules.parse("filter", {"skip_after": 1, "retire": "solved"}))
    score = lambda tid, k: 1.0 if int(tid[1:]) < 3 else 0.0  # noqa: E731
    play(sampler, 1, 6, score)
    drawn, _ = play(sampler, 2, 3, score)
    assert {tid for batch in drawn for tid in batch} == {"s3", "s4", "s5"}


def test_a_fully_retired_source_is_still_drawn_and_counted():
    sampler = CurriculumSampler(make_tasks(3), seed=0, rules=CurriculumRules.parse("filter", {"skip_after": 1}))
    play(sampler, 1, 3, lambda tid, k: 1.0)
    batch = sampler.next(2)
    assert len(batch) == 2 and sampler.metrics()["curriculum/exhausted"] == 2


def test_band_keeps_tasks_inside_the_target_pass_rate_band():
    tasks = make_tasks(20)
    rules = CurriculumRules.parse("band", {"band_low": 0.25, "band_high": 0.75, "outside_keep": 0.0})
    sampler = CurriculumSampler(tasks, seed=1, rules=rules)
    rate = {f"s{i}": (0.0, 0.5, 1.0)[i % 3] for i in range(20)}  # a third of the tasks inside the band
    score = lambda tid, k: 1.0 if k < 4 * rate[tid] else 0.0  # noqa: E731
    play(sampler, 1, 20, score)
    drawn, logged = play(sampler, 4, 5, score)
    assert all(rate[tid] == 0.5 for batch in drawn for tid in batch)
    assert logged[-1]["curriculum/in_band"] == sum(r == 0.5 for r in rate.values())


def test_band_outside_keep_lets_some_outside_tasks_through():
    tasks = make_tasks(200)
    sampler = CurriculumSampler(tasks, seed=2, rules=CurriculumRules.parse("band", {"outside_keep": 0.3}))
    play(sampler, 1, 200, lambda tid, k: 1.0)  # every task is outside the band (rate 1)
    sampler.next(40)
    kept_frac = 40 / (40 + sampler.metrics()["curriculum/skipped"])
    assert 0.2 < kept_frac < 0.4


def test_replay_refills_batches_with_hard_tasks():
    tasks = make_tasks(40)
    rules = CurriculumRules.parse("replay", {"replay_frac": 0.5, "replay_below": 0.5})
    sampler = CurriculumSampler(tasks, seed=0, rules=rules)
    hard = {f"s{i}" for i in range(0, 40, 2)}
    score = lambda tid, k: 0.0 if tid in hard else 1.0  # noqa: E731
    play(sampler, 1, 20, score)  # half the tasks seen, some of them hard
    seen_hard = hard & set(sampler.feedback.tracker.records)
    assert len(seen_hard) >= 4
    batch = sampler.next(8)
    assert sampler.metrics()["curriculum/replayed"] == 4
    assert {t.id for t in batch[:4]} <= seen_hard and len({t.id for t in batch}) == 8
    assert sampler.metrics()["curriculum/replay_pool"] == len(seen_hard)


def noisy_score(tid, k, _cache={}):
    """A fixed pseudo-random score per (task, response): the same in every run of the test."""
    key = (tid, k)
    if key not in _cache:
        _cache[key] = float(random.Random(f"{tid}:{k}").random() < (int(tid[1:]) % 5) / 4)
    return _cache[key]


@pytest.mark.parametrize("rules", ["none", "filter", "band", "replay", "filter+band+replay"])
def test_state_dict_round_trip_gives_identical_future_draws(rules):
    tasks = make_tasks(15, "a") + make_tasks(25, "b")
    parts = [("a", 2.0, list(range(15))), ("b", 1.0, list(range(15, 40)))]
    rule = CurriculumRules.parse(rules, {"skip_after": 1, "outside_keep": 0.5, "replay_frac": 0.3})
    straight = CurriculumSampler(tasks, seed=7, rules=rule, parts=parts)
    play(straight, 6, 6, noisy_score)
    state = pickle.loads(pickle.dumps(straight.state_dict()))  # as a checkpoint stores it
    json.dumps(state)  # and plain data only
    expected = play(straight, 10, 6, noisy_score)

    resumed = CurriculumSampler(tasks, seed=7, rules=rule, parts=parts)
    resumed.load_state_dict(state)
    assert play(resumed, 10, 6, noisy_score) == expected

    fresh = CurriculumSampler(tasks, seed=7, rules=rule, parts=parts)  # without the state: other draws
    assert play(fresh, 10, 6, noisy_score)[0] != expected[0]


def test_resume_refuses_other_sources_or_task_counts():
    tasks = make_tasks(6)
    sampler = CurriculumSampler(tasks, seed=0, parts=[("x", 1.0, [0, 1, 2]), ("y", 1.0, [3, 4, 5])])
    state = sampler.state_dict()
    with pytest.raises(ValueError, match="sources changed"):
        CurriculumSampler(tasks, seed=0, parts=[("x", 1.0, [0, 1, 2]), ("z", 1.0, [3, 4, 5])]).load_state_dict(state)
    with pytest.raises(ValueError, match="6 tasks then, 5 now"):
        CurriculumSampler(tasks[:5], seed=0).load_state_dict(state)
    with pytest.raises(ValueError, match="no curriculum or mixture"):
        CurriculumSampler(tasks, seed=0).load_state_dict(PromptSampler(tasks, seed=0).state_dict())


@pytest.mark.parametrize(
    "name, options, message",
    [
        ("filtr", {}, "unknown rule 'filtr'"),
        ("filter", {"skip_afterr": 2}, "unknown option 'skip_afterr'"),
        ("band", {"band_low": 0.9, "band_high": 0.1}, "band_low <= band_high"),
        ("replay", {"replay_frac": "half"}, "expected a number"),
        ("filter", {"skip_after": 2.5}, "expected a whole number"),
    ],
)
def test_bad_rules_say_what_is_expected(name, options, message):
    with pytest.raises(ValueError, match=message):
        CurriculumRules.parse(name, options)


def test_make_sampler_picks_by_config(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps({"prompt": f"p{i}", "reference": str(i)}) + "\n" for i in range(5)))
    from rlvr.tasks import load_data

    plain = DataConfig(train=str(path))
    tasks = load_data(plain)
    assert isinstance(make_sampler(tasks, plain, seed=0), PromptSampler)
    assert [t.id for t in make_sampler(tasks, plain, seed=0).next(5)] == [t.id for t in PromptSampler(tasks, seed=0).next(5)]
    curriculum = DataConfig(train=str(path), curriculum="filter", curriculum_options={"skip_after": 3})
    sampler = make_sampler(tasks, curriculum, seed=0)
    assert isinstance(sampler, CurriculumSampler) and sampler.rules.skip_after == 3
    mixture = DataConfig(train=f"{path}@3; arithmetic:train:n=20@1")
    tasks = load_data(mixture)
    sampler = make_sampler(tasks, mixture, seed=0)
    assert [(p.label, p.weight, len(p.indices)) for p in sampler.parts] == [("t", 3.0, 5), ("arithmetic", 1.0, 20)]
    with pytest.raises(DataError, match="unknown option 'x'"):
        make_sampler(tasks, DataConfig(train=str(path), curriculum="band", curriculum_options={"x": 1}), seed=0)
