"""The environment of the build's processes, and the benchmark's CPU accounting of them."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from scaletax.report import execute

ROOT = Path(__file__).resolve().parents[1]


def test_kernel_env_sets_one_thread_per_numeric_library(tmp_path):
    env = execute.kernel_env(tmp_path)
    assert env["OPENBLAS_NUM_THREADS"] == env["OMP_NUM_THREADS"] == env["MKL_NUM_THREADS"] == "1"
    assert env["SCALETAX_MEMO_DIR"] == str(tmp_path / "memo")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_CHILD_SUBREAPER is Linux only")
def test_bench_counts_the_cpu_of_orphaned_grandchildren():
    """A child that leaves a CPU-burning grandchild behind (as a kernel leaves its forkserver's
    training workers): the bench's CPU figure includes the grandchild's second."""
    probe = f"""
import subprocess, sys
sys.path.insert(0, {str(ROOT / 'benchmarks')!r})
import run
assert run._become_subreaper()
c0 = run._children_cpu()
subprocess.run([sys.executable, "-c", '''
import os, time
if os.fork() == 0:
    t = time.process_time()
    while time.process_time() - t < 1.0:
        pass
    os._exit(0)
os._exit(0)
'''], check=True)
print(run._children_cpu() - c0)
"""
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120)
    assert float(out.stdout.strip()) >= 0.95
