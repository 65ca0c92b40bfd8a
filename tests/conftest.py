"""Shared fixtures: a CLI runner isolated in a temporary build folder, and one built book."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCALETAX = [sys.executable, "-m", "scaletax.report.cli"]

#: A small scenario for end-to-end builds: two GPUs, a short precision experiment.
SMALL = [
    "--set", "gpus=[h100_sxm,gb200]",
    "--set", "precision.experiment_steps=40",
    "--set", "precision.experiment_seeds=2",
    "--set", "cluster.sizes=[1024,8192]",
    "--set", "economics.prices={h100_sxm: {usd_per_gpu_hour: 2.35, assumption: false, source: test}, gb200: {usd_per_gpu_hour: 4.5, assumption: true, source: test}}",
]


def run_cli(args, build_dir: Path, env_extra=None, timeout=1800, **kw):
    env = dict(os.environ, SCALETAX_BUILD_DIR=str(build_dir), PYTHONUNBUFFERED="1")
    env.update(env_extra or {})
    return subprocess.run(SCALETAX + list(args), cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout, **kw)


def edit_gpu_row(csv_path: Path, gpu: str, column: str, value: str) -> None:
    """Set one cell of a GPU's row in a copy of data/hardware.csv (the other rows kept)."""
    import csv
    import io

    rows = list(csv.DictReader(io.StringIO(csv_path.read_text(encoding="utf-8"))))
    assert any(r["id"] == gpu for r in rows), gpu
    for row in rows:
        if row["id"] == gpu:
            row[column] = value
    out = io.StringIO()
    w = csv.DictWriter(out, fieldnames=list(rows[0]), lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
    csv_path.write_text(out.getvalue(), encoding="utf-8")


@pytest.fixture(scope="session")
def built_book(tmp_path_factory):
    """Build the small book once (HTML + PDF); tests read it, none modifies it."""
    build_dir = tmp_path_factory.mktemp("build")
    proc = run_cli(["build", *SMALL, "--name", "small", "--jobs", "2"], build_dir)
    assert proc.returncode == 0, proc.stderr[-3000:]
    book = build_dir / "small"
    # the PDF step's log, read now: a later test's build of "small" in this folder starts its own
    # logs (an up-to-date book runs no xelatex, and leaves no xelatex.log)
    xelatex = build_dir / ".logs" / "small" / "xelatex.log"
    return {"dir": book, "build_dir": build_dir, "manifest": json.loads((book / "manifest.json").read_text()),
            "stderr": proc.stderr,
            "xelatex_log": xelatex.read_text(encoding="utf-8", errors="replace") if xelatex.exists() else None}


@pytest.fixture(scope="session")
def prepared():
    """The published runs prepared for the step-time model (shared by the validation tests)."""
    from scaletax.fit import validate

    return validate.prepare_rows(validate.load_rows())


@pytest.fixture(scope="session")
def table(prepared):
    from scaletax.fit import validate

    return validate.validation_table(prepared=prepared)


#: System tools some tests need, with the install-system-deps component that provides them.
SYSTEM_TOOLS = {"chromium": "browser", "pdftotext": "pdf", "pdfinfo": "pdf", "pdfimages": "pdf",
                "xelatex": "tex", "latexmk": "tex"}


def require_tools(*tools: str) -> None:
    """Skip (loudly, with the install command) when a system tool is missing; fail instead
    under SCALETAX_REQUIRE_SYSTEM_DEPS=1 (CI), where a skip would hide a broken install."""
    import shutil

    missing = [t for t in tools if shutil.which(t) is None]
    if not missing:
        return
    parts = sorted({SYSTEM_TOOLS[t] for t in missing})
    msg = (f"{', '.join(missing)} not installed: install with `bash .ci/install-system-deps {' '.join(parts)}` "
           "(as root on Debian; `make test` does this)")
    if os.environ.get("SCALETAX_REQUIRE_SYSTEM_DEPS") == "1":
        pytest.fail(msg)
    pytest.skip(msg)
