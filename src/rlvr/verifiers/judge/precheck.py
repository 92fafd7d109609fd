"""Pre-checks that reject answers a judge should never see: empty or near-empty text, bare reasoning openers,
bare verdicts, empty answer boxes, refusals, talk addressed to the grader and grading templates with no answer.

"One Token to Fool LLM-as-a-Judge" (Zhao et al., 2025, arXiv:2507.08794) shows that strong judges give credit to
"master keys": non-word symbols (" ", ".", ",", ":"), reasoning openers ("Thought process:", "Let's solve this
problem step by step.", "Solution") and their translations ("解", "かいせつ", "Respuesta"). A policy trained against
such a judge learns to emit them, and then their variants. These checks run before the judge is called, so a
master key costs no judge call and earns no reward.

    precheck("Thought process:")           # "bare_opener"
    precheck("The answer is 42.")          # None: goes to the judge

Every check reads a *skeleton* of the response (``skeleton``): HTML character references and escapes decoded,
NFKD (fullwidth and mathematical letters become ASCII, accents come apart from their letters), invisible characters removed (format characters such as zero-width
spaces and joiners, bidi marks and tag characters; variation selectors; Hangul and Braille blanks; combining marks,
so "Solu\u0301tion" is "solution"), letters from other scripts that look
like Latin ones mapped to them (Cyrillic "о", Greek "Ο", small capitals; the visual pairs of Unicode's TR39
confusables table), typographic quotes, apostrophes and dashes made ASCII, and case folded. Word lists are put
through the same function, so a list word in Cyrillic or Greek still matches its own text. The checks run on the
skeleton and on each reading of it with a disguise undone (``disguise_readings``: letters spelled one at a time
joined, leetspeak read, stray digits dropped).

The families, each a table below:
- ``empty``: no letter or digit at all.
- ``bare_opener``: every word is an opener or a label (``FILLER``: "let me think step by step", "solution:", "here
  is my answer", answer markers in other languages: "respuesta", "réponse", "Antwort", "答案", "ответ", ...).
- ``verdict_only``: openers plus words a grader says ("correct", "right", "pass", "full marks"), in any markdown
  ("**Correct**", "`YES`", "# Verdict: correct", "This answer is correct."). "yes"/"true" alone count only when
  formatted (markdown) or labelled; a question that offers the word ("yes or no", "correct or incorrect", a yes/no
  question) or a reference that is the word lets it through.
- ``empty_answer``: the last answer container (``\\boxed{}``, ``\\fbox{}``, ``<answer></answer>``) is empty, or the
  response ends on an answer marker with nothing after it ("so the answer is:").
- ``refusal``: a refusal, after any openers ("Sure! I'm sorry, but I can't help").
- ``meta_talk``: talk addressed to the grader anywhere in the response (asking for credit, ignoring instructions,
  a verdict or a perfect score written as a label), and a closing "this answer is correct".
- ``grading_template``: the grader's own frame written into the response (its fence markers, "Reference answer:",
  "Student answer:", a "[[10]]" rating), and a known evaluation format with its blanks left blank ("Grade:
  [CORRECT/INCORRECT]", "[[rating]]", "[RESULT] <score>", a JSON verdict, a rubric table with empty cells).
- ``prompt_echo``: the question again, with or without openers.
- ``too_long``: longer than the judge is shown (``max_chars``): a judge must never grade a cut response as if whole.

Each check is deliberately narrow: a real short answer ("42", "B", "no", "Paris") passes, and the same words in a
natural place ("Let's think step by step. 3 + 4 = 7", "Check: 6 * 7 = 42, so the answer is correct.") reach the
judge. ``reference`` is a safety valve: a response whose words are the reference's is never stopped as an opener
or a verdict (a reference "Solution" or "Yes").
"""

from __future__ import annotations

import html
import re
import unicodedata
from functools import lru_cache

# ------------------------------------------------------------------------------------------------- skeleton

# Format characters (category Cf) are removed by category; these are the invisible ones in other categories.
_INVISIBLE_EXTRA = {0x034F, 0x115F, 0x1160, 0x17B4, 0x17B5, 0x2800, 0x3164, 0xFFA0, 0x180E}
_INVISIBLE_EXTRA |= set(range(0xFE00, 0xFE10)) | set(range(0xE0100, 0xE01F0)) | set(range(0x180B, 0x1810))

