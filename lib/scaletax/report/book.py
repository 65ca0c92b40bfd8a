"""Assemble and build the book: executed notebooks + pages -> Sphinx HTML and xelatex PDF.

Everything is built in a staging folder under ``_build/``; ``_build/<name>/`` is replaced
only when every step succeeded, in one atomic swap (:func:`_publish`), so a failed, interrupted
or killed build leaves the previous book whole. A lock on ``_build/.locks/<name>.lock`` keeps
two builds of the same name from racing; the next build cleans what a killed one left.
"""
from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import datetime as dt
import errno
import json
import os
import re
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

from scaletax import ROOT, __version__, speedups
from scaletax.render import tablefit
from scaletax.render.charts import VEGA_BUNDLE, vega_bundle
from scaletax.report import chapters as toc
from scaletax import escape
from scaletax.report import lifecycle
from scaletax.report.execute import ChapterFailed, Result, execute_chapters
from scaletax.report.exports import stamp_exports
from scaletax.report.numbering import NUMBERS_FILE
from scaletax.report.provenance import (data_hashes, git_commit, keyed_rows, keyed_rows_list, lib_hash,
                                        lock_hash, package_versions, sha256_bytes, short_commit)
from scaletax.report.scenario import Scenario

BUILD_ROOT = toc.BUILD_ROOT
CONFIG_YML = ROOT / "_config.yml"
#: Sphinx extensions JB1 adds that the book does not want: thebe and comments load
#: scripts from the network; the jupyterbook-latex preamble needs bbm.sty (texlive-fonts-extra).
DROP_EXTENSIONS = {"sphinx_thebe", "sphinx_comments", "sphinx_jupyterbook_latex"}
#: Sphinx extension giving the HTML the PDF's figure and table numbers (report/numbering.py).
NUMBERING_EXTENSION = "scaletax.report.numbering"
#: Sphinx extension doing each repeated lookup of the build once (report/sphinx_once.py).
ONCE_EXTENSION = "scaletax.report.sphinx_once"
#: Sphinx extension setting the tables render/tablefit.py marks small in the smaller PDF font.
TABLEFONT_EXTENSION = "scaletax.report.tablefont"
#: Sphinx extension keeping a pasted text's blank lines out of the LaTeX (report/latex_paragraphs.py).
PARAGRAPH_EXTENSION = "scaletax.report.latex_paragraphs"
CHART_CSS = "scaletax.css"
#: The bibliography page already opens a chapter ("Bibliography"); Sphinx's bibliography
#: environment would start a second, unnumbered one on a fresh page, leaving the first empty.
LATEX_PREAMBLE = r"""
\makeatletter
\renewenvironment{sphinxthebibliography}[1]{\let\chapter\@gobbletwo\begin{thebibliography}{#1}}{\end{thebibliography}}
\makeatother
"""
TEX_PACKAGES = ("texlive-xetex", "texlive-latex-extra", "texlive-fonts-recommended",
                "latexmk", "fonts-freefont-otf")


#: Read by Sphinx from the configuration folder: no ``raw`` directive (nor its ``:url:`` or
#: ``:file:``), no ``include``/``literalinclude``/``csv-table :file:`` in any page.
DOCUTILS_CONF = "[general]\nraw_enabled: false\nfile_insertion_enabled: false\n"


#: Sphinx, run by this interpreter.
SPHINX = [sys.executable, "-m", "sphinx"]


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


def xelatex_available() -> bool:
    return shutil.which("xelatex") is not None and shutil.which("latexmk") is not None


def tex_install_command() -> str:
    return "apt-get update && apt-get install -y --no-install-recommends " + " ".join(TEX_PACKAGES)


# --------------------------------------------------------------------------------------
# Staging the sources
# --------------------------------------------------------------------------------------
_TOKEN = re.compile(r"@@([a-z_]+)@@")


