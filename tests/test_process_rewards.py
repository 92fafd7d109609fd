"""rlvr.rewards.process: step boundaries, the arith_steps rule source, the prm model source and the registry."""

import pytest
import torch
from tokenizers import Tokenizer, decoders, models
from transformers import LlamaConfig, LlamaForTokenClassification, PreTrainedTokenizerFast

from rlvr.errors import UnknownName, UserError
from rlvr.models.tiny import char_tokenizer
from rlvr.rewards.process import (
    ProcessRewards,
    check_process_options,
    compute_process,
    line_verdict,
    process_source_names,
    register_process_source,
    step_metrics,
    step_spans,
)
from rlvr.rollout import RolloutBatch
from rlvr.tasks import Task

CHAR = char_tokenizer()


def merged_tokenizer() -> PreTrainedTokenizerFast:
    """Tokens of several characters: BPE merges of "\\n\\n", "=2\\n", "46", "\\n#", "1+1" over single characters."""
    chars = [chr(c) for c in range(32, 127)] + ["\n"]
    merges = [("\n", "\n"), ("=", "2"), ("=2", "\n"), ("4", "6"), ("\n", "#"), ("1", "+"), ("1+", "1")]
    vocab = {tok: i for i, tok in enumerate(["<pad>", "<s>", "</s>", "<unk>", *chars, *("".join(m) for m in merges)])}
    backend = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="<unk>"))
    backend.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(tokenizer_object=backend, bos_token="<s>", eos_token="</s>", pad_token="<pad>",
                                   unk_token="<unk>", clean_up_tokenization_spaces=False)


MERGED = merged_tokenizer()


def encode(tokenizer, text: str, eos: bool = False) -> list[int]:
    return tokenizer(text, add_special_tokens=False)["input_ids"] + ([tokenizer.eos_token_id] if eos else [])


def batch_of(tokenizer, texts: list[str], eos: bool = True, width: int | None = None) -> RolloutBatch:
    rows = [encode(tokenizer, t, eos) for t in texts]
    width = width or max(1, max(len(r) for r in rows))
    ids = torch.full((len(rows), width), tokenizer.pad_token_id)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, :len(r)], mask[i, :len(r)] = torch.tensor(r, dtype=torch.long), 1
    prompt = torch.ones((len(rows), 1), dtype=torch.long)
    return RolloutBatch(prompt, prompt, ids, mask, torch.zeros(ids.shape), torch.zeros(len(rows), dtype=torch.bool),
                        torch.arange(len(rows)))


def tasks_for(n: int, prompt: str = "12+34+5=") -> list[Task]:
    return [Task(prompt=prompt, reference="51", id=f"t{i}") for i in range(n)]


def check_text(tokenizer, text, spans):
    """Spans tile the tokens in order, and their texts tile the decoded response."""
    ids = encode(tokenizer, text)
    assert [s[0] for s in spans] == [0] + [s[1] + 1 for s in spans[:-1]] and spans[-1][1] == len(ids) - 1
    assert "".join(s[2] for s in spans) == text


# ------------------------------------------------------------------------------------------- step_spans


@pytest.mark.parametrize("text, steps, merged_steps", [
    ("12+34=46\n46+5=51\n#51", ["12+34=46\n", "46+5=51\n", "#51"], None),
    ("1+1=2\n", ["1+1=2\n"], None),
    ("no newline at all", ["no newline at all"], None),
    ("a\n\nb\n", ["a\n", "\nb\n"], ["a\n\n", "b\n"]),   # a blank line joins the next step; "\n\n" as one
    ("\n\nx\ny", ["\n\nx\n", "y"], None),                  # token ends the step it closes
    ("a\nb\n\n\n", ["a\n", "b\n\n\n"], None),                # trailing blank text joins the last step
    ("x", ["x"], None),
])
@pytest.mark.parametrize("tokenizer", [CHAR, MERGED], ids=["char", "merged"])
def test_step_texts(tokenizer, text, steps, merged_steps):
    spans = step_spans(tokenizer, encode(tokenizer, text))
    assert [s[2] for s in spans] == (merged_steps if tokenizer is MERGED and merged_steps else steps)
    check_text(tokenizer, text, spans)