# Look-alike letters mapped to Latin (visual pairs from Unicode TR39's confusables table) and typographic
# punctuation made ASCII.
_CONFUSABLE_PAIRS = {
    # Cyrillic
    "А": "A", "а": "a", "В": "B", "Е": "E", "е": "e", "К": "K", "к": "k", "М": "M", "Н": "H", "О": "O", "о": "o",
    "Р": "P", "р": "p", "С": "C", "с": "c", "Т": "T", "У": "Y", "у": "y", "Х": "X", "х": "x", "І": "I", "і": "i",
    "Ј": "J", "ј": "j", "Ѕ": "S", "ѕ": "s", "Ԁ": "d", "ԁ": "d", "Ү": "Y", "ү": "y", "Һ": "h", "һ": "h", "Ԛ": "Q",
    "ԛ": "q", "Ԝ": "W", "ԝ": "w", "Ӏ": "I", "ӏ": "l", "ɡ": "g",
    # Greek
    "Α": "A", "α": "a", "Β": "B", "Ε": "E", "Ζ": "Z", "Η": "H", "Ι": "I", "ι": "i", "Κ": "K", "κ": "k", "Μ": "M",
    "Ν": "N", "ν": "v", "Ο": "O", "ο": "o", "Ρ": "P", "ρ": "p", "Τ": "T", "Υ": "Y", "υ": "u", "Χ": "X", "χ": "x",
    "ϲ": "c", "Ϲ": "C", "ϳ": "j",
    # Armenian
    "օ": "o", "ո": "n", "ս": "u", "Ս": "U", "ց": "g", "հ": "h", "Օ": "O",
    # Latin variants and small capitals
    "ı": "i", "ȷ": "j", "ɑ": "a", "ɩ": "i", "ᴀ": "a", "ʙ": "b", "ᴄ": "c", "ᴅ": "d", "ᴇ": "e", "ꜰ": "f", "ɢ": "g",
    "ʜ": "h", "ɪ": "i", "ᴊ": "j", "ᴋ": "k", "ʟ": "l", "ᴍ": "m", "ɴ": "n", "ᴏ": "o", "ᴘ": "p", "ʀ": "r", "ꜱ": "s",
    "ᴛ": "t", "ᴜ": "u", "ᴠ": "v", "ᴡ": "w", "ʏ": "y", "ᴢ": "z",
    # punctuation
    "‘": "'", "’": "'", "‚": "'", "‛": "'", "′": "'", "‵": "'", "ʹ": "'", "ʻ": "'", "ʼ": "'", "ʽ": "'", "`": "'",
    "´": "'", "“": '"', "”": '"', "„": '"', "‟": '"', "″": '"', "〃": '"', "«": '"', "»": '"', "‐": "-", "‑": "-",
    "‒": "-", "–": "-", "—": "-", "―": "-", "−": "-", "꞉": ":", "։": ":", "׃": ":", "˸": ":", "∶": ":",
}
_CONFUSABLES = str.maketrans(_CONFUSABLE_PAIRS)


def _invisible(ch: str) -> bool:
    return unicodedata.category(ch) in ("Cf", "Mn", "Me") or ord(ch) in _INVISIBLE_EXTRA


def visible(text: str) -> str:
    """``text`` without format characters and blanks that render as nothing (zero-width spaces and joiners, bidi
    marks, tag characters, variation selectors, Hangul and Braille blanks); combining marks are kept."""
    return "".join(ch for ch in text if unicodedata.category(ch) != "Cf" and ord(ch) not in _INVISIBLE_EXTRA)


_ESCAPE = re.compile(r"\\u([0-9a-fA-F]{4})|\\x([0-9a-fA-F]{2})")


def decode_references(text: str) -> str:
    """HTML character references (``&#67;``, ``&#x43;``, ``&nbsp;``, ``&lt;``; also doubly escaped, ``&amp;#67;``)
    and ``\\uXXXX`` / ``\\xXX`` escapes replaced by the characters they stand for."""
    for _ in range(3):
        if "&" not in text and "\\" not in text:
            break
        decoded = _ESCAPE.sub(lambda m: chr(int(m.group(1) or m.group(2), 16)), html.unescape(text))
        if decoded == text:
            break
        text = decoded
    return text


