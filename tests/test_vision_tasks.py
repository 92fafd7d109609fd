"""Generated vision tasks (vision:count|classify|ground) and the grounding verifier's box-size constraint."""

import numpy as np
import pytest

from rlvr.tasks import DataError, load_tasks
from rlvr.tasks.vision import CELL, COLOURS, SHAPES, Item, decode_png, parse_spec, render
from rlvr.verifiers import verify
from rlvr.verifiers.grounding import box_size_reward


def _cells(image: np.ndarray) -> dict[tuple[int, int], str]:
    """The colour of every lit cell of an image, read back from its pixels."""
    names = {rgb: name for name, rgb in COLOURS.items()}
    lit = {}
    for r in range(4):
        for c in range(4):
            block = image[r * CELL:(r + 1) * CELL, c * CELL:(c + 1) * CELL].reshape(-1, 3)
            colours = {tuple(int(v) for v in px) for px in block if px.any()}
            if colours:
                assert len(colours) == 1, f"cell {(r, c)} mixes colours {colours}"
                lit[(r, c)] = names[colours.pop()]
    return lit


def test_count_reference_matches_the_pixels():
    for task in load_tasks("vision:count:n=150,seed=2"):
        image = decode_png(task.images[0])
        assert image.shape == (32, 32, 3)
        colour = task.prompt[0]["content"][1]["text"].split()[2]
        assert task.reference == str(sum(1 for name in _cells(image).values() if name == colour))
        assert task.verifier == "exact"
    answers = {t.reference for t in load_tasks("vision:count:n=150,seed=2")}
    assert answers == {"0", "1", "2", "3", "4"}  # every count up to max_count occurs


def test_ground_reference_is_the_target_box():
    for task in load_tasks("vision:ground:n=100,seed=1"):
        image = decode_png(task.images[0])
        colour = task.prompt[0]["content"][1]["text"].split()[3]
        cells = [rc for rc, name in _cells(image).items() if name == colour]
        rows, cols = [r for r, _ in cells], [c for _, c in cells]
        assert task.reference == [min(cols) * CELL, min(rows) * CELL, (max(cols) + 1) * CELL, (max(rows) + 1) * CELL]
        assert len(cells) in (1, 2) and task.verifier == "grounding"
        assert verify("grounding", str(task.reference), task.reference).score == 1.0


@pytest.mark.parametrize("ask, answers", [("colour", {"red", "green", "blue", "yellow"}), ("shape", set(SHAPES))])
def test_classify_answers(ask, answers):
    tasks = load_tasks(f"vision:classify:n=100,ask={ask}")
    assert {t.reference for t in tasks} == answers
    for task in tasks:
        lit = _cells(decode_png(task.images[0]))
        assert len(lit) == 1
        if ask == "colour":
            assert list(lit.values()) == [task.reference]


def test_shapes_differ_in_pixels():
    masks = {s: render([Item(0, 0, "red", s)])[:8, :8, 0] > 0 for s in SHAPES}
    assert masks["square"].all() and not masks["circle"].all() and not masks["triangle"].all()
    assert (masks["circle"] != masks["triangle"]).any()


@pytest.mark.parametrize("kind", ["count", "classify", "ground"])
def test_seeded_deterministic_and_heldout_split_by_layout(kind):
    n = 40 if kind == "classify" else 300
    heldout_n = 10 if kind == "classify" else 60
    a = load_tasks(f"vision:{kind}:n={n},seed=5")
    assert [(t.id, t.images) for t in a] == [(t.id, t.images) for t in load_tasks(f"vision:{kind}:n={n},seed=5")]
    assert [t.id for t in a] != [t.id for t in load_tasks(f"vision:{kind}:n={n},seed=6")]
    held = load_tasks(f"vision:{kind}:split=eval,n={heldout_n},seed=5")
    held_other_seed = load_tasks(f"vision:{kind}:split=eval,n={heldout_n},seed=9")
    train_layouts = {t.meta["layout"] for t in a} | {t.meta["layout"] for t in load_tasks(f"vision:{kind}:n={n},seed=6")}
    assert not train_layouts & ({t.meta["layout"] for t in held} | {t.meta["layout"] for t in held_other_seed})
    assert len({t.id for t in a}) == n and all(t.meta["split"] == "train" for t in a)