def _fill(template: str, values: dict[str, str]) -> str:
    """Replace ``@@key@@`` tokens of the template in one pass (markdown uses $ for math, so
    not string.Template's): a value is never searched for tokens again."""
    unknown = sorted(set(_TOKEN.findall(template)) - set(values))
    if unknown:
        raise BuildError(f"unfilled template token in page: @@{unknown[0]}@@")
    return _TOKEN.sub(lambda m: values[m.group(1)], template)


def page_info(name: str, scenario: Scenario, scenario_path: Path, overrides: tuple[str, ...] | list[str],
              commit: str, date: str) -> dict:
    """The raw (unescaped) values the generated pages show: what built this book, from what."""
    default = scenario_path == toc.ROOT / "data/scenarios/default.yaml"
    scenario_file = os.path.relpath(scenario_path, toc.ROOT)
    words = ["scaletax", "build"] + ([] if default else ["--scenario", scenario_file])
    for o in overrides:
        words += ["--set", o]
    return {
        "name": name, "title": scenario.title, "question": scenario.question, "version": __version__,
        "commit": commit, "date": date, "scenario_hash": scenario.content_hash(),
        "scenario_file": scenario_file, "command": escape.shell_command(words + ["--name", name]),
        "scenario_yaml": yaml.safe_dump(scenario.to_plain(), sort_keys=False, allow_unicode=True,
                                        width=100).rstrip(),
        "user_inputs": scenario.user_inputs(),
    }


def page_tokens(info: dict) -> dict[str, str]:
    """``@@token@@`` values of the generated pages, each escaped for where the page uses it
    (:mod:`scaletax.escape`): prose as MyST text, file names as code spans, the command
    and the resolved YAML as whole fenced blocks, the title inside BibTeX as LaTeX text."""
    return {
        # generated values of a known alphabet (a slug, a version, a hex commit, a date)
        "name": info["name"], "version": info["version"], "commit": info["commit"], "date": info["date"],
        "year": info["date"][:4], "scenario_hash": info["scenario_hash"],
        "scenario_hash_short": info["scenario_hash"][:12],
        "question": escape.myst_text(info["question"]),
        "scenario_file_code": escape.myst_code(info["scenario_file"]),
        "command_block": escape.myst_fence(
            "make venv                       # .venv from requirements.lock (pinned versions)\n"
            f".venv/bin/{info['command']}", "bash"),
        "scenario_yaml_block": escape.myst_fence(info["scenario_yaml"], "yaml"),
        # which GPU rows each executed chapter was keyed on (known once the chapters ran)
        "keyed_rows_list": keyed_rows_list(info.get("keyed_rows", {})),
        # the title is used inside the BibTeX fence: BibTeX fields are LaTeX, and latex_text
        # keeps it on one line, so it cannot close the fence
        "title": escape.latex_text(info["title"]),
    }


def _provenance_md(info: dict) -> str:
    mine = info.get("user_inputs") or []
    yours = ("\n\nYour inputs (not from the catalog or a cited source): "
             + "; ".join(escape.myst_code(m) for m in mine) + ".") if mine else ""
    return (
        ":::{admonition} Provenance\n:class: note\n\n"
        f"Scenario **{escape.myst_text(info['name'])}** ({escape.myst_code(info['scenario_file'])}, "
        f"sha256 `{info['scenario_hash'][:12]}`), scaletax {info['version']}, "
        f"commit `{short_commit(info['commit'])}`, built {info['date']}. "
        f"See [Reproduce this book](reproduce.md) for the exact command and inputs.{yours}\n:::\n"
    )