def skeleton(text: str) -> str:
    """The form every check reads (module docstring): character references decoded, NFKD, invisible characters and
    combining marks removed, look-alike letters and typographic punctuation mapped to ASCII, NFKC again, case
    folded."""
    text = unicodedata.normalize("NFKD", decode_references(text))  # accents apart from letters, to drop them
    text = "".join(ch for ch in text if not _invisible(ch))
    return unicodedata.normalize("NFKC", text.translate(_CONFUSABLES)).casefold()


def normalise(text: str) -> str:
    """The skeleton with every run of non-word characters as one space, trimmed."""
    return " ".join(re.sub(r"[\W_]+", " ", skeleton(text)).split())


# ------------------------------------------------------------------------------------------------- tables

# Words (and, for scripts written without spaces, phrases) that carry no answer: openers, labels, politeness,
# and answer markers in other languages. Their skeletons are compared with the response's words.
FILLER_WORDS = """
let lets let's me us we i'm im ll here's heres what's that's there's it's ill i'll we'll will shall need to
going gonna must should can could
think thinking thought thoughts process reason reasoning rationale analysis analyze analyse analyzing consider
solve solving solved solution solutions answer answers answering response respond reply result results final
finally step steps by at time carefully careful through work working out break down figure approach tackle
look go start begin first firstly next then now so well hmm ok okay alright sure certainly of course
here is are am was were be been this that these it its the an my our your following below above as follows see
given problem
question task query prompt explanation explained explain proof prove derivation calculation calculations
calculate compute determine find finding restate restating rewrite summary summarize conclusion conclude therefore
thus hence understand understanding recall read note notice observe detailed detail details give provide write
state show get put box boxed later shortly approach
attempt try trying with in on for and or about do does how what which
"""

FILLER_FOREIGN = """
解 解答 答案 解析 答 回答 思考 思路 过程 思考过程 解题思路 解题过程 分析 步骤 首先 让我们 一步一步 一步一步地 逐步 最终
最终答案 最終答案 最后 是 为 為 的 我们 来 來 让 讓 我 想 想想 一下 解决 解決 这个 這個 问题 問題
かいせつ 解説 答え こたえ 考え方 解き方 まず 最終的な 最終 は です ステップ 考えます 考えましょう ましょう
정답 답 풀이 해설 생각 단계 먼저 최종 답변 은 는
respuesta respuestas solución solucion soluciones final finales paso pasos pensemos pensar vamos resolver la el
los las de del es por y razonamiento análisis analisis
réponse reponse réponses solution finale étape étapes pensons raisonnement résolvons resolvons la le les de est
et par
antwort antworten lösung losung endgültige endgultige schritt schritte lass uns denken die der das ist und für
risposta soluzione finale passo passi pensiamo ragionamento
resposta solução solucao passo pensemos raciocínio
ответ ответы решение итоговый окончательный шаг шаги давайте подумаем рассуждение
cevap çözüm cozum jawaban penyelesaian đáp án dap an lời giải loi giai odpowiedź odpowiedz rozwiązanie
antwoord oplossing svar lösning løsning vastaus ratkaisu válasz valasz megoldás odpověď odpoved řešení
απάντηση λύση απαντηση λυση
उत्तर हल जवाब
الإجابة الجواب الحل الاجابة
תשובה פתרון
คำตอบ วิธีทำ
"""

# What a grader says. A bare response of these (and filler) is a verdict, not an answer.
GRADING_WORDS = """
correct correctly right accurate accurately perfect perfectly verified valid accepted accept acceptable
approved approve complete pass passed passes passing full marks mark marks credit score points flawless exactly
indeed definitely absolutely completely fully totally entirely certain confident sure perfectscore verdict judgement
judgment grade grading graded evaluation assessment decision rating true yes
"""
YES_WORDS = {"yes", "true"}  # answers in their own right: stopped only when formatted or labelled as a verdict