def test_text_prompt_and_mixture():
    tasks = load_tasks("vision:count:n=3,prompt=text; vision:ground:n=3")
    assert tasks[0].prompt.startswith("<image>How many")
    assert {t.meta["mixture"] for t in tasks} == {"vision:count", "vision:ground"}


@pytest.mark.parametrize("spec, message", [
    ("vision:colour", "KIND one of count, classify, ground"),
    ("vision:count:n=0", "n must be >= 1"),
    ("vision:count:split=test", "split must be one of train, eval"),
    ("vision:count:colours=9", "colours must be in 2..6"),
    ("vision:count:size=3", "unknown option 'size'"),
    ("vision:count:n=ten", "n must be an integer"),
    ("vision:classify:n=500", "found only"),  # 192 distinct one-object layouts in all
    ("vision:classify:ask=size", "ask must be colour or shape"),
])
def test_bad_specs_are_data_errors(spec, message):
    with pytest.raises(DataError, match=message):
        load_tasks(spec)


def test_box_constraint_option_reaches_the_verifier():
    (task,) = load_tasks("vision:ground:n=1,box_constraint=1")
    assert task.verifier_options == {"box_constraint": True}
    assert parse_spec("vision:ground").box_constraint == 0


# ------------------------------------------------------------------- grounding: GUI-G1's box-size constraint

WHOLE_IMAGE = "[0, 0, 32, 32]"


@pytest.mark.parametrize("gold", [[8, 8, 16, 16], [0, 0, 8, 16], [16, 8, 32, 16], [24, 24, 32, 32]])
def test_whole_image_box_scores_the_area_ratio_and_the_constraint_removes_it(gold):
    area = (gold[2] - gold[0]) * (gold[3] - gold[1])
    plain = verify("grounding", WHOLE_IMAGE, gold)
    assert plain.score == pytest.approx(area / 32 ** 2) and plain.status == "partial"
    gated = verify("grounding", WHOLE_IMAGE, gold, box_constraint=True)
    assert gated.score == 0.0 and gated.status == "incorrect" and gated.details["size_violations"] == 1
    exact = verify("grounding", str(gold), gold, box_constraint=True)
    assert exact.score == 1.0 and exact.details["size_violations"] == 0


@pytest.mark.parametrize("pred, factor, kept", [
    ("[8, 8, 24, 16]", True, True),     # twice as wide: inside the default factor 2
    ("[8, 8, 25, 16]", True, False),    # just over twice as wide
    ("[8, 8, 12, 16]", True, True),     # half as wide
    ("[8, 8, 11, 16]", True, False),    # under half
    ("[8, 8, 25, 16]", 3.0, True),      # a looser factor
    ("[4, 4, 20, 20]", 1.5, False),     # twice as tall and wide with factor 1.5
])
def test_size_gate_factor(pred, factor, kept):
    plain = verify("grounding", pred, [8, 8, 16, 16])
    gated = verify("grounding", pred, [8, 8, 16, 16], box_constraint=factor)
    assert plain.score > 0
    assert gated.score == (plain.score if kept else 0.0)


def test_gui_g1_box_reward_by_hand():
    # whole image vs [8,8,16,16] on 32x32: closeness 0.75, 0.75, 0.5, 0.5 -> harmonic mean 4 / (4/3*2 + 2*2) = 0.6
    assert box_size_reward((0, 0, 32, 32), (8, 8, 16, 16), (32, 32)) == pytest.approx(0.6)
    assert box_size_reward((8, 8, 16, 16), (8, 8, 16, 16), (32, 32)) == 1.0
    assert box_size_reward((0, 0, 8, 8), (24, 24, 32, 32), (32, 32)) == pytest.approx(0.25)  # every side 24 off
    # blended into the pair's score: (IoU + beta R_box) / (1 + beta); IoU(whole, gold) = 1/16
    v = verify("grounding", WHOLE_IMAGE, [8, 8, 16, 16], box_weight=0.5, image_size=[32, 32])
    assert v.score == pytest.approx((1 / 16 + 0.5 * 0.6) / 1.5)
    assert verify("grounding", "[8, 8, 16, 16]", [8, 8, 16, 16], box_weight=0.5, image_size=[32, 32]).score == 1.0
    both = verify("grounding", WHOLE_IMAGE, [8, 8, 16, 16], box_weight=0.5, image_size=[32, 32], box_constraint=True)
    assert both.score == 0.0


