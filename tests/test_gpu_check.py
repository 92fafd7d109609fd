"""benchmarks/gpu_check.py as a dry run on the CPU: every check runs and passes, and the table is printed; a
check that fails is reported as FAIL with its reason and the script exits 1."""

import importlib.util
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "gpu_check.py"
CHECKS = ["device", "forward", "greedy parity", "rl full", "rl lora", "fsdp2 1 rank", "exact resume"]


def test_the_dry_run_passes_every_check_and_prints_one_table():
    proc = subprocess.run([sys.executable, str(SCRIPT), "--device", "cpu"], capture_output=True, text=True,
                          timeout=600, env={"OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin", "HOME": str(ROOT)})
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    lines = proc.stdout.strip().splitlines()
    assert lines[0].startswith("gpu_check: device=cpu dtype=float32")
    rows = {line[:14].strip(): line[15:21].strip() for line in lines[2:]}
    assert rows == {name: "ok" for name in CHECKS}


def test_a_failing_check_is_a_row_and_fails_the_script(tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    gpu_check = importlib.util.module_from_spec(spec)
    sys.modules["gpu_check"] = gpu_check  # dataclasses look their module up by name
    spec.loader.exec_module(gpu_check)
    ctx = gpu_check.Context("cpu", "float32", tmp_path, tmp_path)

    def broken(ctx):
        raise RuntimeError("the resumed weights differ")

    gpu_check.run_check(ctx, "exact resume", broken)
    gpu_check.run_check(ctx, "device", gpu_check.check_device)
    gpu_check.print_table(ctx)
    out = capsys.readouterr().out
    assert [r.ok for r in ctx.rows] == [False, True]
    assert "exact resume   FAIL" in out and "RuntimeError: the resumed weights differ" in out