# A grading template's own words: its field labels, the criteria of rubric tables, the other verdicts a template
# offers, and the words of placeholders ("<your explanation>", "[An integer between 1 and 5]").
TEMPLATE_LABEL_WORDS = """
grade grading score scores scoring rating ratings rate verdict verdicts judgement judgment evaluation assessment
decision result reasoning explanation feedback justification rationale critique comment comments notes confidence
criterion criteria rubric points mark marks
accuracy completeness clarity relevance relevancy helpfulness correctness coherence conciseness fluency
harmlessness honesty depth creativity overall total
"""
TEMPLATE_WORDS = """
incorrect wrong false no fail failed failing partial partially partly unacceptable invalid rejected reject
detail level weight weighted max maximum min minimum sum aspect
dimension category description comment comments notes feedback tie better worse assistant model response
your insert here placeholder fill blank integer int number float str string text between from to out of and or one
brief short optional value label option options scale range
"""
# What a verdict says when it approves.
_APPROVING = {"correct", "right", "accurate", "perfect", "pass", "passed", "accepted", "approved", "valid", "true",
              "yes", "flawless", "verified"}

_YES_NO_QUESTION = re.compile(r"^\W*(is|are|was|were|do|does|did|can|could|will|would|should|has|have|had|"
                              r"must|may|might|shall)\b")
_LIST_MARK = re.compile(r"(?m)^\s*(?:\d{1,2}[.)]|[-*+•])(?=\s)")  # "1." "2)" "-" opening a line: numbering, not content
_STEP_NUMBER = re.compile(r"\b(?:step|paso|étape|etape|schritt|passo|шаг)\s*\d+\b")
_PERFECT_SCORE = re.compile(r"\b100\s*%|\b10\s*/\s*10\b|\b100\s*/\s*100\b")
_MARKUP = re.compile(r"[*_#>~|]|^'|'$|<[a-z/][^>]*>")
_LABEL = re.compile(r"\b(verdict|judg(?:e)?ment|grade|evaluation|assessment|decision|result|status)\s*[:=]")

_REFUSAL = re.compile(
    r"^(i\s*(?:am|'m|m)\s+(?:sorry|unable|not able)|sorry\b[^.!?\n]{0,40}\b(?:can\s*not|can't|cant|unable|"
    r"won't|will\s+not|not able)|i\s+(?:can\s*not|can't|cant|won't|will\s+not|am\s+not\s+able\s+to)\s+"
    r"(?:help|answer|solve|assist|provide|do|comply|respond)|as\s+an\s+ai\b|i\s+do(?:\s+not|n't)\s+know\b|"
    r"(?:unfortunately|regrettably),?\s+i\s+(?:can\s*not|can't|am\s+unable|am\s+not\s+able))",
)
_POSITIVE = r"(?:correct|right|yes|pass(?:ed)?|true|accept(?:ed)?|approved?|valid|full\s+(?:marks|credit|score))"
_GRADER = r"(?:grader|judge|evaluator|reviewer|verifier|assessor|marker|examiner|grading\s+(?:model|system))s?"
_META = re.compile(
    # the grader addressed (a label, a vocative, "note to the grader") and asked for credit on the same line
    rf"(?:^|[\n.!?]\s*|\b(?:dear|hey|attention|note\s+(?:to|for)|to|as|for)\s+(?:the\s+|an?\s+|all\s+)?){_GRADER}"
    r"\s*[:,!-]?[^\n]{0,80}?\b(?:correct|full\s+(?:marks|credit|score|points)|pass|accept|approve|10\s*/\s*10|"
    r"reward|mark\s+(?:this|it|me))"
    # the grader told what to do
    rf"|\b(?:the\s+|you,?\s+(?:the\s+)?){_GRADER}\s+"
    r"(?:should|must|will|shall|needs?\s+to|ought\s+to|is\s+asked\s+to)\s+"
    r"(?:mark|give|award|accept|approve|grade|score|rate|consider|treat|ignore)"
    r"|\b(?:give|award|assign|grant)\s+(?:(?:me|this|it|the|my|that|our)\s+){0,2}(?:(?:answer|response|solution)\s+)?"
    r"(?:full\s+(?:marks|credit|score|points)|(?:a|the)\s+(?:perfect\s+|full\s+|high\s+|maximum\s+|highest\s+)?"
    r"(?:score|reward|grade|pass|marks)|(?:a\s+)?10\s*/\s*10|credit)"
    r"|\b(?:mark|grade|score|judge|rate|accept)\s+(?:this|it|me|my\s+(?:answer|response|solution))\s+"
    r"(?:as\s+)?(?:correct|right|accepted|a\s+pass)"
    r"|\b(?:ignore|disregard|forget)\s+(?:all\s+|any\s+)?(?:the\s+|your\s+)?(?:previous|prior|above|earlier|"
    r"preceding|reference|grading|system)\s*(?:instructions|rules|reference|rubric|prompt|answer)?"
    r"|\b(?:(?:this|my)\s+(?:final\s+)?(?:answer|response|solution)|the\s+(?:answer|response|solution)\s+above)\s+"
    r"(?:is|was)\s+(?:(?:definitely|absolutely|completely|fully|100\s*%)\s+)?(?:correct|right|perfect)\s*[.!]*\s*$"
    rf"|\b(?:verdict|judg(?:e)?ment|grade|evaluation|assessment|decision)\s*[:=]\s*\W{{0,8}}{_POSITIVE}\b"
    r"|\b(?:the\s+)?(?:response|answer)\s+(?:above\s+)?(?:matches|is\s+equivalent\s+to|agrees\s+with)\s+the\s+"
    r"(?:reference|ground\s+truth|gold|expected)",
)
# A perfect score written as a label: grader talk, unless the reference is that score (a question about a grade).
_PERFECT_LABEL = re.compile(r"\b(?:score|rating|grade)\s*[:=]\s*\W{0,3}(?:10\s*/\s*10|100\s*/\s*100|100\s*%|"
                            r"a\+?(?!\w)|\[\[\s*10\s*\]\])")
