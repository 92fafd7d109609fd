"""Config files and plugins from untrusted places: one clear error, never a hang, a blow-up or a silent no-op."""

import sys
import textwrap
import time

import pytest

from rlvr.config import ConfigError, load_config
from rlvr.plugins import PluginError, load_plugin


def _laughs(levels: int, width: int = 9) -> str:
    lines = [f"l0: &l0 [{', '.join(['x'] * width)}]"]
    for i in range(1, levels):
        lines.append(f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * width)}]")
    return "\n".join(lines)


BOMBS = {
    "nested lists": _laughs(9) + "\ndata:\n  verifier_options: {x: *l8}\n",
    "bomb in an unknown section": _laughs(9) + "\n",
    "mappings": textwrap.dedent("""\
        a: &a {k1: v, k2: v, k3: v, k4: v, k5: v, k6: v, k7: v, k8: v}
        b: &b {k1: *a, k2: *a, k3: *a, k4: *a, k5: *a, k6: *a, k7: *a, k8: *a}
        c: &c {k1: *b, k2: *b, k3: *b, k4: *b, k5: *b, k6: *b, k7: *b, k8: *b}
        d: &d {k1: *c, k2: *c, k3: *c, k4: *c, k5: *c, k6: *c, k7: *c, k8: *c}
        e: &e {k1: *d, k2: *d, k3: *d, k4: *d, k5: *d, k6: *d, k7: *d, k8: *d}
        f: &f {k1: *e, k2: *e, k3: *e, k4: *e, k5: *e, k6: *e, k7: *e, k8: *e}
        train: {steps: 2}
        """),
    "merge keys": textwrap.dedent("""\
        a: &a [x, x, x, x, x, x, x, x, x, x]
        b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]
        c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]
        d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]
        e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]
        base: &base {steps: 2, junk: *e}
        train:
          <<: *base
        """),
}


@pytest.mark.parametrize("name", BOMBS)
def test_an_alias_bomb_is_one_error_in_bounded_time(tmp_path, name):
    path = tmp_path / "bomb.yaml"
    path.write_text(BOMBS[name])
    t0 = time.perf_counter()
    with pytest.raises(ConfigError, match="alias"):
        load_config(path)
    assert time.perf_counter() - t0 < 5


def test_an_alias_bomb_in_an_override_is_refused():
    with pytest.raises(ConfigError, match="alias"):
        load_config(None, ["data.verifier_options=" + "{x: &a [1,1,1,1,1,1,1,1,1,1], y: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a,*a],"
                           " z: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b,*b], w: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c,*c],"
                           " v: [*d,*d,*d,*d,*d,*d,*d,*d,*d,*d,*d]}"])


def test_a_huge_config_file_is_refused(tmp_path):
    path = tmp_path / "huge.yaml"
    path.write_text("train:\n  steps: 2\n# " + "x" * (2 << 20) + "\n")
    with pytest.raises(ConfigError, match="characters"):
        load_config(path)


def test_ordinary_aliases_still_work(tmp_path):
    path = tmp_path / "ok.yaml"
    path.write_text("opts: &o {timeout_s: 3}\ndata:\n  verifier_options: *o\n")
    with pytest.raises(ConfigError, match="opts"):  # an unknown top-level section, not an alias error
        load_config(path)
    path.write_text("data:\n  verifier_options: &o {timeout_s: 3}\nrollout:\n  engine_options: *o\n")
    cfg = load_config(path)
    assert cfg.data.verifier_options == {"timeout_s": 3} == cfg.rollout.engine_options


@pytest.mark.parametrize("file_name, why", [
    ("json.py", "already belongs"),  # imported here; in a fresh process it is refused as a standard-library name
    ("sched.py", "standard-library|already belongs"),  # rarely imported: refused for its standard-library name
    ("time.py", "already belongs"),  # built in and imported
    ("yaml.py", "already belongs"),  # an installed package
    ("pytest.py", "already belongs"),  # imported in this process
])
def test_a_plugin_file_named_like_another_module_is_refused(tmp_path, file_name, why):
    path = tmp_path / file_name
    path.write_text("REGISTERED = True\n")
    with pytest.raises(PluginError, match=why):
        load_plugin(str(path))
    assert not getattr(sys.modules.get(path.stem), "REGISTERED", False)


def test_a_plugin_file_is_imported_from_its_path(tmp_path):
    path = tmp_path / "rlvr_test_plugin_by_path.py"
    path.write_text("WHERE = __file__\n")
    module = load_plugin(str(path))
    assert module.WHERE == str(path)
    assert load_plugin(str(path)) is module  # loading twice is harmless
    other = tmp_path / "elsewhere"
    other.mkdir()
    (other / path.name).write_text("WHERE = __file__\n")
    with pytest.raises(PluginError, match="already belongs"):
        load_plugin(str(other / path.name))


def test_a_rubric_file_with_an_alias_bomb_is_a_rubric_error(tmp_path):
    from rlvr.verifiers.rubric import RubricError, load_rubric

    path = tmp_path / "rubric.yaml"
    path.write_text(BOMBS["nested lists"])
    t0 = time.perf_counter()
    with pytest.raises(RubricError, match="alias"):
        load_rubric(str(path))
    assert time.perf_counter() - t0 < 5
