"""The warm Sphinx process (report/warm.py): the module runs as ``python -m`` would, minus the
imports, and an unused one ends when closed."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from scaletax.report import execute, warm

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG")
TESTS = Path(__file__).resolve().parent


def _env(**extra):
    path = [str(TESTS), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    return {**execute.process_env(PYTHONPATH=os.pathsep.join(path)), **extra}


def test_a_warm_python_m_runs_as_a_fresh_one(tmp_path):
    """The book's HTML and LaTeX steps: the module runs as ``python -m`` would, in the given
    directory, with its output in the log, its exit handlers and its exit status."""
    env = _env(PREFORK_PROBE="warm", PYTHONHASHSEED="0")
    proc_warm = warm.Warm("warm_probe", ("json", "warm_probe", "no_such_module_is_ignored"), env)
    proc = proc_warm.run(["a", "--b"], tmp_path, tmp_path / "warm.log")
    assert proc.wait(timeout=60) == 4
    proc_warm.close()
    fresh = subprocess.run([sys.executable, "-m", "warm_probe", "a", "--b"], env=env, cwd=tmp_path,
                           stdin=subprocess.DEVNULL, capture_output=True, text=True)
    assert fresh.returncode == 4
    warm_out, fresh_out = (tmp_path / "warm.log").read_text().splitlines(), fresh.stdout.splitlines()
    assert json.loads(warm_out[0]) == json.loads(fresh_out[0])
    assert warm_out[1:] == fresh_out[1:] == ["exit handlers ran"]


def test_an_unused_warm_process_ends_when_closed():
    proc_warm = warm.Warm("warm_probe", ("json",), _env())
    proc_warm.close()
    assert proc_warm.proc.returncode == 0