def _add_provenance(nb_path: Path, dest: Path, info: dict, root: bool = False) -> None:
    """Insert the provenance box after the page's title. On the root page it goes under the
    first ``##`` heading instead: the PDF turns the root's title into the book's and its
    sections into chapters, so a box above them would sit alone on a page of its own."""
    nb = nbformat.read(nb_path, as_version=4)
    cell = nbformat.v4.new_markdown_cell(_provenance_md(info))
    cell.metadata["tags"] = ["scaletax-provenance"]
    cell["id"] = "scaletax-provenance"
    at = next((i for i, c in enumerate(nb.cells) if c.cell_type == "markdown"), 0) + 1
    if root:
        for i, c in enumerate(nb.cells):
            lines = c.source.splitlines() if c.cell_type == "markdown" else []
            h2 = next((j for j, ln in enumerate(lines) if ln.startswith("## ")), None)
            if h2 is not None:
                head = nbformat.v4.new_markdown_cell("\n".join(lines[:h2 + 1]))
                head["id"] = "scaletax-root-heading"
                c.source = "\n".join(lines[h2 + 1:])
                nb.cells[i:i] = [head]
                at = i + 1
                break
    nb.cells.insert(at, cell)
    for c in nb.cells:  # the parameters papermill injected are listed on the Reproduce page
        tags = c.metadata.setdefault("tags", [])
        if "injected-parameters" in tags and "remove-cell" not in tags:
            tags.append("remove-cell")
    nbformat.write(nb, dest)  # validates as it writes


def _sphinx_conf(src: Path, info: dict) -> str:
    from jupyter_book.config import get_final_config

    cfg, _ = get_final_config(user_yaml=CONFIG_YML, sourcedir=src, validate=True,
                              cli_config={"latex_individualpages": False},
                              raise_on_invalid=True)
    cfg["extensions"] = ([e for e in cfg["extensions"] if e not in DROP_EXTENSIONS]
                         + [TABLEFONT_EXTENSION, PARAGRAPH_EXTENSION]
                         + ([ONCE_EXTENSION] if speedups.on("sphinx_once") else [])
                         + [NUMBERING_EXTENSION])
    # a classic (deferred) script: a module script is refused from file://, drawing no chart
    cfg["html_js_files"] = [(VEGA_BUNDLE, {"defer": "defer"})]
    cfg["html_css_files"] = [CHART_CSS]
    latex = dict(cfg.get("latex_elements") or {})
    latex["preamble"] = latex.get("preamble", "") + LATEX_PREAMBLE + tablefit.LATEX_TABLE_SETUP
    cfg["latex_elements"] = latex
    # The theme prints html_title unescaped in places (the navbar) and escaped in others (the
    # page <title>): it is given escaped, as markupsafe.Markup, which Jinja's |e leaves alone.
    # Sphinx escapes `project` itself; LaTeX takes latex_documents' title as LaTeX markup.
    cfg["html_title"] = escape.html_text(info["title"])
    cfg["project"] = info["title"]
    cfg["release"] = info["version"]
    cfg["version"] = info["version"]
    cfg["latex_documents"] = [(toc.ROOT_PAGE, "book.tex", escape.latex_text(info["title"]), "scaletax",
                               "manual")]
    cfg["html_last_updated_fmt"] = None
    cfg["today"] = info["date"][:10]
    lines = ["# Generated by scaletax.report.book from _config.yml; do not edit.",
             "from markupsafe import Markup"]
    for key in sorted(cfg):
        lines.append(f"{key} = {cfg[key]!r}")
    lines += ["", "", "def setup(app):",
              "    # html_title is escaped already: mark it so once the theme has checked the config",
              "    app.connect('builder-inited', lambda app: setattr(app.config, 'html_title', "
              "Markup(app.config.html_title)))"]
    return "\n".join(lines) + "\n"


