"""Language identification for IFEval's language checks, with the ``langdetect`` package (as IFEval does).

langdetect draws random samples of n-grams, so on borderline text its answer can change from call to call.
Here every detection uses a private ``DetectorFactory`` with a fixed seed (``SEED``), so the same text always
gets the same answer, in any thread; the process-wide ``langdetect.DetectorFactory.seed`` is left untouched.
"""

from __future__ import annotations

import threading
from typing import Any

SEED = 0
# langdetect itself reads only the first 10,000 characters (after removing URLs and e-mail addresses); cutting
# the input first keeps its full-text regular expressions cheap on huge responses.
MAX_CHARS = 100_000

_LOCK = threading.Lock()
_FACTORY: Any = None


class UndetectableLanguage(Exception):
    """The text has nothing to identify a language from (no letters); IFEval counts such checks as followed."""


def _factory() -> Any:
    global _FACTORY
    if _FACTORY is None:
        with _LOCK:
            if _FACTORY is None:
                from langdetect.detector_factory import PROFILES_DIRECTORY, DetectorFactory

                factory = DetectorFactory()
                factory.load_profile(PROFILES_DIRECTORY)
                factory.set_seed(SEED)  # an instance attribute: other users of langdetect are not affected
                _FACTORY = factory
    return _FACTORY


def detect_language(text: str) -> str:
    """The langdetect code of ``text`` ("en", "fr", "zh-cn", ...); raises UndetectableLanguage when there is
    nothing to detect. Deterministic: the same text always gets the same code."""
    from langdetect.lang_detect_exception import LangDetectException

    detector = _factory().create()  # each Detector has its own random.Random, seeded from the factory
    try:
        detector.append(text[:MAX_CHARS])
        code = detector.detect()
    except LangDetectException as exc:
        raise UndetectableLanguage(str(exc)) from None
    if code == "unknown":
        raise UndetectableLanguage("no language detected")
    return code


def same_language(detected: str, wanted: str) -> bool:
    """``wanted`` is an ISO 639-1 code as IFEval writes it ("en", "fr"); a bare code also accepts a detected
    regional variant ("zh" accepts "zh-cn" and "zh-tw"). Case-insensitive."""
    detected, wanted = detected.lower(), wanted.strip().lower()
    return detected == wanted or ("-" not in wanted and detected.split("-", 1)[0] == wanted)