def test_step_spans_on_single_characters():
    ids = encode(CHAR, "12+34=46\n46+5=51\n#51", eos=True)
    assert [(a, b) for a, b, _ in step_spans(CHAR, ids)] == [(0, 8), (9, 16), (17, 20)]  # EOS (20) ends the last


@pytest.mark.parametrize("text, tokens, ends", [
    # "=2\n" is one token: it ends its step
    ("1+1=2\n3", ["1+1", "=2\n", "3"], [1, 2]),
    # "\n\n" is one token: it ends the step, and the blank line is part of it
    ("ab\n\ncd", ["a", "b", "\n\n", "c", "d"], [2, 4]),
    # "\n#" holds the delimiter and the next step's first character
    ("46\n#46", ["46", "\n#", "46"], [1, 2]),
])
def test_step_spans_on_multi_character_tokens(text, tokens, ends):
    ids = encode(MERGED, text)
    assert [MERGED.decode([i]) for i in ids] == tokens
    spans = step_spans(MERGED, ids)
    assert [s[1] for s in spans] == ends
    check_text(MERGED, text, spans)


def byte_level_tokenizer() -> PreTrainedTokenizerFast:
    """A byte-level BPE trained here on a few lines: tokens split multi-byte characters and merge across lines."""
    from tokenizers import pre_tokenizers, trainers

    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    backend.decoder = decoders.ByteLevel()
    corpus = ["12+34=46\n46+5=51\n\n#51\n", "h\u00e9llo w\u00f6rld \u65e5\u672c\u8a9e\n\nnext step\n", "1+1=2\n\n\n"] * 50
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<pad>", "</s>"], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    backend.train_from_iterator(corpus, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="<pad>", eos_token="</s>")


@pytest.mark.parametrize("text", ["12+34=46\n46+5=51\n\n#51", "h\u00e9llo w\u00f6rld \u65e5\u672c\u8a9e\n\nnext step\n",
                                  "\u65e5\n\u672c", "\u00fc\n\n\n1+1=2", "1+1=2\n\n\n12+34=46\n#46"])
def test_step_spans_on_byte_level_tokens(text):
    tokenizer = byte_level_tokenizer()
    ids = encode(tokenizer, text)
    assert len(ids) != len(text)  # tokens are not characters: merged, or bytes of one character
    spans = step_spans(tokenizer, ids)
    check_text(tokenizer, text, spans)
    for first, last, step in spans[:-1]:
        # the step ends at the first token holding a newline after its content (leading blank lines join it)
        assert "\n" in tokenizer.decode([ids[last]]) and "\n" not in tokenizer.decode(ids[first:last]).lstrip()
        assert step.strip()


