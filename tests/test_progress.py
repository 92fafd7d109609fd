"""Progress where no terminal is: flushed lines a log or a Ray driver shows while the work runs."""

import io

from rlvr.progress import progress_bar


def test_lines_at_every_tenth_of_the_work():
    out = io.StringIO()
    with progress_bar(20, "train", stream=out) as bar:
        for step in range(20):
            bar.advance(f"reward {step / 20:.2f}")
    lines = out.getvalue().splitlines()
    assert [line.split()[1] for line in lines] == [f"{n}/20" for n in range(2, 21, 2)]
    assert lines[-1].startswith("train 20/20 reward 0.95")


def test_a_resumed_run_counts_from_where_it_was():
    out = io.StringIO()
    with progress_bar(10, "train", stream=out, completed=7) as bar:
        for _ in range(3):
            bar.advance()
    assert out.getvalue().splitlines()[-1].startswith("train 10/10")


def test_disabled_is_silent():
    out = io.StringIO()
    with progress_bar(10, "train", enabled=False, stream=out) as bar:
        bar.advance()
    assert out.getvalue() == ""
