"""The part of a reasoning model's response that is its answer: the text after its thoughts.

    answer_part("<think>it is 4? no, 5</think>The answer is 5.", "</think>")   # "The answer is 5."

With ``data.answer_after`` set (e.g. ``</think>``), verifiers score only what follows the LAST occurrence of the
marker, so an answer that appears only inside the thoughts earns nothing, and a number the model considered and
dropped there cannot be picked up by a last-number fallback. A response without the marker (the thoughts never
closed, often a response cut by the length limit) has no answer when ``required`` (the default); with
``data.require_answer_after=false`` it is scored whole.
"""

from __future__ import annotations


def answer_part(response: str, after: str | None, required: bool = True) -> str:
    if not after or not isinstance(response, str):
        return response
    at = response.rfind(after)
    if at < 0:
        return "" if required else response
    return response[at + len(after):]