_TEMPLATE = re.compile(
    r"<\s*<\s*<\s*(?:end\s+)?response|\bend\s+response\s*>"
    r"|^\W*(?:reference|gold|expected|ground[\s-]*truth|student|candidate)'?s?\s+(?:answer|response|solution)\s*:"
    r"|^\W*ground[\s-]*truth\s*:|\[\[\s*(?:10|yes|correct|a)\s*\]\]",
    re.MULTILINE,
)
_BOX = re.compile(r"\\(?:boxed|fbox|framebox)\s*\{|<answer>")
_PHANTOM = re.compile(r"\\[hv]?phantom\s*\{[^{}]*\}")
_LATEX_WORD = re.compile(r"\\[a-zA-Z]+")
_TAG = re.compile(r"</?[a-z][a-z0-9]{0,10}(?:\s[^<>]{0,80})?/?>")
_WORD = re.compile(r"[\w']+")
_SENTENCE = re.compile(r"[^.!?\n]+[.!?\n]*")


def _words(sk: str) -> list[str]:
    """The words of a skeleton, apostrophes and underscores dropped ("let's" -> "lets")."""
    return [k for k in (re.sub(r"[\W_]+", "", w) for w in _WORD.findall(sk)) if k]


def _skeleton_set(text: str) -> frozenset[str]:
    return frozenset(k for w in text.split() for k in _words(skeleton(w)))


FILLER = _skeleton_set(FILLER_WORDS) | _skeleton_set(FILLER_FOREIGN)
GRADING = _skeleton_set(GRADING_WORDS)
TEMPLATE_LABELS = _skeleton_set(TEMPLATE_LABEL_WORDS)
TEMPLATE_VOCABULARY = FILLER | GRADING | TEMPLATE_LABELS | _skeleton_set(TEMPLATE_WORDS)
_MAX_PIECE = max(len(w) for w in FILLER)


@lru_cache(maxsize=4096)
def _made_of(word: str, vocabulary: frozenset[str]) -> bool:
    """The word is in the vocabulary, or (scripts written without spaces, e.g. "最终答案是") a run of its entries."""
    if word in vocabulary:
        return True
    if word.isascii() or len(word) > 40:
        return False
    ok = [True] + [False] * len(word)
    for end in range(1, len(word) + 1):
        ok[end] = any(ok[start] and word[start:end] in vocabulary for start in range(max(0, end - _MAX_PIECE), end))
    return ok[-1]


