"""OpenEnv environments for tests/test_envs_packages.py, written with the package's own classes (Environment,
Action, Observation, State, Rubric) and served, where a test needs a server, by its create_app on loopback."""

import threading
import time
from typing import Any, Optional

from openenv.core.env_server import Action, Environment, Observation, State
from openenv.core.rubrics import Rubric

STEP_REWARDS: list[float] = []  # every reward the rubric computed, in any episode
_LOCK = threading.Lock()


class SayAction(Action):
    message: str


class CountAction(Action):
    count: int


class TwoFieldAction(Action):
    a: str
    b: str


class PromptObservation(Observation):
    prompt: str = ""


class LengthRubric(Rubric):
    """Reward of one turn: a tenth of the answer's length, capped at 1 (text the model writes changes it)."""

    def forward(self, action: SayAction, observation: PromptObservation) -> float:
        return min(len(action.message.strip()), 10) / 10


class TwoTurnEnv(Environment[SayAction, PromptObservation, State]):
    """Asks for a word, then for another; the rubric scores each answer; done after ``turns`` answers."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self, turns: int = 2, opening: str = "Say a word."):
        super().__init__(rubric=LengthRubric())
        self.turns, self.opening = turns, opening
        self._state = State(step_count=0)

    def reset(self, seed: Optional[int] = None, episode_id: Optional[str] = None, **kwargs: Any) -> PromptObservation:
        self._state = State(episode_id=episode_id, step_count=0)
        word = kwargs.get("word")
        return PromptObservation(prompt=self.opening if word is None else f"Say {word}.")

    def step(self, action: SayAction, timeout_s: Optional[float] = None, **kwargs: Any) -> PromptObservation:
        self._state.step_count += 1
        done = self._state.step_count >= self.turns
        observation = PromptObservation(prompt="" if done else "Another one.", done=done)
        observation.reward = self._apply_rubric(action, observation)
        with _LOCK:
            STEP_REWARDS.append(observation.reward)
        return observation

    @property
    def state(self) -> State:
        return self._state


class CountActionEnv(Environment[CountAction, PromptObservation, State]):
    """An action with an int field (text that is not a number is a malformed action): reward 1 for 4, then done."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self):
        super().__init__()
        self._state = State(step_count=0)

    def reset(self, seed=None, episode_id=None, **kwargs) -> PromptObservation:
        return PromptObservation(prompt="How many legs has a cat?")

    def step(self, action: CountAction, timeout_s=None, **kwargs) -> PromptObservation:
        self._state.step_count += 1
        return PromptObservation(prompt="", done=True, reward=float(action.count == 4))

    @property
    def state(self) -> State:
        return self._state


class BadRewardEnv(TwoTurnEnv):
    def step(self, action, timeout_s=None, **kwargs):
        return PromptObservation(prompt="", done=False, reward=float("nan"))


class RaisingEnv(TwoTurnEnv):
    def step(self, action, timeout_s=None, **kwargs):
        raise KeyError("the environment's own bug")


class HangingEnv(TwoTurnEnv):
    def step(self, action, timeout_s=None, **kwargs):
        time.sleep(60)


class EndsAtResetEnv(TwoTurnEnv):
    def reset(self, seed=None, episode_id=None, **kwargs):
        return PromptObservation(prompt="", done=True)


def serve(env_factory=TwoTurnEnv, action_cls=SayAction):
    """An OpenEnv server (the package's create_app under uvicorn) on a free loopback port, in a daemon thread:
    returns (base_url, server); ``server.should_exit = True`` stops it."""
    import uvicorn
    from openenv.core.env_server import create_fastapi_app

    app = create_fastapi_app(env_factory, action_cls, PromptObservation, max_concurrent_envs=64)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", ws_ping_interval=None))
    threading.Thread(target=server.run, name="openenv-server", daemon=True).start()
    deadline = time.monotonic() + 30
    while not (server.started and server.servers) and time.monotonic() < deadline:
        time.sleep(0.02)
    port = server.servers[0].sockets[0].getsockname()[1]
    return f"http://127.0.0.1:{port}", server
