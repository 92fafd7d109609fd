"""A reward function for tests/test_truncation_flag.py, in a module the runner's worker processes can import."""


def truncation_reward(response, reference, truncated=False):
    """1.0 unless the response was cut off by the length limit."""
    return 0.0 if truncated else 1.0