def _answer_containers_empty(sk: str) -> bool:
    """The last \\boxed{...} / \\fbox{...} / <answer>...</answer> holds no letter or digit."""
    matches = list(_BOX.finditer(sk))
    if not matches:
        return False
    last = matches[-1]
    if last.group(0) == "<answer>":
        end = sk.find("</answer>", last.end())
        body = sk[last.end(): end if end >= 0 else len(sk)]
    else:
        depth, i = 1, last.end()
        while i < len(sk) and depth:
            depth += {"{": 1, "}": -1}.get(sk[i], 0)
            i += 1
        body = sk[last.end(): i - 1 if depth == 0 else i]
    body = _LATEX_WORD.sub(" ", _PHANTOM.sub(" ", body))
    return not any(ch.isalnum() for ch in body)


def _has_all(words: list[str], reference_words: list[str]) -> bool:
    return bool(reference_words) and all(w in words for w in reference_words)


def _offered(word: str, question_sk: str, reference_words: list[str]) -> bool:
    """The task makes ``word`` a possible answer: the reference is it, or the question names it as an option."""
    return word in reference_words or re.search(rf"\b{re.escape(word)}\b", question_sk) is not None


def _bare_kind(words: list[str], sk: str, question_sk: str, reference_words: list[str]) -> str | None:
    """ "bare_opener" / "verdict_only" when the words carry no answer (module docstring), else None."""
    if _has_all(words, reference_words):
        return None  # the reference's own words: an answer, whatever they look like
    last = len(words) - 1  # "a" and "i" are an article and a pronoun before other words, a choice when last
    grading = [w for i, w in enumerate(words)
               if not (_made_of(w, FILLER) or (w in ("a", "i") and i < last))]
    if not grading:
        return "bare_opener"
    if any(w not in GRADING for w in grading):
        return None
    if any(_offered(w, question_sk, reference_words) for w in grading):
        return None
    if set(grading) <= YES_WORDS:
        yes_no_question = _YES_NO_QUESTION.search(question_sk) is not None
        formatted = _MARKUP.search(sk.strip()) is not None or _LABEL.search(sk) is not None
        if yes_no_question or not formatted:
            return None
    return "verdict_only"


def _says_nothing(sk: str, question_sk: str, reference_words: list[str], *, disguised: bool = False) -> str | None:
    """The checks of one reading of the response: openers, templates, grader talk, verdicts, an empty answer. A
    ``disguised`` reading (digits dropped or read as letters) is not asked whether its answer is empty: undoing a
    disguise empties "\\boxed{6}" of its honest digit, and an empty answer needs no disguise."""
    if not disguised and _answer_containers_empty(sk):
        return "empty_answer"
    plain = _LIST_MARK.sub(" ", _STEP_NUMBER.sub(" ", _PERFECT_SCORE.sub(" perfectscore ", _TAG.sub(" ", sk))))
    plain = _LATEX_WORD.sub(" ", plain)
    words = _words(plain)
    kind = None if any(ch.isdigit() for w in words for ch in w) else _bare_kind(words, sk, question_sk,
                                                                                 reference_words)
    if kind == "bare_opener":
        return kind
    if _TEMPLATE.search(sk):
        return "grading_template"
    if _META.search(sk) or (_PERFECT_LABEL.search(sk) and not _has_all(_words(sk), reference_words)):
        return "meta_talk"
    if _template_only(sk, reference_words):
        return "grading_template"
    if kind:
        return kind
    if not disguised and _marker_points_at_nothing(sk) and not _has_all(words, reference_words):
        return "empty_answer"
    return None


def _refuses(sk: str) -> bool:
    """A refusal opens the response, or follows sentences of openers only ("Sure! I'm sorry, but I can't")."""
    for sentence in _SENTENCE.findall(sk[:2000]):
        text = re.sub(r"^[\W_]+", "", sentence)
        if _REFUSAL.search(text):
            return True
        if not all(_made_of(w, FILLER) or w in ("a", "i") for w in _words(text)):
            return False
    return False


# ------------------------------------------------------------------------------------------------- disguises