def metaspace_tokenizer() -> PreTrainedTokenizerFast:
    """SentencePiece-style: spaces become a word-start mark, and decoding a slice drops its leading space."""
    from tokenizers import pre_tokenizers, trainers

    backend = Tokenizer(models.BPE(unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Metaspace()
    backend.decoder = decoders.Metaspace()
    trainer = trainers.BpeTrainer(vocab_size=200, special_tokens=["<pad>", "</s>", "<unk>"], show_progress=False)
    backend.train_from_iterator(["one two\n four five\n six", "1+1=2\n 2+2=4\n #4"] * 20, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="<pad>", eos_token="</s>", unk_token="<unk>")


@pytest.mark.parametrize("tokenizer, text, ends", [
    (CHAR, "1+1=2\n46\n#46", [6, 9, 12]),
    (MERGED, "1+1=2\n46\n#46", [6, 9, 12]),
    (CHAR, "a\nb\n\n\n", [2, 4]),          # trailing blank lines join the last step but not its end
    (CHAR, "x\n ", [2]),
    (MERGED, "46\n#", [3, 4]),             # one token ends a step and begins the next, which gets the EOS
    (CHAR, "", []),
    ("metaspace", "one two\n four five\n six", [8, 19, 23]),  # slices decode without their leading space
    ("metaspace", "1+1=2\n 2+2=4\n #4", [6, 13, 16]),
])
def test_step_end_offsets_in_the_decoded_response(tokenizer, text, ends):
    from rlvr.rewards.process import _spans_and_ends

    tokenizer = metaspace_tokenizer() if tokenizer == "metaspace" else tokenizer
    ids = encode(tokenizer, text, eos=bool(text))
    assert tokenizer.decode(ids, skip_special_tokens=True) == text
    assert _spans_and_ends(tokenizer, ids, "\n", with_ends=True)[1] == ends


def test_arith_steps_on_a_sentencepiece_style_tokenizer():
    tokenizer, text = metaspace_tokenizer(), "1+1=2\n 2+2=1\n #4"
    assert tokenizer.decode(encode(tokenizer, text)) == text
    pr = compute_process("arith_steps", batch_of(tokenizer, [text]), [text], tasks_for(1), tokenizer)
    assert pr.values[pr.step_end].tolist() == [1.0, -1.0, 0.0]


def test_the_next_step_keeps_the_characters_after_the_delimiter():
    spans = step_spans(MERGED, encode(MERGED, "46\n#46"))
    assert [s[2] for s in spans] == ["46\n", "#46"]


def test_a_token_ending_the_last_step_and_beginning_another_keeps_both_lines():
    spans = step_spans(MERGED, encode(MERGED, "46\n#"))  # tokens "46", "\n#": no token is left for "#"
    assert spans == [(0, 1, "46\n#")]


@pytest.mark.parametrize("delimiter, text, steps", [
    ("\n\n", "a\nb\n\nc\n\nd", ["a\nb\n\n", "c\n\n", "d"]),
    ("|;", "1+1=2|; 2+2=5|;|;", ["1+1=2|;", " 2+2=5|;|;"]),
    ("#", "x\n#5", ["x\n#", "5"]),
])
@pytest.mark.parametrize("tokenizer", [CHAR, MERGED], ids=["char", "merged"])
def test_other_delimiters(tokenizer, delimiter, text, steps):
    spans = step_spans(tokenizer, encode(tokenizer, text), delimiter)
    assert [s[2] for s in spans] == steps
    check_text(tokenizer, text, spans)


def test_empty_response_and_only_eos():
    assert step_spans(CHAR, []) == []
    assert step_spans(CHAR, [CHAR.eos_token_id]) == [(0, 0, "")]


def test_step_spans_are_fast_on_long_steps():
    import time

    start = time.perf_counter()
    spans = step_spans(CHAR, encode(CHAR, "x" * 20_000 + "\n" + "1+1=2\n" * 2000 + "\n" * 20_000 + "y"))
    assert time.perf_counter() - start < 5.0  # O(length): ~0.2 s; decoding every prefix would take minutes
    assert len(spans) == 2002 and spans[-1][2] == "\n" * 20_000 + "y"


# ----------------------------------------------------------------------------------------- arith_steps


@pytest.mark.parametrize("line, verdict", [
    ("12+34=46", "true"), ("12 + 34 = 46", "true"), ("  46+5=51 ", "true"), ("5-7=-2", "true"),
    ("-2+3=1", "true"), ("3*4=12", "true"), ("-3*-4=12", "true"), ("0*9=0", "true"),
    ("12+34=47", "false"), ("5-7=2", "false"), ("3*4=7", "false"),
    ("#51", "answer"), (" # 51", "answer"),
    ("", "blank"), ("   ", "blank"),
    ("so 12+34=46", "other"), ("12+34+5=51", "other"), ("12+34=", "other"), ("12/4=3", "other"),
    ("1.5+1=2.5", "other"), ("12+34=46=46", "other"), ("hello", "other"), ("+" * 10_000, "other"),
    ("1" * 31 + "+0=" + "1" * 31, "false"),          # true, but over 30 digits: counted false, never computed
    ("1" * 30 + "+0=" + "1" * 30, "true"),
    ("9" * 100_000 + "*9=1", "false"),
])
def test_line_verdicts(line, verdict):
    assert line_verdict(line) == verdict


@pytest.mark.parametrize("text, rewards", [
    ("12+34=46\n46+5=51\n#51", [1.0, 1.0, 0.0]),                  # correct lines; the answer is the verifier's
    ("12+34=47\n47+5=52\n#52", [-1.0, 1.0, 0.0]),                 # a false line, then a true one built on it
    ("1+1=2\n1+1=2\n12+34=46\n46+5=51\n#51", [1.0, 1.0, 1.0, 1.0, 0.0]),  # padding lines are true steps
    ("I think it is 51\n#51", [0.0, 0.0]),                        # not an equation: `other`
    ("12+34=46", [1.0]),                                          # no newline: one step
    ("#51", [0.0]),
    ("\u2603\x00 garbage )(*&^\n", [0.0]),
    ("9" * 5000 + "+1=1" + "0" * 5000 + "\n#1", [-1.0, 0.0]),     # a huge number never crashes: false
])
@pytest.mark.parametrize("tokenizer", [CHAR, MERGED], ids=["char", "merged"])
def test_arith_steps_values_on_step_ends(tokenizer, text, rewards):
    batch = batch_of(tokenizer, [text, "1+1=2"], width=len(encode(tokenizer, text)) + 4)
    pr = compute_process("arith_steps", batch, [text, "1+1=2"], tasks_for(2), tokenizer)
    assert pr.values.dtype == torch.float32 and pr.step_end.dtype == torch.bool
    assert pr.values.shape == pr.step_end.shape == batch.response_ids.shape
    ends = torch.nonzero(pr.step_end[0]).flatten().tolist()
    spans = step_spans(tokenizer, encode(tokenizer, text, eos=True))
    assert ends == [last for _, last, _ in spans]
    assert pr.values[0, ends].tolist() == rewards
    assert pr.values[0][~pr.step_end[0]].abs().sum() == 0
    assert not (pr.step_end & ~batch.response_mask.bool()).any()  # never on padding
    last = int(batch.response_mask[0].sum()) - 1
    assert pr.step_end[0, last]  # the last step ends on EOS
    assert pr.values[1].tolist()[:int(batch.response_mask[1].sum())][-1] == 1.0  # row 2: one true step on its EOS


def test_arith_steps_options():
    text = "12+34=47\n46+5=51\nwell\n#51"
    batch = batch_of(CHAR, [text])
    pr = compute_process("arith_steps", batch, [text], tasks_for(1), CHAR, true_reward=0.5, false_reward=-2.0,
                         other=-0.25, answer=3.0)
    assert pr.values[pr.step_end].tolist() == [-2.0, 0.5, -0.25, 3.0]


@pytest.mark.parametrize("text, rewards", [
    ("1+1=2\n1+1=3|;2+2=4\nso\n|;#4", [-1.0, 1.0, 0.0]),   # any false line makes the step false
    ("1+1=3\n1+1=2|;well\n#2|;", [-1.0, 0.0]),              # an answer line outranks `other`
    ("a\nb|;", [-0.5]),
])
def test_arith_steps_with_several_lines_per_step(text, rewards):
    pr = compute_process("arith_steps", batch_of(CHAR, [text]), [text], tasks_for(1), CHAR, delimiter="|;",
                         other=-0.5, answer=0.0)
    assert pr.values[pr.step_end].tolist() == rewards


def test_arith_steps_on_generated_solutions():
    from rlvr.tasks import load_tasks

    tasks = load_tasks("arithmetic:chain:terms=5,ops=+-*,n=16")
    texts = [t.meta["solution"] for t in tasks]
    pr = compute_process("arith_steps", batch_of(CHAR, texts), texts, tasks, CHAR)
    assert pr.step_end.sum(dim=1).tolist() == [5] * 16
    assert (pr.values[pr.step_end].view(16, 5) == torch.tensor([1.0, 1.0, 1.0, 1.0, 0.0])).all()


def test_rows_with_a_gap_in_the_mask_and_an_empty_row():
    batch = batch_of(CHAR, ["1+1=2\n2+2=5", ""], eos=False, width=14)
    batch.response_mask[0, 3] = 0  # a token outside the response (an environment token, say) is skipped
    pr = compute_process("arith_steps", batch, ["", ""], tasks_for(2), CHAR)
    assert pr.step_end[1].sum() == 0 and pr.step_end[0, 3] == 0
    assert pr.values[0][pr.step_end[0]].tolist() == [0.0, -1.0]  # "1+12" (the "=" left out) is not an equation


# -------------------------------------------------------------------------------------------- metrics


def test_step_metrics():
    values = torch.tensor([[1.0, 0, -1.0, 0.0], [0, 0, 0, -1.0], [0, 0, 0, 0]])
    ends = torch.tensor([[1, 0, 1, 1], [0, 0, 0, 1], [0, 0, 0, 0]], dtype=torch.bool)
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 1, 1], [1, 0, 0, 0]])
    m = step_metrics(ProcessRewards(values, ends), mask)
    assert m == pytest.approx({"process/steps_mean": 4 / 3, "process/reward_mean": -1 / 4,
                               "process/false_step_frac": 2 / 4})
    m = step_metrics(ProcessRewards(values, ends), torch.zeros_like(mask))
    assert m == {"process/steps_mean": 0.0, "process/reward_mean": 0.0, "process/false_step_frac": 0.0}