@pytest.mark.parametrize("options, message", [
    ({"box_constraint": 1.0}, "box_constraint"),
    ({"box_constraint": "yes"}, "box_constraint"),
    ({"box_weight": -1.0, "image_size": [32, 32]}, "box_weight"),
    ({"box_weight": 0.5}, "image_size"),
    ({"box_weight": 0.5, "image_size": [32, 0]}, "image_size"),
])
def test_bad_constraint_options_are_errors_not_crashes(options, message):
    v = verify("grounding", "[0, 0, 8, 8]", [0, 0, 8, 8], **options)
    assert v.status == "error" and v.reason == "bad_option" and message in v.details["error"]


def test_target_fixes_the_colour_asked_about():
    for task in load_tasks("vision:count:n=40,target=blue") + load_tasks("vision:ground:n=40,target=blue"):
        assert " blue " in task.prompt[0]["content"][1]["text"]
    with pytest.raises(DataError, match="target must be one of the colours in use"):
        load_tasks("vision:count:colours=2,target=blue")  # red and green only


def test_max_size_two_gives_objects_of_up_to_four_cells():
    sizes = set()
    for task in load_tasks("vision:classify:n=200,colours=6,max_size=2"):
        lit = _cells(decode_png(task.images[0]))
        assert set(lit.values()) == {task.reference}
        sizes.add(len(lit))
    assert sizes == {1, 2, 4}


# Every documented way of writing one box (rlvr.verifiers.grounding, docs/rewards.md): each must earn full credit
# against the box it names, and the same box a little off must earn partial credit, not nothing.
GOLD = [8, 16, 24, 40]
BOX_FORMS = [
    "[8, 16, 24, 40]", "(8, 16, 24, 40)", '{"bbox_2d": [8, 16, 24, 40]}', "[[8,16,24,40]]",
    "(8,16),(24,40)", "(8, 16) (24, 40)", "(8, 16); (24, 40)", "[[8,16],[24,40]]", "[8, 16], [24, 40]",
    "[(8,16),(24,40)]", "((8, 16), (24, 40))", "from (8, 16) to (24, 40)", "(8,16) -> (24,40)", "(8, 16) - (24, 40)",
    "<|box_start|>(8,16),(24,40)<|box_end|>", "<answer>[[8, 16], [24, 40]]</answer>",
    "top-left (8,16) bottom-right (24,40)", "Top left: (8, 16), bottom right: (24, 40)",
    "top_left=[8,16]; bottom_right=[24,40]", "upper-left (8, 16) and lower-right (24, 40)",
    "The top-left corner is at (8, 16) and the bottom-right corner is at (24, 40).",
    "bottom-right (24, 40), top-left (8, 16)", "top-right (24, 16) bottom-left (8, 40)",
    "Top-left corner: [8, 16]\nBottom-right corner: [24, 40]",
]


@pytest.mark.parametrize("response", BOX_FORMS)
def test_every_documented_box_form_gets_credit(response):
    v = verify("grounding", response, GOLD)
    assert (v.status.value, v.score, v.extracted) == ("correct", 1.0, "[[8, 16, 24, 40]]"), v
    shifted = response.replace("8", "9")  # x1 moved by one: IoU 15/16
    v = verify("grounding", shifted, GOLD)
    assert v.status.value == "partial" and v.score == pytest.approx(15 / 16), (shifted, v)


@pytest.mark.parametrize("response, reason", [
    ("top-left (8, 16) top-right (24, 16)", "no_box_found"),  # two corners that do not span a box
    ("bottom-left (8, 40) bottom-right (24, 40)", "no_box_found"),
    ("(24, 40), (8, 16)", "no_valid_box"),  # unlabelled: top-left first, so this one is inside out
    ("The point is (8, 16).", "no_box_found"),
    ("(8, 16) because it is left of (24, 40)", "no_box_found"),  # prose between two points: not one box
])
def test_point_pairs_that_are_not_a_box(response, reason):
    v = verify("grounding", response, GOLD)
    assert v.reason == reason and v.score == 0.0, v


def test_two_point_boxes_count_as_separate_boxes():
    v = verify("grounding", "[[8,16],[24,40]] and [[0,0],[4,4]]", [GOLD, [0, 0, 4, 4]])
    assert v.score == 1.0 and v.extracted == "[[8, 16, 24, 40], [0, 0, 4, 4]]"