def stage_sources(src: Path, results: list[Result], info: dict) -> None:
    """Copy pages and executed notebooks into ``src`` and write toc, conf and generated pages
    (the chart bundle made afresh: :func:`scaletax.render.charts.vega_bundle`)."""
    shutil.copytree(toc.BOOK_DIR, src)
    (src / "_static").mkdir(exist_ok=True)
    (src / "_static" / VEGA_BUNDLE).write_text(vega_bundle(), encoding="utf-8")
    (src / "_toc.yml").write_text(yaml.safe_dump(toc.toc_yaml(), sort_keys=False), encoding="utf-8")
    for res in results:
        _add_provenance(res.notebook, src / f"{res.slug}.ipynb", info, root=res.slug == toc.ROOT_PAGE)
    tokens = page_tokens({**info, "keyed_rows": {r.slug: keyed_rows(r.hardware_reads) for r in results}})
    for name in ("reproduce", "cite", "intro"):
        path = src / f"{name}.md"
        path.write_text(_fill(path.read_text(encoding="utf-8"), tokens), encoding="utf-8")
    (src / "conf.py").write_text(_sphinx_conf(src, info), encoding="utf-8")
    # No directive in the book needs raw HTML or file inclusion (notebook outputs are raw nodes
    # made by myst-nb, not directives): turn both off for every page, whatever text reaches it.
    (src / "docutils.conf").write_text(DOCUTILS_CONF, encoding="utf-8")


# --------------------------------------------------------------------------------------
# Building
# --------------------------------------------------------------------------------------
def _tool_env() -> dict[str, str]:
    """The environment of the build tools (Sphinx; latexmk)."""
    from scaletax.report.execute import process_env

    return process_env(PYTHONHASHSEED="0")


def _run(cmd: list[str], cwd: Path, log: Path, step: str, timeout: float = 1800) -> None:
    """Run one build tool in its own process group, killed with the build (whatever kills it)."""
    proc = None
    with contextlib.ExitStack() as stack:
        try:
            fh = stack.enter_context(log.open("w", encoding="utf-8"))
            with lifecycle.Interrupts.deferred():  # an interrupt during the fork: once proc is set
                proc = subprocess.Popen(cmd, cwd=cwd, stdout=fh, stderr=subprocess.STDOUT, env=_tool_env(),
                                        stdin=subprocess.DEVNULL, start_new_session=True,
                                        preexec_fn=lifecycle.die_with_parent())
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise BuildError(f"{step} timed out after {timeout:.0f} s; log: {log}") from None
        finally:
            if proc is not None and proc.poll() is None:  # interrupted or timed out: the tool and its children go
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    if proc.returncode != 0:
        raise BuildError(_failure(step, proc.returncode, log, cwd))


#: Free bytes below which a failed step is reported as a full disk.
LOW_DISK_BYTES = 16 * 1024**2


def _failure(step: str, code: int, log: Path, where: Path) -> str:
    """One line on a failed build tool: its first warning or error, or what ran out (a full disk
    leaves the log empty or ends it with ENOSPC and names no warning; a file size limit, EFBIG or
    SIGXFSZ), then the log's last lines and the log."""
    try:
        text = log.read_text(encoding="utf-8", errors="replace")
    except OSError:
        text = ""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    first = next((ln for ln in lines if "WARNING" in ln or "ERROR" in ln or "Error" in ln or ln.startswith("!")),
                 f"exit status {code}")
    try:
        free = shutil.disk_usage(where).free
    except OSError:
        free = None
    if free is not None and free < LOW_DISK_BYTES:
        first = f"the disk is full ({free / 1024**2:.1f} MiB free where it writes, {where})"
    elif "No space left on device" in text:
        first = f"the disk is full (No space left on device, writing under {where})"
    elif "File too large" in text or code == -signal.SIGXFSZ:
        first = "a file outgrew the file size limit (File too large)"
    tail = " | ".join(lines[-3:]) if lines else "the log is empty"
    return f"{step} failed: {first[:300]}; log tail: {tail[-300:]}; full log: {log}"