# ------------------------------------------------------------------------------------------- registry


def test_registry_names_and_errors():
    assert {"arith_steps", "prm"} <= set(process_source_names())
    batch = batch_of(CHAR, ["1"])
    with pytest.raises(UnknownName, match=r"unknown process source 'arith_step' \(did you mean 'arith_steps'\?\); "
                                          r"known: .*arith_steps.*prm"):
        compute_process("arith_step", batch, ["1"], tasks_for(1), CHAR)
    with pytest.raises(UserError, match=r"'true' not known to process source 'arith_steps'; known: true_reward"):
        compute_process("arith_steps", batch, ["1"], tasks_for(1), CHAR, true=1.0)
    check_process_options("prm", {"path": "x", "delimiter": "\n\n"})
    with pytest.raises(UserError, match=r"'paht' not known to process source 'prm'; known: path, delimiter"):
        check_process_options("prm", {"paht": "x"})
    with pytest.raises(UnknownName, match="unknown process source 'nope'"):
        check_process_options("nope", {})
    with pytest.raises(ValueError, match="1 rows, 2 responses and 1 tasks"):
        compute_process("arith_steps", batch, ["1", "2"], tasks_for(1), CHAR)
    with pytest.raises(UserError, match="delimiter must be a non-empty string"):
        compute_process("arith_steps", batch, ["1"], tasks_for(1), CHAR, delimiter="")


