"""Assemble and build the book: executed notebooks + pages -> Sphinx HTML and xelatex PDF.

Everything is built in a staging folder under ``_build/``; ``_build/<name>/`` is replaced
only when every step succeeded (two renames), so a failed or interrupted build leaves the
previous book untouched. A lock on ``_build/.locks/<name>.lock`` keeps two builds of the
same name from racing.
"""
from __future__ import annotations

import datetime as dt
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import nbformat
import yaml
from filelock import FileLock, Timeout

from scaletax import ROOT, __version__
from scaletax.render.charts import VEGA_BUNDLE, vega_bundle
from scaletax.report import chapters as toc
from scaletax.report.execute import ChapterFailed, Result, execute_chapters
from scaletax.report.provenance import (data_hashes, git_commit, lib_hash, lock_hash, package_versions,
                                        sha256_bytes, short_commit)
from scaletax.report.scenario import Scenario

#: Where books, the execution cache and logs go (``SCALETAX_BUILD_DIR`` overrides, e.g. in tests).
BUILD_ROOT = Path(os.environ.get("SCALETAX_BUILD_DIR", ROOT / "_build"))
CONFIG_YML = ROOT / "_config.yml"
#: Sphinx extensions JB1 adds that the book does not want: thebe and comments load
#: scripts from the network; the jupyterbook-latex preamble needs bbm.sty (texlive-fonts-extra).
DROP_EXTENSIONS = {"sphinx_thebe", "sphinx_comments", "sphinx_jupyterbook_latex"}
TEX_PACKAGES = ("texlive-xetex", "texlive-latex-extra", "texlive-fonts-recommended",
                "latexmk", "fonts-freefont-otf")


class BuildError(RuntimeError):
    """A build step failed; the message names the step and its log."""


class BuildBusy(RuntimeError):
    """Another build of the same name holds the lock."""


@dataclass
class BuildOptions:
    name: str
    scenario: Scenario
    scenario_path: Path
    overrides: tuple[str, ...]
    jobs: int = 1
    pdf: bool = True
    build_root: Path = BUILD_ROOT


class _Interrupted(BaseException):
    pass


def _raise_interrupted(signum, frame):
    raise _Interrupted(signal.Signals(signum).name)


def xelatex_available() -> bool:
    return shutil.which("xelatex") is not None and shutil.which("latexmk") is not None


def tex_install_command() -> str:
    return "apt-get update && apt-get install -y --no-install-recommends " + " ".join(TEX_PACKAGES)


# --------------------------------------------------------------------------------------
# Staging the sources
# --------------------------------------------------------------------------------------
def _fill(template: str, values: dict[str, str]) -> str:
    """Replace ``@@key@@`` tokens (markdown uses $ for math, so not string.Template's)."""
    out = template
    for key, val in values.items():
        out = out.replace(f"@@{key}@@", val)
    if "@@" in out:
        raise BuildError(f"unfilled template token in page: {out[out.index('@@'):][:40]}")
    return out


def _provenance_md(info: dict) -> str:
    mine = info.get("user_inputs") or []
    yours = ("\n\nYour inputs (not from the catalog or a cited source): "
             + "; ".join(f"`{m}`" for m in mine) + ".") if mine else ""
    return (
        ":::{admonition} Provenance\n:class: note\n\n"
        f"Scenario **{info['name']}** (`{info['scenario_file']}`, sha256 `{info['scenario_hash'][:12]}`), "
        f"scaletax {info['version']}, commit `{short_commit(info['commit'])}`, built {info['date']}. "
        f"See [Reproduce this book](reproduce.md) for the exact command and inputs.{yours}\n:::\n"
    )


