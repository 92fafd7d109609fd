import pytest
import torch

from rlvr.models import TinySpec, build_tiny_model, save_tiny_model

SMALL = TinySpec(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64)


@pytest.fixture(autouse=True)
def _threads():
    torch.set_num_threads(2)


@pytest.fixture
def tiny():
    """A fresh random tiny model and its character tokenizer."""
    return build_tiny_model(SMALL, seed=0)


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    """A tiny model saved as a Hugging Face folder."""
    return save_tiny_model(tmp_path_factory.mktemp("tiny") / "model", SMALL, seed=0)