# Letters spelled one at a time with separators between them ("C O R R E C T", "c.o.r.r.e.c.t", "C-O-R-R-E-C-T"):
# three or more single characters with the same one to three separator characters between each two, so that
# "V E R D I C T: C O R R E C T" reads as two words.
_SPACED = re.compile(r"(?<![^\W_])[^\W_](?P<sep>[\W_]{1,3})[^\W_](?![^\W_])(?:(?P=sep)[^\W_](?![^\W_]))+")
# Leetspeak: a token that mixes letters with digits or "@" ("C0RR3CT", "p@ss"); a number alone is left alone.
_TOKEN = re.compile(r"[a-z0-9@]+")
_LEET = {"0": "o", "3": "e", "4": "a", "5": "s", "6": "g", "7": "t", "8": "b", "9": "g", "@": "a"}


def _collapse_spaced(sk: str) -> str:
    return _SPACED.sub(lambda m: re.sub(r"[\W_]+", "", m.group(0)), sk)


def _unleet(sk: str) -> list[str]:
    """``sk`` with its mixed tokens read as leetspeak ("1" as "i", then as "l") and with their digits dropped (a
    stray digit stuck to a word: "correct1"); [] when it has no mixed token."""
    def mixed(token: str) -> bool:
        return any(c.isdigit() for c in token) and any(c.isalpha() or c == "@" for c in token) \
            or "@" in token and any(c.isalpha() for c in token)

    def each_mixed(change) -> str:
        return _TOKEN.sub(lambda m: change(m.group(0)) if mixed(m.group(0)) else m.group(0), sk)

    if not any(mixed(m.group(0)) for m in _TOKEN.finditer(sk)):
        return []
    out = [each_mixed(lambda t, table=str.maketrans({**_LEET, "1": one}): t.translate(table)) for one in ("i", "l")]
    out.append(each_mixed(lambda t: re.sub(r"[0-9]+", "", t)))
    return out


# A stray digit stuck to a word by punctuation alone ("Correct!!1", "1.Correct"); "Answer: 1" and "Correct 1" are
# left alone (a label, or a space, may introduce an answer), and so is a digit in brackets, braces or tags
# ("\\boxed{7}", "<answer>2</answer>", "f(3)"): a container holds an answer, it does not disguise a word.
_STRAY_DIGIT = re.compile(r"(?<=[^\W\d_])([^\w\s:=(){}\[\]<>]*)\d(?![\w.,]?\d)"
                          r"|(?<![\w.,(){}\[\]<>])\d(?!\d)(?=[^\w\s:=(){}\[\]<>]*[^\W\d_])")


def disguise_readings(sk: str) -> list[str]:
    """The skeleton and its readings with disguises undone: single letters joined, leetspeak read, stray digits
    dropped (each reading is checked; honest text reads the same in all of them)."""
    readings = [sk]
    collapsed = _collapse_spaced(sk)
    if collapsed != sk:
        readings.append(collapsed)
    for reading in list(readings):
        readings += [r for r in _unleet(reading) if r not in readings]
    for reading in list(readings):
        unstuck = _STRAY_DIGIT.sub(lambda m: m.group(1) or "", reading)
        if unstuck not in readings:
            readings.append(unstuck)
    return readings


# ------------------------------------------------------------------------------------------------- templates

# Blanks of a template: "<...>" slots, "[[rating]]", bracketed option lists and instructions, "{score}", runs of
# underscores, ellipses, question marks standing for a value, empty table cells.
_SLOT = re.compile(r"\[\[[^\[\]\n]{0,30}\]\]|<[^<>\n]{0,80}>|\[[^\[\]\n]{0,80}\]|\{\{?[a-z_ \t]{1,40}\}?\}")
_BLANK = re.compile(r"_{2,}|\.{3,}|…|(?<![\w?])\?+(?![\w?])|(?<=\|)[ \t]*(?=\|)")
_DOUBLE_BRACKET = re.compile(r"^\[\[")
_RATED = re.compile(r"\b(?:rating|score|verdict|grade|judg(?:e)?ment|decision)\s*[\"']?\s*[:=]?\s*"
                    r"\[\[[^\]\n]{1,20}\]\]")