def _add_provenance(nb_path: Path, dest: Path, info: dict) -> None:
    nb = nbformat.read(nb_path, as_version=4)
    cell = nbformat.v4.new_markdown_cell(_provenance_md(info))
    cell.metadata["tags"] = ["scaletax-provenance"]
    cell["id"] = "scaletax-provenance"
    first_md = next((i for i, c in enumerate(nb.cells) if c.cell_type == "markdown"), 0)
    nb.cells.insert(first_md + 1, cell)
    for c in nb.cells:  # the parameters papermill injected are listed on the Reproduce page
        tags = c.metadata.setdefault("tags", [])
        if "injected-parameters" in tags and "remove-cell" not in tags:
            tags.append("remove-cell")
    nbformat.validator.normalize(nb)
    nbformat.write(nb, dest)


def _sphinx_conf(src: Path, info: dict) -> str:
    from jupyter_book.config import get_final_config

    cfg, _ = get_final_config(user_yaml=CONFIG_YML, sourcedir=src, validate=True,
                              cli_config={"latex_individualpages": False},
                              raise_on_invalid=True)
    cfg["extensions"] = [e for e in cfg["extensions"] if e not in DROP_EXTENSIONS]
    cfg["html_js_files"] = [(VEGA_BUNDLE, {"type": "module"})]
    cfg["html_title"] = info["title"]
    cfg["project"] = info["title"]
    cfg["release"] = info["version"]
    cfg["version"] = info["version"]
    cfg["latex_documents"] = [(toc.ROOT_PAGE, "book.tex", info["title"], "scaletax", "manual")]
    cfg["html_last_updated_fmt"] = None
    cfg["today"] = info["date"][:10]
    lines = ["# Generated by scaletax.report.book from _config.yml; do not edit."]
    for key in sorted(cfg):
        lines.append(f"{key} = {cfg[key]!r}")
    return "\n".join(lines) + "\n"


def stage_sources(src: Path, results: list[Result], info: dict) -> None:
    """Copy pages and executed notebooks into ``src`` and write toc, conf and generated pages."""
    shutil.copytree(toc.BOOK_DIR, src)
    (src / "_static").mkdir(exist_ok=True)
    (src / "_static" / VEGA_BUNDLE).write_text(vega_bundle(), encoding="utf-8")
    (src / "_toc.yml").write_text(yaml.safe_dump(toc.toc_yaml(), sort_keys=False), encoding="utf-8")
    for res in results:
        _add_provenance(res.notebook, src / f"{res.slug}.ipynb", info)
    for name in ("reproduce", "cite", "intro"):
        path = src / f"{name}.md"
        path.write_text(_fill(path.read_text(encoding="utf-8"), info["tokens"]), encoding="utf-8")
    (src / "conf.py").write_text(_sphinx_conf(src, info), encoding="utf-8")


