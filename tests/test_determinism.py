"""train.deterministic (rlvr.train.determinism): one thread and ATen/MKL/oneDNN kernels pinned to AVX2, taken in
the process's first tensor operation; too late, it says so."""

import os
import subprocess
import sys

import pytest

from rlvr.train.determinism import cpu_has_avx2

# The pin as a user would set it before Python starts (what a CPU whose own level is AVX2 runs), spelled out here
# so that the tests do not take it from the module they test.
OUTSIDE_PIN = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2", "OMP_NUM_THREADS": "1"}

AVX2 = cpu_has_avx2()
needs_avx2 = pytest.mark.skipif(not AVX2, reason="the pin is to AVX2; this CPU has none (or is not x86-64)")


def python(code: str, env: dict[str, str] | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if k not in OUTSIDE_PIN}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout,
                          env={**clean, **(env or {})})
    assert done.returncode == 0, done.stderr[-3000:]
    return done


@pytest.mark.parametrize("flags, expected", [
    ("fpu sse sse2 avx avx2 fma bmi2", True),
    ("fpu sse sse2 avx avx512f avx2 fma", True),
    ("fpu sse sse2 avx", False),  # Sandy/Ivy Bridge: AVX without AVX2
    ("fpu sse sse2 avx avx2", False),  # the AVX2 kernels are built with FMA too
])
def test_avx2_is_read_from_the_cpu_flags(tmp_path, monkeypatch, flags, expected):
    monkeypatch.setattr("platform.machine", lambda: "x86_64")
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(f"processor\t: 0\nmodel name\t: some cpu\nflags\t\t: {flags}\n\nprocessor\t: 1\n")
    assert cpu_has_avx2(cpuinfo) is expected


def test_no_avx2_where_the_cpu_is_not_x86(tmp_path, monkeypatch):
    monkeypatch.setattr("platform.machine", lambda: "aarch64")
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("flags\t\t: avx2 fma\n")
    assert not cpu_has_avx2(cpuinfo) and not cpu_has_avx2(tmp_path / "missing")


@needs_avx2
def test_pin_before_the_first_op_takes_effect_in_one_thread():
    out = python("import warnings; warnings.simplefilter('error')\n"
                 "import torch\n"
                 "from rlvr.train.determinism import set_up_numerics\n"
                 "set_up_numerics(4, True)\n"
                 "print(torch.backends.cpu.get_cpu_capability(), torch.get_num_threads(),\n"
                 "      torch.are_deterministic_algorithms_enabled())").stdout.split()
    assert out == ["AVX2", "1", "True"]


@needs_avx2
def test_pin_after_the_first_op_warns_naming_the_variables():
    # ATen fixes its level at its first kernel; ATEN_CPU_CAPABILITY=default makes that level differ from AVX2 here.
    done = python("import torch; torch.ones(64).exp().sum()\n"
                  "from rlvr.train.determinism import pin_numerics\n"
                  "print(pin_numerics())", env={"ATEN_CPU_CAPABILITY": "default"})
    assert done.stdout.split() == ["DEFAULT"]
    assert "train.deterministic: ATen already chose its DEFAULT kernels" in done.stderr
    assert "ATEN_CPU_CAPABILITY=avx2" in done.stderr


def test_without_deterministic_threads_are_as_configured():
    out = python("import torch\n"
                 "from rlvr.train.determinism import set_up_numerics\n"
                 "set_up_numerics(3, False)\n"
                 "print(torch.get_num_threads(), torch.are_deterministic_algorithms_enabled())").stdout.split()
    assert out == ["3", "False"]


# A short run's fingerprint: its final weights and every logged number that is not a clock reading.
TRAIN = ("import glob, hashlib, json\n"
         "from safetensors.torch import load_file\n"
         "from rlvr.cluster import launch\n"
         "from rlvr.config import load_config\n"
         "run = launch(load_config('examples/arithmetic.yaml', {overrides!r}))\n"
         "w = load_file(glob.glob(str(run / 'checkpoint-3' / '*.safetensors'))[0])\n"
         "rows = [json.loads(line) for line in (run / 'metrics.jsonl').read_text().splitlines()]\n"
         "logged = [{{k: v for k, v in r.items() if not any(c in k for c in ('time', 'per_s', 'latency'))}} for r in rows]\n"
         "print(hashlib.sha1(b''.join(w[k].numpy().tobytes() for k in sorted(w))).hexdigest(),\n"
         "      hashlib.sha1(json.dumps(logged).encode()).hexdigest())\n")


@needs_avx2
def test_train_deterministic_equals_the_pin_set_before_python_starts(tmp_path, warm_model_dir):
    """`train.deterministic=true` pins inside the process; the run's weights are bit-identical to those of a run
    pinned from outside (the variables set before Python starts, as on a CPU whose own level is AVX2)."""
    # a model that is right some of the time, so that RL's updates are not zero
    common = [f"model.path={warm_model_dir}", "train.steps=3", "train.save_every=3", "data.prompts_per_step=4",
              "rollout.group_size=4", "train.progress=false", "train.overwrite=true"]
    inside = python(TRAIN.format(overrides=common + [f"train.out={tmp_path / 'a'}", "train.deterministic=true"]))
    outside = python(TRAIN.format(overrides=common + [f"train.out={tmp_path / 'b'}", "train.threads=1"]),
                     env=OUTSIDE_PIN)
    assert inside.stdout.split()[-2:] == outside.stdout.split()[-2:]
