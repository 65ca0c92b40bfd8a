"""Functions the prefork server's children run in tests/test_prefork.py (importable by name)."""
import json
import os
import signal
import sys
import time


def facts() -> dict:
    """What a test compares between a forked process and a fresh one."""
    return {"pid": os.getpid(), "sid": os.getsid(0), "hash": hash("scaletax"), "cwd": os.getcwd(),
            "threads": len(os.listdir("/proc/self/task")), "probe": os.environ.get("PREFORK_PROBE"),
            "sigint_default": signal.getsignal(signal.SIGINT) is signal.default_int_handler,
            "sigchld": int(signal.getsignal(signal.SIGCHLD)), "sigterm": int(signal.getsignal(signal.SIGTERM)),
            "stdin_is_null": os.path.samestat(os.fstat(0), os.stat(os.devnull))}


def report(path: str) -> int:
    print("to the log")
    with open(path, "w") as fh:
        json.dump(facts(), fh)
    return 3


def sleep(path: str) -> int:
    with open(path, "w") as fh:
        fh.write(str(os.getpid()))
    time.sleep(120)
    return 0


def fail() -> int:
    sys.stderr.write("about to fail\n")
    raise RuntimeError("boom")
