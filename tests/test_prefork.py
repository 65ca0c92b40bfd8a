"""The prefork server (report/prefork.py): a forked chapter process is what a fresh one would be
(environment, hash seed, session, signals, one thread, a kernel papermill drives as usual), and
nothing it forked outlives the build."""
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from scaletax.report import execute, prefork
from test_cache import NOTEBOOK

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the prefork server is Linux only")
TESTS = Path(__file__).resolve().parent


def _env(**extra):
    path = [str(TESTS), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    return {**execute.process_env(PYTHONPATH=os.pathsep.join(path)), **extra}


def _alive(pid):
    try:
        state = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _wait(cond, timeout=30.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.05)
    return False


def test_a_forked_child_is_a_fresh_process_but_for_its_imports(tmp_path):
    server = prefork.Server(_env(PREFORK_PROBE="server's"), tmp_path / "server.log", cwd=tmp_path)
    try:
        child = server.spawn("prefork_targets:report", [str(tmp_path / "forked.json")], tmp_path / "child.log")
        assert child.wait(timeout=60) == 3
    finally:
        server.close()
    forked = json.loads((tmp_path / "forked.json").read_text())
    fresh_out = subprocess.run([sys.executable, "-c", "import json, prefork_targets; print(json.dumps(prefork_targets.facts()))"],
                               env=_env(PREFORK_PROBE="server's", PYTHONHASHSEED="0"), cwd=tmp_path,
                               stdin=subprocess.DEVNULL, capture_output=True, text=True, check=True)
    fresh = json.loads(fresh_out.stdout)
    assert forked["pid"] == child.pid and forked["sid"] == child.pid  # a session of its own
    for key in ("hash", "cwd", "threads", "probe", "sigint_default", "sigchld", "sigterm", "stdin_is_null"):
        assert forked[key] == fresh[key], key
    assert (tmp_path / "child.log").read_text() == "to the log\n"


def test_an_exception_is_exit_status_1_with_its_traceback_in_the_log(tmp_path):
    server = prefork.Server(_env(), tmp_path / "server.log")
    try:
        child = server.spawn("prefork_targets:fail", [], tmp_path / "child.log")
        assert child.wait(timeout=60) == 1
    finally:
        server.close()
    log = (tmp_path / "child.log").read_text()
    assert log.startswith("about to fail\n") and "RuntimeError: boom" in log


def test_closing_the_server_kills_what_it_forked(tmp_path):
    server = prefork.Server(_env(), tmp_path / "server.log")
    child = server.spawn("prefork_targets:sleep", [str(tmp_path / "pid")], tmp_path / "child.log")
    assert _wait(lambda: (tmp_path / "pid").exists())
    assert child.poll() is None and _alive(child.pid)
    server.close()
    assert not _alive(child.pid)


def test_a_sigkilled_runner_takes_the_server_and_its_children_with_it(tmp_path):
    script = textwrap.dedent(f"""
        import json, time
        from pathlib import Path
        from scaletax.report import prefork
        server = prefork.Server(json.loads({json.dumps(json.dumps(_env()))}), Path({str(tmp_path / 'server.log')!r}))
        child = server.spawn("prefork_targets:sleep", [{str(tmp_path / 'pid')!r}], Path({str(tmp_path / 'child.log')!r}))
        Path({str(tmp_path / 'server.pid')!r}).write_text(str(server.proc.pid))
        time.sleep(120)
    """)
    runner = subprocess.Popen([sys.executable, "-c", script], env=_env())
    try:
        assert _wait(lambda: (tmp_path / "pid").exists() and (tmp_path / "server.pid").exists(), 60)
        pids = [int((tmp_path / "server.pid").read_text()), int((tmp_path / "pid").read_text())]
        assert all(_alive(p) for p in pids)
        runner.kill()
        runner.wait()
        assert _wait(lambda: not any(_alive(p) for p in pids)), [p for p in pids if _alive(p)]
    finally:
        if runner.poll() is None:
            runner.kill()


KERNEL_FACTS = NOTEBOOK.split("# Tiny")[0] + """# Facts

```{code-cell} ipython3
:tags: [parameters]
value = 1
```

```{code-cell} ipython3
import json, os, signal, sys, threading
from IPython.display import display
from scaletax import memo
from scaletax.model import search
facts = {"hash": hash("scaletax"), "argv0": os.path.basename(sys.argv[0]), "argv": sys.argv[1:2],
         "path": sys.path, "cwd_is_work": os.path.basename(os.getcwd()),
         "parent": os.environ["JPY_PARENT_PID"] == str(os.getppid()), "own_session": os.getsid(0) == os.getpid(),
         "main": sys.modules["__main__"].__name__, "figures": os.path.basename(os.environ["SCALETAX_FIGURES_DIR"]),
         "hashseed": os.environ["PYTHONHASHSEED"], "value": value, "threads_at_start": threading.active_count() > 1,
         "sigterm": int(signal.getsignal(signal.SIGTERM)), "code_hash": memo.code_hash("scaletax.model.search")}
display({"application/json": facts}, raw=True)
```
"""


def _kernel_facts(tmp_path, tag, forked):
    src = tmp_path / "facts.md"
    src.write_text(KERNEL_FACTS)
    params = tmp_path / "params.json"
    params.write_text(json.dumps({"value": 5}))
    work = tmp_path / tag
    work.mkdir()
    if forked:
        server = prefork.Server(_env(), tmp_path / f"{tag}-server.log")
        try:
            code = server.spawn(f"{execute.__name__}:_execute_forked", [str(src), str(params), str(work)],
                                work / "worker.log").wait(timeout=120)
        finally:
            server.close()
    else:
        code = subprocess.run([sys.executable, "-m", "scaletax.report.execute", str(src), str(params), str(work)],
                              env=_env(), capture_output=True, timeout=300).returncode
    assert code == 0, (work / "worker.log").read_text() if (work / "worker.log").exists() else code
    nb = json.loads((work / "notebook.ipynb").read_text())
    outs = [o for c in nb["cells"] for o in c.get("outputs", []) if "application/json" in o.get("data", {})]
    return outs[0]["data"]["application/json"]


def test_a_forked_kernel_looks_like_a_kernel_papermill_started(tmp_path):
    """The same notebook, its kernel forked from a warm worker and started afresh: what the
    notebook can see of its process is the same."""
    fresh = _kernel_facts(tmp_path, "fresh", forked=False)
    forked = _kernel_facts(tmp_path, "forked", forked=True)
    assert fresh["value"] == 5 and fresh["parent"] and fresh["own_session"] and "" in fresh["path"]
    assert {k: v for k, v in forked.items() if k != "cwd_is_work"} == \
        {k: v for k, v in fresh.items() if k != "cwd_is_work"}
    assert forked["cwd_is_work"] == "forked" and fresh["cwd_is_work"] == "fresh"


def test_a_warm_python_m_runs_as_a_fresh_one(tmp_path):
    """prefork.Warm (the book's HTML and LaTeX steps): the module runs as ``python -m`` would, in
    the given directory, with its output in the log and its exit status."""
    env = _env(PREFORK_PROBE="warm", PYTHONHASHSEED="0")
    warm = prefork.Warm("warm_probe", ("json", "warm_probe", "no_such_module_is_ignored"), env)
    proc = warm.run(["a", "--b"], tmp_path, tmp_path / "warm.log")
    assert proc.wait(timeout=60) == 4
    warm.close()
    fresh = subprocess.run([sys.executable, "-m", "warm_probe", "a", "--b"], env=env, cwd=tmp_path,
                           stdin=subprocess.DEVNULL, capture_output=True, text=True)
    assert fresh.returncode == 4
    warm_out, fresh_out = (tmp_path / "warm.log").read_text().splitlines(), fresh.stdout.splitlines()
    assert json.loads(warm_out[0]) == json.loads(fresh_out[0])
    assert warm_out[1:] == fresh_out[1:] == ["exit handlers ran"]


def test_an_unused_warm_process_ends_when_closed(tmp_path):
    warm = prefork.Warm("warm_probe", ("json",), _env())
    warm.close()
    assert warm.proc.returncode == 0
