"""Environments of the verifiers package (release 0.3.1) for tests/test_envs_adapters.py: the package's own GymEnv
around a small guessing game, and MultiTurnEnv subclasses written to its protocol (env_response, @vf.stop)."""

import asyncio

import verifiers as vf


class GuessDigit:
    """A gym-style game for vf.GymEnv: guess the digit seed % 10; each guess is told "higher", "lower" or "right"
    (reward 1) and the game ends when it is right or after three guesses."""

    def reset(self, seed: int = 0):
        self.target, self.guesses = seed % 10, 0
        return "Guess a digit."

    def step(self, action: str):
        self.guesses += 1
        digits = [int(c) for c in action if c.isdigit()]
        guess = digits[0] if digits else -1
        right = guess == self.target
        hint = "right" if right else ("higher" if guess < self.target else "lower")
        return hint, float(right), right or self.guesses >= 3, {"guess": guess}


def guess_digit_env(episodes: int = 4):
    return vf.GymEnv(env_cls=GuessDigit, num_train_episodes=episodes, num_eval_episodes=0, max_episode_steps=3)


class DoubleCheck(vf.MultiTurnEnv):
    """Asks "Are you sure?" once, with a reward of 0.5 for the first answer when it is the reference; then done."""

    def __init__(self, **kwargs):
        super().__init__(dataset=_one_row(), **kwargs)

    async def setup_state(self, state):
        state["asked"] = False
        return state

    async def env_response(self, messages, state, **kwargs):
        state["asked"] = True
        last = state["trajectory"][-1]
        last["reward"] = 0.5 if state["answer"] in str(last["completion"][-1].content) else 0.0
        return [vf.UserMessage(content="Are you sure?")]

    @vf.stop
    async def answered_twice(self, state) -> bool:
        return state.get("asked", False) and len(state["trajectory"]) >= 2


class Boom(DoubleCheck):
    async def env_response(self, messages, state, **kwargs):
        raise KeyError("the environment's own bug")


class Slow(DoubleCheck):
    cleaned = []

    async def env_response(self, messages, state, **kwargs):
        await asyncio.sleep(30)
        return [vf.UserMessage(content="late")]

    @vf.cleanup
    async def note_cleanup(self, state) -> None:
        Slow.cleaned.append(state["answer"])


def _one_row():
    from datasets import Dataset

    return Dataset.from_list([{"question": "2+2?", "answer": "4"}])


ENVS = {"guess": guess_digit_env, "double_check": DoubleCheck, "boom": Boom, "slow": Slow,
        "single": lambda **kw: vf.SingleTurnEnv(dataset=_one_row(), **kw), "not_multi_turn": lambda: object()}


def load_environment(kind: str = "guess", **kwargs):
    return ENVS[kind](**kwargs)