# --------------------------------------------------------------------------------------
# Building
# --------------------------------------------------------------------------------------
def _run(cmd: list[str], cwd: Path, log: Path, step: str, timeout: float = 1800) -> None:
    env = dict(os.environ, PYTHONHASHSEED="0")
    with log.open("w", encoding="utf-8") as fh:
        try:
            proc = subprocess.run(cmd, cwd=cwd, stdout=fh, stderr=subprocess.STDOUT, env=env,
                                  timeout=timeout, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise BuildError(f"{step} timed out after {timeout:.0f} s; log: {log}") from None
    if proc.returncode != 0:
        tail = [ln for ln in log.read_text(encoding="utf-8", errors="replace").splitlines()
                if "WARNING" in ln or "ERROR" in ln or "Error" in ln or ln.startswith("!")]
        first = tail[0].strip() if tail else f"exit status {proc.returncode}"
        raise BuildError(f"{step} failed: {first[:300]}; full log: {log}")


def _book_key(opts: BuildOptions, info: dict, cache: Path) -> str:
    """Hash of every input of the book: when it matches the published book, nothing is rebuilt."""
    from scaletax.report.execute import cache_key
    from scaletax.report.provenance import tree_hash

    code = lib_hash()
    parts = {
        "chapters": [cache_key(ch, ch.parameters(opts.scenario), code, ch.definitions(opts.scenario))
                     for ch in toc.CHAPTERS],
        "pages": tree_hash(toc.BOOK_DIR, ("*",)),
        "config": CONFIG_YML.read_text(encoding="utf-8"),
        "scenario": info["scenario_hash"], "overrides": list(opts.overrides), "name": opts.name,
        "scenario_file": info["scenario_file"],
        "pdf": bool(opts.pdf and xelatex_available()), "commit": info["commit"],
        "version": info["version"], "lock": lock_hash(), "lib": code,
    }
    return sha256_bytes(json.dumps(parts, sort_keys=True).encode())


def _up_to_date(final: Path, book_key: str, date: str) -> dict | None:
    """The published manifest, marked as checked now, if its inputs equal ours; else None."""
    path = final / "manifest.json"
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if manifest.get("book_sha256") != book_key or not (final / "html" / "index.html").exists():
        return None
    if manifest.get("pdf") == "built" and not (final / f"{final.name}.pdf").exists():
        return None
    manifest["up_to_date"] = True
    manifest["checked_at"] = date
    for n in manifest["notebooks"]:
        n["status"], n["seconds"] = "reused", 0.0
    tmp = path.with_name(".manifest.json.tmp")
    tmp.write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return manifest


def build_html(src: Path, out: Path, logs: Path) -> None:
    _run([sys.executable, "-m", "sphinx", "-b", "html", "-n", "-W", "--keep-going", "-q",
          "-d", str(src.parent / "doctrees-html"), str(src), str(out)], src, logs / "html.log", "HTML build")


def build_pdf(src: Path, pdf: Path, logs: Path) -> None:
    latex = src.parent / "latex"
    _run([sys.executable, "-m", "sphinx", "-b", "latex", "-n", "-W", "--keep-going", "-q",
          "-d", str(src.parent / "doctrees-latex"), str(src), str(latex)], src, logs / "latex.log",
         "LaTeX build")
    _run(["latexmk", "-pdfxe", "-interaction=nonstopmode", "-halt-on-error", "-file-line-error",
          "book.tex"], latex, logs / "xelatex.log", "PDF (xelatex)", timeout=1800)
    shutil.copyfile(latex / "book.pdf", pdf)


def _publish(stage_out: Path, final: Path) -> None:
    """Swap the new book in: old -> trash, new -> final, then delete the trash."""
    trash = None
    if final.exists():
        trash = final.with_name(f".trash-{final.name}-{os.getpid()}")
        os.replace(final, trash)
    os.replace(stage_out, final)
    if trash is not None:
        shutil.rmtree(trash, ignore_errors=True)


def build(opts: BuildOptions, progress=None) -> dict:
    """Build the book named ``opts.name``; returns the manifest. Raises BuildError/BuildBusy."""
    root = opts.build_root
    try:
        (root / ".locks").mkdir(parents=True, exist_ok=True)
        probe = tempfile.NamedTemporaryFile(dir=root, prefix=".write-test-", delete=True)
        probe.close()
    except OSError as exc:
        raise BuildError(f"cannot write to the build folder {root}: {exc.strerror}") from None
    lock = FileLock(str(root / ".locks" / f"{opts.name}.lock"))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        raise BuildBusy(f"another build of {opts.name!r} is running (lock {lock.lock_file}); "
                        "wait for it to finish or build under another --name") from None
    old_handlers = {s: signal.signal(s, _raise_interrupted) for s in (signal.SIGTERM,)}
    stage = Path(tempfile.mkdtemp(prefix=f".stage-{opts.name}-", dir=root))
    logs = root / ".logs" / opts.name
    try:
        if logs.exists():
            shutil.rmtree(logs)
        logs.mkdir(parents=True)
        return _build_in(stage, logs, opts, progress)
    except (KeyboardInterrupt, _Interrupted) as exc:
        raise BuildError(f"build interrupted ({type(exc).__name__ if isinstance(exc, KeyboardInterrupt) else exc}); "
                         f"{root / opts.name} left as it was") from None
    finally:
        shutil.rmtree(stage, ignore_errors=True)
        for s, h in old_handlers.items():
            signal.signal(s, h)
        lock.release()


def _build_in(stage: Path, logs: Path, opts: BuildOptions, progress) -> dict:
    t0 = time.perf_counter()
    scen = opts.scenario
    commit = git_commit()
    date = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    resolved_yaml = yaml.safe_dump(scen.to_plain(), sort_keys=False, allow_unicode=True, width=100)
    sets = " ".join("--set " + shlex.quote(o) for o in opts.overrides)
    scen_arg = "" if opts.scenario_path == toc.ROOT / "data/scenarios/default.yaml" else \
        f" --scenario {os.path.relpath(opts.scenario_path, toc.ROOT)}"
    command = f"scaletax build{scen_arg}{(' ' + sets) if sets else ''} --name {opts.name}"
    info = {
        "name": opts.name, "title": scen.title, "version": __version__, "commit": commit,
        "date": date, "scenario_hash": scen.content_hash(),
        "scenario_file": os.path.relpath(opts.scenario_path, toc.ROOT),
        "user_inputs": [u.replace("`", "'") for u in scen.user_inputs()],
    }
    info["tokens"] = {
        "name": opts.name, "version": __version__, "commit": commit, "date": date,
        "year": date[:4], "scenario_hash": info["scenario_hash"],
        "scenario_hash_short": info["scenario_hash"][:12], "command": command,
        "scenario_yaml": resolved_yaml.rstrip(), "title": scen.title, "question": scen.question,
        "scenario_file": info["scenario_file"],
    }

    cache = opts.build_root / ".cache"
    final = opts.build_root / opts.name
    book_key = _book_key(opts, info, cache)
    current = _up_to_date(final, book_key, date)
    if current is not None:
        if progress:
            progress("book", "up to date (no input changed): nothing executed or rebuilt")
        return current
    results = execute_chapters(list(toc.CHAPTERS), scen, cache, logs, jobs=opts.jobs, progress=progress)
    t_exec = time.perf_counter() - t0

    src = stage / "src"
    stage_sources(src, results, info)
    out = stage / "out"
    out.mkdir()
    if progress:
        progress("book", "building HTML")
    build_html(src, out / "html", logs)
    pdf_status = "skipped (--no-pdf)"
    if opts.pdf:
        if xelatex_available():
            if progress:
                progress("book", "building PDF")
            build_pdf(src, out / f"{opts.name}.pdf", logs)
            pdf_status = "built"
        else:
            pdf_status = "skipped (xelatex not installed)"
    shutil.rmtree(out / "jupyter_execute", ignore_errors=True)  # myst-nb's copy for the builders
    figures = out / "figures"
    figures.mkdir()
    for res in results:
        if res.figures.exists():
            for f in sorted(res.figures.iterdir()):
                shutil.copyfile(f, figures / f.name)
    manifest = {
        "name": opts.name,
        "book_sha256": book_key,
        "up_to_date": False,
        "title": scen.title,
        "scenario": scen.to_plain(),
        "scenario_file": info["scenario_file"],
        "overrides": list(opts.overrides),
        "scenario_sha256": info["scenario_hash"],
        "command": command,
        "git_commit": commit,
        "version": __version__,
        "packages": package_versions(),
        "lib_sha256": lib_hash(),
        "lock_sha256": lock_hash(),
        "data_sha256": data_hashes(),
        "definitions": scen.definitions(),
        "user_inputs": info["user_inputs"],
        "built_at": date,
        "pdf": pdf_status,
        "notebooks": [
            {"chapter": r.slug, "content_sha256": r.key, "status": "reused" if r.reused else "executed",
             "seconds": round(r.seconds, 2), "parameters": r.parameters}
            for r in results
        ],
        "figures": sorted(p.name for p in figures.iterdir()),
        "seconds": {"execute": round(t_exec, 2), "total": round(time.perf_counter() - t0, 2)},
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=False) + "\n",
                                       encoding="utf-8")
    _publish(out, opts.build_root / opts.name)
    return manifest


__all__ = ["BuildError", "BuildBusy", "BuildOptions", "ChapterFailed", "build",
           "xelatex_available", "tex_install_command"]