def _book_key(opts: BuildOptions, info: dict, cache: Path) -> str:
    """Hash of every input of the book: when it matches the published book, nothing is rebuilt."""
    from scaletax.report.execute import inputs_key
    from scaletax.report.provenance import tree_hash

    code = lib_hash()
    parts = {
        "chapters": [inputs_key(ch, ch.parameters(opts.scenario), code, ch.definitions(opts.scenario))
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
    """The published manifest, marked as checked now, if its inputs equal ours; else None.

    The file itself is left as it is: it keeps the record of the build that made the book. Only
    this in-memory copy carries ``up_to_date`` (the build found nothing to do); a published
    manifest has no such key, so a reader of a fresh book never sees ``"up_to_date": false``."""
    path = final / "manifest.json"
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(manifest, dict) or manifest.get("book_sha256") != book_key \
            or not (final / "html" / "index.html").exists():
        return None
    if manifest.get("pdf") == "built" and not (final / f"{final.name}.pdf").exists():
        return None
    missing = [f for f in manifest.get("figures", []) if not (final / "figures" / f).is_file()]
    if missing:
        return None
    manifest["up_to_date"] = True
    manifest["checked_at"] = date
    for n in manifest["notebooks"]:
        n["status"], n["seconds"] = "reused", 0.0
    return manifest


def doctree_dir(src: Path) -> Path:
    """The doctrees (and Sphinx's environment) of the sources in ``src``, shared by the HTML
    and the LaTeX builds: nothing read depends on the builder (myst-nb picks a notebook
    output's HTML or PNG rendering when writing), so the LaTeX build reads no page again."""
    return src.parent / "doctrees"


def build_html(src: Path, out: Path, logs: Path) -> None:
    """The HTML of the sources in ``src``, read and written by one Sphinx process."""
    _run([*SPHINX, "-b", "html", "-n", "-W", "--keep-going", "-q",
          "-d", str(doctree_dir(src)), str(src), str(out)], src, logs / "html.log", "HTML build")


def build_pdf(src: Path, pdf: Path, logs: Path) -> None:
    """The PDF of the sources in ``src``: after :func:`build_html` of the same sources (whose
    doctrees it reuses), or alone."""
    latex = src.parent / "latex"
    _run([*SPHINX, "-b", "latex", "-n", "-W", "--keep-going", "-q",
          "-d", str(doctree_dir(src)), str(src), str(latex)], src, logs / "latex.log", "LaTeX build")
    _run(["latexmk", "-pdfxe", "-interaction=nonstopmode", "-halt-on-error", "-file-line-error",
          "book.tex"], latex, logs / "xelatex.log", "PDF (xelatex)", timeout=1800)
    shutil.copyfile(latex / "book.pdf", pdf)


# --------------------------------------------------------------------------------------
# Publishing: the swap of the new book for the old one can be cut at no point
# --------------------------------------------------------------------------------------
RENAME_EXCHANGE = 2
AT_FDCWD = -100


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths atomically (Linux ``renameat2(RENAME_EXCHANGE)``); False where the
    system or the file system cannot."""
    try:
        fn = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True).renameat2
    except (AttributeError, OSError):
        return False
    if fn(AT_FDCWD, os.fsencode(a), AT_FDCWD, os.fsencode(b), RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EPERM):
        return False
    raise OSError(err, os.strerror(err), str(b))


#: Called with the name of each publish step before it runs (tests inject faults here).
_publish_step = lambda step: None  # noqa: E731


def _journal(final: Path) -> Path:
    return final.with_name(f".publish-{final.name}.json")


def _publish(stage_out: Path, final: Path, use_exchange: bool = True) -> None:
    """Put the new book at ``final``; at every instant ``final`` is the old book or the new.

    With ``renameat2(RENAME_EXCHANGE)`` the swap is one atomic step (the old book lands in the
    stage folder, removed with it). Without it: a journal names the old book's temporary place,
    then two renames; :func:`recover` (run by the next build of the name) completes or rolls
    back a swap cut between them. Interrupt signals are held back for the swap.
    """
    with lifecycle.Interrupts.deferred(disarm_after=True):
        _publish_step("begin")
        if not final.exists():
            os.rename(stage_out, final)
            _publish_step("renamed")
            return
        if use_exchange and _exchange(stage_out, final):
            _publish_step("exchanged")
            return
        trash = final.with_name(f".trash-{final.name}-p{os.getpid()}-{os.urandom(4).hex()}")
        journal = _journal(final)
        tmp = journal.with_name(journal.name + ".tmp")
        tmp.write_text(json.dumps({"old": trash.name, "new": str(stage_out)}), encoding="utf-8")
        os.replace(tmp, journal)
        _publish_step("journal")
        os.rename(final, trash)
        _publish_step("old-moved")
        os.rename(stage_out, final)
        _publish_step("new-moved")
        journal.unlink()
        _publish_step("journal-removed")
    shutil.rmtree(trash, ignore_errors=True)


def recover(root: Path, name: str) -> str | None:
    """Finish what an interrupted publish of ``name`` left (call with the name's lock held):
    the old book is put back when the new one never arrived. Returns a note, or None."""
    final = root / name
    journal = _journal(final)
    note = None
    trash = None
    if journal.exists():
        try:
            trash = root / json.loads(journal.read_text(encoding="utf-8"))["old"]
        except (OSError, ValueError, KeyError, TypeError):
            trash = None
    if trash is None and not final.exists():  # no journal: a trash of an older build's swap
        trashes = sorted(root.glob(f".trash-{name}-*"), key=lambda p: p.stat().st_mtime)
        trash = trashes[-1] if trashes else None
    if trash is not None and trash.exists() and not final.exists():
        os.rename(trash, final)
        note = f"restored the previous book of {name!r} left by an interrupted build"
    journal.unlink(missing_ok=True)
    journal.with_name(journal.name + ".tmp").unlink(missing_ok=True)
    for old in root.glob(f".trash-{name}-*"):
        shutil.rmtree(old, ignore_errors=True)
    return note


def _log_failure(logs: Path, root: Path, name: str) -> Path:
    """Write the current exception's traceback to ``build.log`` (or a temporary file when the
    build folder cannot be written); returns the path."""
    import traceback

    text = traceback.format_exc()
    for path in (logs / "build.log", Path(tempfile.gettempdir()) / f"scaletax-{name}-build.log"):
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            return path
        except OSError:
            continue
    return Path("/dev/stderr")


def build(opts: BuildOptions, progress=None) -> dict:
    """Build the book named ``opts.name``; returns the manifest. Raises BuildError/BuildBusy.

    Any failure is a one-line BuildError (its traceback in the log it names); the previous
    book stays whole whatever happens, signals included."""
    root = opts.build_root
    logs = root / ".logs" / opts.name
    with lifecycle.Interrupts() as interrupts:
        try:
            lock = _acquire(root, opts.name)
        except lifecycle.Interrupted as exc:
            raise BuildError(f"build interrupted ({exc}) before it started") from None
        stage = None
        try:
            for note in filter(None, [recover(root, opts.name)]):
                if progress:
                    progress("book", note)
            lifecycle.remove_stale(root, (".stage-*",), owned=(f".stage-{opts.name}-*",))
            lifecycle.remove_stale(root / ".cache", (".tmp-*",))
            stage = Path(tempfile.mkdtemp(prefix=lifecycle.temp_name(f".stage-{opts.name}-"), dir=root))
            if logs.exists():
                shutil.rmtree(logs)
            logs.mkdir(parents=True)
            return _build_in(stage, logs, opts, progress)
        except lifecycle.Interrupted as exc:
            raise BuildError(f"build interrupted ({exc}); {root / opts.name} left as it was") from None
        except (BuildError, ChapterFailed):
            raise
        except OSError as exc:
            log = _log_failure(logs, root, opts.name)
            where = f" ({exc.filename})" if exc.filename else ""
            raise BuildError(f"cannot build: {exc.strerror or exc}{where}; {root / opts.name} left as it "
                             f"was; log: {log}") from None
        except Exception as exc:  # noqa: BLE001 (one line, the traceback in the log)
            log = _log_failure(logs, root, opts.name)
            raise BuildError(f"build failed: {type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}; "
                             f"{root / opts.name} left as it was; log: {log}") from None
        finally:
            interrupts.disarm()
            with lifecycle.Interrupts.deferred():
                if stage is not None:
                    shutil.rmtree(stage, ignore_errors=True)
                lock.release()


def _acquire(root: Path, name: str) -> FileLock:
    """The build folder checked writable and the name's lock taken, or a one-line error."""
    try:
        (root / ".locks").mkdir(parents=True, exist_ok=True)
        probe = tempfile.NamedTemporaryFile(dir=root, prefix=".write-test-", delete=True)
        probe.close()
    except OSError as exc:
        raise BuildError(f"cannot write to the build folder {root}: {exc.strerror}") from None
    lock = FileLock(str(root / ".locks" / f"{name}.lock"))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        raise BuildBusy(f"another build of {name!r} is running (lock {lock.lock_file}); "
                        "wait for it to finish or build under another --name") from None
    except OSError as exc:
        raise BuildError(f"cannot take the lock {lock.lock_file}: {exc.strerror}") from None
    return lock


def _build_in(stage: Path, logs: Path, opts: BuildOptions, progress) -> dict:
    t0 = time.perf_counter()
    scen = opts.scenario
    commit = git_commit()
    date = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    info = page_info(opts.name, scen, opts.scenario_path, opts.overrides, commit, date)
    command = info["command"]

    cache = opts.build_root / ".cache"
    final = opts.build_root / opts.name
    book_key = _book_key(opts, info, cache)
    current = _up_to_date(final, book_key, date)
    if current is not None:
        if progress:
            progress("book", "up to date (no input changed): nothing executed or rebuilt")
        return current
    results = execute_chapters(list(toc.CHAPTERS), scen, cache, logs, jobs=opts.jobs, progress=progress,
                               work_dir=stage / "chapters")
    t_exec = time.perf_counter() - t0

    src = stage / "src"
    stage_sources(src, results, info)
    out = stage / "out"
    out.mkdir()
    pdf = opts.pdf and xelatex_available()
    if progress:
        progress("book", "building HTML")
    build_html(src, out / "html", logs)
    pdf_status = "skipped (--no-pdf)"
    if pdf:
        if progress:
            progress("book", "building PDF")
        build_pdf(src, out / f"{opts.name}.pdf", logs)
        pdf_status = "built"
    elif opts.pdf:
        pdf_status = "skipped (xelatex not installed)"
    shutil.rmtree(out / "jupyter_execute", ignore_errors=True)  # myst-nb's copy for the builders
    figures = out / "figures"
    figures.mkdir()
    for res in results:
        if res.figures.exists():
            for f in sorted(res.figures.iterdir()):
                shutil.copyfile(f, figures / f.name)
    numbers = json.loads((stage / NUMBERS_FILE.format(builder="html")).read_text(encoding="utf-8"))
    numbered = stamp_exports(figures, numbers, info)
    manifest = {
        "name": opts.name,
        "book_sha256": book_key,
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
             "seconds": round(r.seconds, 2), "execution": r.execution, "parameters": r.parameters,
             "gpu_rows": keyed_rows(r.hardware_reads)}
            for r in results
        ],
        "figures": sorted(p.name for p in figures.iterdir()),
        "numbered": numbered,
        "seconds": {"execute": round(t_exec, 2), "total": round(time.perf_counter() - t0, 2)},
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=False) + "\n",
                                       encoding="utf-8")
    _publish(out, opts.build_root / opts.name)
    from scaletax.report.execute import cache_max_bytes, prune

    with contextlib.suppress(OSError, ValueError):  # the book is out: the cap is housekeeping
        prune(cache, cache_max_bytes(), keep=frozenset(r.key for r in results))
    return manifest


__all__ = ["BuildError", "BuildBusy", "BuildOptions", "ChapterFailed", "build",
           "xelatex_available", "tex_install_command"]