def test_a_source_of_your_own_is_checked():
    @register_process_source("test_off_the_steps")
    def off_the_steps(batch, responses, tasks, tokenizer, *, where="values"):
        values, ends = torch.zeros(batch.response_ids.shape), torch.zeros(batch.response_ids.shape, dtype=torch.bool)
        if where == "values":
            values[0, 0] = 1.0  # a reward with no step end under it
        elif where == "padding":
            ends[0, -1] = True
        elif where == "shape":
            values = values[:, :1]
        return ProcessRewards(values, ends)

    batch = batch_of(CHAR, ["1+1=2"], width=10)
    for where, message in (("values", "off its step ends"), ("padding", "off the response"), ("shape", "shape")):
        with pytest.raises(ValueError, match=message):
            compute_process("test_off_the_steps", batch, [""], tasks_for(1), CHAR, where=where)
    with pytest.raises(UserError, match="already registered"):
        register_process_source("test_off_the_steps")(lambda *a, **k: None)


# ------------------------------------------------------------------------------------------------ prm


def save_prm(folder, tokenizer, seed: int = 0, num_labels: int = 2):
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=256,
                         num_labels=num_labels, pad_token_id=tokenizer.pad_token_id)
    LlamaForTokenClassification(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def prm_scores(folder, text: str) -> tuple[list[float], list[tuple[int, int]], list[str]]:
    """p1 - p0 at every PRM token of ``text`` by a plain forward, with the tokens' character offsets and texts."""
    from transformers import AutoModelForTokenClassification, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForTokenClassification.from_pretrained(folder).eval()
    enc = tok(text, return_offsets_mapping=True)
    with torch.no_grad():
        probs = model(input_ids=torch.tensor([enc["input_ids"]])).logits[0].softmax(-1)
    return (probs[:, 1] - probs[:, 0]).tolist(), [tuple(o) for o in enc["offset_mapping"]], \
        [tok.decode([i]) for i in enc["input_ids"]]


def prm_reference(folder, text: str, ends: list[int]) -> list[float]:
    """The scores at the PRM tokens that hold each step's last character."""
    scores, offsets, _ = prm_scores(folder, text)
    return [scores[next(k for k, (lo, hi) in enumerate(offsets) if hi > lo and lo < end <= hi)] for end in ends]


@pytest.mark.parametrize("prm_tokenizer", [CHAR, MERGED], ids=["same-tokenizer", "other-tokenizer"])
def test_prm_scores_each_step_at_its_end(tmp_path, prm_tokenizer):
    folder = save_prm(tmp_path / "prm", prm_tokenizer)
    texts = ["12+34=46\n46+5=51\n#51", "1+1=2\n\n12+34=47\n#47", "no steps"]
    batch = batch_of(CHAR, texts, width=30)
    pr = compute_process("prm", batch, texts, tasks_for(3), CHAR, path=str(folder))
    assert pr.values.shape == (3, 30) and pr.values.dtype == torch.float32
    for i, text in enumerate(texts):
        spans = step_spans(CHAR, encode(CHAR, text, eos=True))
        assert torch.nonzero(pr.step_end[i]).flatten().tolist() == [last for _, last, _ in spans]
        scores = pr.values[i][pr.step_end[i]]
        assert ((scores >= -1) & (scores <= 1)).all() and (scores != 0).all()
        ends, total = [], len("12+34+5=")
        for _, _, step in spans:
            total += len(step)
            ends.append(total)
        assert scores.tolist() == pytest.approx(prm_reference(folder, "12+34+5=" + text, ends), abs=1e-5)
    assert (pr.values[~pr.step_end] == 0).all()
    again = compute_process("prm", batch, texts, tasks_for(3), CHAR, path=str(folder), batch_size=1)
    assert torch.allclose(again.values, pr.values, atol=1e-6) and torch.equal(again.step_end, pr.step_end)


def test_prm_reads_the_token_that_ends_the_step_in_its_own_tokenizer(tmp_path):
    """Policy: characters; PRM: merged tokens. "=2\\n" is one PRM token: the step "1+1=2\\n" is read there, the step
    "46\\n" at "\\n#" (which holds its newline), the step "#46" at the last "46"."""
    folder = save_prm(tmp_path / "prm", MERGED, seed=3)
    text = "1+1=2\n46\n#46"
    scores, _, tokens = prm_scores(folder, text)
    assert tokens == ["1+1", "=2\n", "46", "\n#", "46"]
    pr = compute_process("prm", batch_of(CHAR, [text]), [text], [Task("", "46", "t")], CHAR, path=str(folder))
    assert pr.values[0][pr.step_end[0]].tolist() == pytest.approx([scores[1], scores[3], scores[4]], abs=1e-5)


def test_prm_with_a_sentencepiece_style_policy_tokenizer(tmp_path):
    """The policy's slices decode without their leading space; the PRM still reads each step where it ends."""
    folder = save_prm(tmp_path / "prm", CHAR, seed=1)
    policy, text = metaspace_tokenizer(), "1+1=2\n 2+2=4\n #4"
    pr = compute_process("prm", batch_of(policy, [text]), [text], tasks_for(1), policy, path=str(folder))
    expected = prm_reference(folder, "12+34+5=" + text, [8 + 6, 8 + 13, 8 + 16])
    assert pr.values[pr.step_end].tolist() == pytest.approx(expected, abs=1e-5)


def test_prm_input_is_cut_from_the_left_and_cut_steps_score_zero(tmp_path):
    folder = save_prm(tmp_path / "prm", CHAR, seed=2)
    text = "12+34=46\n46+5=51\n#51"
    batch = batch_of(CHAR, [text])
    pr = compute_process("prm", batch, [text], tasks_for(1), CHAR, path=str(folder), max_length=3)
    full = compute_process("prm", batch, [text], tasks_for(1), CHAR, path=str(folder))
    cut, whole = pr.values[pr.step_end].tolist(), full.values[full.step_end].tolist()
    assert cut[:2] == [0.0, 0.0] and cut[2] != 0.0  # only "#51" fits in 3 tokens
    assert torch.equal(pr.step_end, full.step_end) and whole[2] != cut[2]  # the last step read without its context


def test_prm_is_loaded_once_per_folder(tmp_path, monkeypatch):
    from rlvr.rewards import process

    folder = save_prm(tmp_path / "prm", CHAR)
    batch = batch_of(CHAR, ["1+1=2"])
    compute_process("prm", batch, [""], tasks_for(1), CHAR, path=str(folder))
    monkeypatch.setattr("transformers.AutoModelForTokenClassification.from_pretrained",
                        lambda *a, **k: pytest.fail("loaded twice"))
    compute_process("prm", batch, [""], tasks_for(1), CHAR, path=str(folder))
    assert any(key[0] == str(folder.resolve()) for key in process._PRM_CACHE)


def test_prm_errors_name_the_folder(tmp_path):
    batch = batch_of(CHAR, ["1"])
    with pytest.raises(UserError, match="needs reward.process.options.path"):
        compute_process("prm", batch, [""], tasks_for(1), CHAR)
    with pytest.raises(UserError, match="no config.json"):
        compute_process("prm", batch, [""], tasks_for(1), CHAR, path=str(tmp_path))
    two = save_prm(tmp_path / "two", CHAR)
    with pytest.raises(UserError, match="dtype: expected float32, bfloat16 or float16, got 'int8'"):
        compute_process("prm", batch, [""], tasks_for(1), CHAR, path=str(two), dtype="int8")
    causal = tmp_path / "causal"
    from rlvr.models.tiny import TinySpec, save_tiny_model

    save_tiny_model(causal, TinySpec(hidden_size=16, num_layers=1, num_heads=2, intermediate_size=32))
    with pytest.raises(UserError, match=r"causal holds LlamaForCausalLM, not a token-classification model"):
        compute_process("prm", batch, [""], tasks_for(1), CHAR, path=str(causal))
    three = save_prm(tmp_path / "three", CHAR, num_labels=3)
    with pytest.raises(UserError, match=r"three has 3 labels; a process reward model here has 2"):
        compute_process("prm", batch, [""], tasks_for(1), CHAR, path=str(three))


@pytest.mark.parametrize("text, expected", [
    ("5+4=9\n9+6=15\n#15", [1.0, 1.0, 1.0]),   # the final step checked against the reference
    ("5+4=9\n9+6=15\n#14", [1.0, 1.0, -1.0]),  # true steps, wrong answer: the last step is false
    ("5+4=9\n# 15", [1.0, 1.0]),               # spaces around the answer do not matter
    ("", [-1.0]),                              # no step at all scores as an "other" line
])
def test_arith_steps_can_check_the_answer_step_against_the_reference(text, expected):
    from rlvr.models.tiny import char_tokenizer
    from rlvr.rewards.process import compute_process
    from rlvr.rollout.base import RolloutBatch
    from rlvr.tasks import Task

    tok = char_tokenizer()
    ids = tok(text, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    batch = RolloutBatch(torch.ones(1, 1, dtype=torch.long), torch.ones(1, 1, dtype=torch.long), torch.tensor([ids]),
                         torch.ones(1, len(ids), dtype=torch.long), torch.zeros(1, len(ids)),
                         torch.zeros(1, dtype=torch.bool), torch.zeros(1, dtype=torch.long))
    pr = compute_process("arith_steps", batch, [text], [Task(prompt="5+4+6=", reference="15", id="t")], tok,
                         answer="check", other=-1.0)
    assert pr.values[0][pr.step_end[0]].tolist() == expected
    with pytest.raises(Exception, match="'answer' is a number or \"check\""):
        compute_process("arith_steps", batch, [text], [Task(prompt="x", reference="1", id="t")], tok, answer="yes")