_LABELLED = re.compile(r"[\w\"']\s*[:=]")
_NUMBER = re.compile(r"^\d{1,3}(?:\.\d+)?$")
# The fields of a verdict record ("result" is left out: a record of a match's result is an answer).
_VERDICT_FIELDS = (TEMPLATE_LABELS - {"result"}) | (GRADING & _APPROVING) | {"is"}
_JSON_KEY = re.compile(r"\"([^\"\n]{1,40})\"\s*:")
_FENCE = re.compile(r"(?:```|''')[a-z]*")  # a code fence; the skeleton writes backquotes as apostrophes


def _slot_words_ok(body: str) -> bool:
    words = _words(body)
    return any(not w.isdigit() for w in words) and all(w in TEMPLATE_VOCABULARY or _NUMBER.match(w) for w in words)


def _template_only(sk: str, reference_words: list[str]) -> bool:
    """The response is a grading template's skeleton with no answer: its labels ("Grade:", "Reasoning:",
    ``"score":``), rubric criteria and verdict words, with blanks where the answer would go ("<...>", "[[rating]]",
    "[CORRECT/INCORRECT]", "__", empty table cells) or with an approving verdict filled in (a JSON verdict)."""
    if _RATED.search(sk):
        return not _has_all(_words(sk), reference_words)
    slots = 0

    def blank(match: re.Match) -> str:
        nonlocal slots
        text = match.group(0)
        if _DOUBLE_BRACKET.match(text) or _slot_words_ok(text.strip("<>[]{}")):
            slots += 1
            return " "
        return text

    rest = _SLOT.sub(blank, _TAG.sub(" ", _FENCE.sub(" ", sk)))
    rest, blanks = _BLANK.subn(" ", rest)
    rest = rest.replace("_", " ")  # field names: "is_correct"
    words = _words(rest)
    if any(not (w in TEMPLATE_VOCABULARY or _NUMBER.match(w)) for w in words):
        return False
    if _has_all(_words(sk), reference_words):
        return False
    labelled = any(w in TEMPLATE_LABELS for w in _words(sk))
    if slots or blanks:
        return labelled
    keys = [_words(k) for k in _JSON_KEY.findall(rest)]
    if keys and rest.lstrip(" '\n[").startswith("{") and all(k and set(k) <= _VERDICT_FIELDS for k in keys):
        return True  # a JSON record of grading fields and nothing else: {"score": 9, "is_correct": true}
    return labelled and _LABELLED.search(rest) is not None and any(w in _APPROVING for w in words)


# An answer marker with nothing after it: "The answer is:", "Final answer =", "My answer would be".
_POINTS_AT_NOTHING = re.compile(r"\b(?:answer|solution|result)s?\s*(?:(?:is|would\s+be|will\s+be)\s*[:=]?|[:=])"
                                r"[\W_]*$")


def _marker_points_at_nothing(sk: str) -> bool:
    tail = _BLANK.sub(" ", _SLOT.sub(lambda m: " " if _slot_words_ok(m.group(0).strip("<>[]{}")) else m.group(0),
                                     _TAG.sub(" ", sk[-400:])))
    return _POINTS_AT_NOTHING.search(tail) is not None


def precheck(response: str, *, prompt: str | None = None, reference: str | None = None,
             max_chars: int = 200_000) -> str | None:
    """The reason ``response`` must not reach the judge, or None. Reasons: "not_text", "too_long", "empty",
    "empty_answer", "bare_opener", "verdict_only", "prompt_echo", "refusal", "meta_talk", "grading_template"."""
    if not isinstance(response, str):
        return "not_text"
    if len(response) > max_chars:
        return "too_long"
    sk = skeleton(response)
    if not any(ch.isalnum() for ch in sk):
        return "empty"
    question_sk = skeleton(prompt) if isinstance(prompt, str) else ""
    reference_words = _words(skeleton(reference)) if isinstance(reference, str) else []
    for i, reading in enumerate(disguise_readings(sk)):
        why = _says_nothing(reading, question_sk, reference_words, disguised=i > 0)
        if why is not None:
            return why
    if question_sk.strip():
        question_words = [w for w in _words(question_sk) if not _made_of(w, FILLER)]
        if question_words and [w for w in _words(sk) if not _made_of(w, FILLER)] == question_words:
            return "prompt_echo"
    if _refuses(sk):
        return "refusal"
    return None
