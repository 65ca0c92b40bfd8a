"""Run as ``python -m warm_probe``: prints what tests/test_warm.py compares between a warm
``python -m`` (report/warm.py) and a fresh one, and exits with status 4; an exit handler prints
one more line."""
import atexit
import json
import os
import sys

if __name__ == "__main__":
    atexit.register(print, "exit handlers ran")
    print(json.dumps({"argv": [os.path.basename(sys.argv[0]), *sys.argv[1:]], "path0": sys.path[0],
                      "cwd": os.getcwd(), "hash": hash("scaletax"), "probe": os.environ.get("PREFORK_PROBE"),
                      "name": __name__, "stdin_is_null": os.path.samestat(os.fstat(0), os.stat(os.devnull))}))
    sys.exit(4)
