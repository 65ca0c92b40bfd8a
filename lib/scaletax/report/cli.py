"""The ``scaletax`` command line: build a book, compare two, show a scenario, predict a runs table.

Exit status: 0 success, 1 a build step failed (the previous book is intact),
2 bad input (nothing written). Errors are one line on stderr, never a traceback.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import List, Optional

import typer

from scaletax import ROOT

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Build the scale-tax book and query its model.")
scenario_app = typer.Typer(no_args_is_help=True, help="Inspect scenarios.")
app.add_typer(scenario_app, name="scenario")
cache_app = typer.Typer(no_args_is_help=True, help="Manage the execution cache (_build/.cache).")
app.add_typer(cache_app, name="cache")


def _fail(msg: str, code: int) -> None:
    """``scaletax: error: <msg>`` on one line of stderr (line breaks in ``msg`` become spaces),
    then exit with ``code``."""
    typer.echo(f"scaletax: error: {' '.join(str(msg).splitlines())}", err=True)
    raise typer.Exit(code)


def _console(stderr: bool = True):
    """A rich console that prints text as text: no markup (``[bold]`` in a path or a model name
    shows as typed), no emoji codes, no highlighting. Styles come from :class:`rich.text.Text`."""
    from rich.console import Console

    return Console(stderr=stderr, markup=False, emoji=False, highlight=False, soft_wrap=True)


def _styled(*parts):
    """A line of plain text parts and ``(text, style)`` pairs (``rich.text.Text.assemble``)."""
    from rich.text import Text

    return Text.assemble(*parts)


def _resolve(scenario: Optional[Path], sets: List[str]):
    from scaletax.inputs.hardware import HardwareError
    from scaletax.report.scenario import DEFAULT_SCENARIO, ScenarioError, resolve

    path = scenario or DEFAULT_SCENARIO
    try:
        return path, resolve(path, sets)
    except (ScenarioError, HardwareError) as exc:
        _fail(str(exc), 2)


def _check_data() -> None:
    """Load every data file the chapters read, so a corrupted one stops the build before
    anything runs (exit 2, the message names file, row and column)."""
    from scaletax import DATA_DIR
    from scaletax.inputs import hardware, models, runs
    from scaletax.model import efficiency

    try:
        hardware.catalog()
        models.catalog()
        efficiency.default_band()
        runs.read_runs(DATA_DIR / "published_runs.csv")
    except ValueError as exc:
        _fail(f"data file error: {str(exc).splitlines()[0]}", 2)


SCENARIO_OPT = typer.Option(None, "--scenario", help="scenario YAML (default: data/scenarios/default.yaml)",
                            dir_okay=True, exists=False)
SET_OPT = typer.Option([], "--set", help="override a scenario value: dotted.key=value (repeatable)")


@app.command()
def build(
    scenario: Optional[Path] = SCENARIO_OPT,
    set_: List[str] = SET_OPT,
    name: Optional[str] = typer.Option(None, "--name", help="output name (default: scenario name, plus a hash of the resolved scenario unless it is the default)"),
    jobs: int = typer.Option(os.cpu_count() or 1, "--jobs", min=1, max=64, help="notebooks executed in parallel"),
    no_pdf: bool = typer.Option(False, "--no-pdf", help="build the HTML only"),
    force: bool = typer.Option(False, "--force", help="let --name replace the book of another scenario"),
) -> None:
    """Execute the chapters for a scenario and build _build/<name>/ (HTML, PDF, figures, manifest)."""
    from scaletax.report.book import (BuildBusy, BuildError, BuildOptions, ChapterFailed,
                                      build as run_build, tex_install_command, xelatex_available)
    from scaletax.report.scenario import ScenarioError, build_name

    path, scen = _resolve(scenario, set_)
    _check_data()
    try:
        out_name = build_name(scen, set_, name)
    except ScenarioError as exc:
        _fail(str(exc), 2)
    from scaletax.report.book import BUILD_ROOT
    from scaletax.report.provenance import name_conflict

    conflict = None if force else name_conflict(BUILD_ROOT / out_name, scen.content_hash())
    if conflict:
        _fail(conflict, 2)
    if not no_pdf and not xelatex_available():
        banner = "!" * 78
        typer.echo(f"{banner}\nWARNING: xelatex/latexmk not found: building the HTML only, NO PDF.\n"
                   f"Install TeX with:\n  {tex_install_command()}\n{banner}", err=True)
    console = _console()

    def progress(slug: str, status: str) -> None:
        console.print(_styled("  ", (f"{slug:<14}", "bold"), " ", status))

    console.print(_styled("building ", (out_name, "bold"), f" from {path} with {jobs} job(s)"))
    try:
        manifest = run_build(BuildOptions(name=out_name, scenario=scen, scenario_path=Path(path).resolve(),
                                          overrides=tuple(set_), jobs=jobs, pdf=not no_pdf),
                             progress=progress)
    except BuildBusy as exc:
        _fail(str(exc), 2)
    except (BuildError, ChapterFailed) as exc:
        _fail(str(exc), 1)
    from scaletax.report.book import BUILD_ROOT

    reused = sum(n["status"] == "reused" for n in manifest["notebooks"])
    if manifest.get("up_to_date"):
        console.print(f"up to date: {BUILD_ROOT / out_name} already holds this book (built {manifest['built_at']})")
        return
    console.print(f"done in {manifest['seconds']['total']:.0f} s: {len(manifest['notebooks'])} chapters "
                  f"({reused} reused), PDF {manifest['pdf']}")
    console.print(f"  {BUILD_ROOT / out_name / 'html' / 'index.html'}")


def _predict_help() -> str:
    from scaletax.inputs.runs import schema_text

    lines = schema_text().splitlines()
    return ("Predict memory per GPU (and throughput) for every row of a runs table.\n\n"
            + "\n\n".join(["\b\n" + "\n".join(lines)]))


@app.command(help=_predict_help())
def predict(
    runs: Path = typer.Option(..., "--runs", help="CSV in the published-runs schema (see data/sources/README.md)"),
    out: Optional[Path] = typer.Option(None, "--out", help="output CSV: a new path or a regular file (default: stdout)"),
) -> None:
    """Predict memory per GPU (and throughput) for every row of a runs table."""
    from scaletax.inputs.hardware import HardwareError
    from scaletax.inputs.runs import RunsTableError, read_runs, runs_csv
    from scaletax.report.predict import predict_rows, write_out

    from scaletax.report.book import BUILD_ROOT

    if out is not None:
        from scaletax.report.predict import check_out

        try:
            check_out(out, BUILD_ROOT)
        except ValueError as exc:
            _fail(str(exc), 2)
    try:
        rows = predict_rows(read_runs(runs))
    except (RunsTableError, HardwareError, ValueError) as exc:
        _fail(str(exc).splitlines()[0], 2)
    if out is None:
        typer.echo(runs_csv(rows), nl=False)
        return
    try:
        write_out(rows, out, BUILD_ROOT)
    except ValueError as exc:
        _fail(str(exc), 2)
    except OSError as exc:
        _fail(f"cannot write {out}: {exc.strerror}", 1)
    typer.echo(f"wrote {len(rows)} rows to {out}", err=True)


@cache_app.command("prune")
def cache_prune(
    max_mb: Optional[int] = typer.Option(None, "--max-mb", min=0,
                                         help="size cap in MiB (default: SCALETAX_CACHE_MAX_MB or 2048)"),
) -> None:
    """Remove bad entries and temporary folders of dead builds, then the least recently used
    entries until the cache fits its size cap."""
    from scaletax.report.book import BUILD_ROOT
    from scaletax.report.execute import cache_max_bytes, prune

    try:
        cap = max_mb * 1024**2 if max_mb is not None else cache_max_bytes()
    except ValueError as exc:
        _fail(str(exc), 2)
    try:
        res = prune(BUILD_ROOT / ".cache", cap, check=True)
    except OSError as exc:
        _fail(f"cannot prune {BUILD_ROOT / '.cache'}: {exc.strerror}", 1)
    typer.echo(f"cache {BUILD_ROOT / '.cache'}: removed {res['bad']} bad, {res['evicted']} least recently used, "
               f"{res['stale']} stale temporary; {res['entries']} entries, {res['bytes'] / 1024**2:.1f} MiB "
               f"(cap {cap / 1024**2:.0f} MiB)")


@app.command()
def plan(
    model: str = typer.Option(..., "--model", help="model id (catalog or defined in the scenario)"),
    gpu: str = typer.Option(..., "--gpu", help="GPU id (catalog or defined in the scenario)"),
    gpus: int = typer.Option(..., "--gpus", help="cluster size, GPUs"),
    scenario: Optional[Path] = SCENARIO_OPT,
    set_: List[str] = SET_OPT,
    as_json: bool = typer.Option(False, "--json", help="print JSON instead of a table"),
) -> None:
    """Best layout, tokens/s per GPU, days, GPU-hours, energy and cost (with bands) for one case."""
    import json

    from scaletax import memo
    from scaletax.report.chapters import BUILD_ROOT
    from scaletax.report.plan import PlanError, as_json as row_json, quick_plan, table

    _, scen = _resolve(scenario, set_)
    _check_data()
    try:
        with memo.using(BUILD_ROOT / ".cache" / "memo"):  # the builds' searches, and its own asked again
            row = quick_plan(scen, model, gpu, gpus)
    except PlanError as exc:
        _fail(str(exc), 2)
    if as_json:
        typer.echo(json.dumps(row_json(row), indent=2))
        return
    _console(stderr=False).print(table(row))


def _book_or_build(spec: str, sets: List[str], jobs: int, pdf: bool, console) -> str:
    """A built book's name as is; a scenario file (or a book plus ``--set``) is built first."""
    from scaletax.report.book import BUILD_ROOT, BuildBusy, BuildError, BuildOptions, ChapterFailed, build
    from scaletax.report.scenario import ScenarioError, build_name

    from scaletax.report.compare import CompareError, load_book

    path = Path(spec)
    if path.suffix in (".yaml", ".yml"):
        scen_path, base_sets, want = path, [], None
    else:
        try:
            book = load_book(BUILD_ROOT, spec)  # a book name, checked; not a path
        except CompareError as exc:
            _fail(str(exc), 2)
        if not sets:
            return spec
        m = book.manifest
        if not isinstance(m.get("scenario_file"), str) or not all(isinstance(o, str) for o in m.get("overrides", [])):
            _fail(f"book {spec!r}: its manifest names no scenario file to apply --set to", 2)
        scen_path, base_sets, want = ROOT / m["scenario_file"], list(m.get("overrides", [])), m.get("scenario_sha256")
        _, base = _resolve(scen_path, base_sets)
        if base.content_hash() != want:  # the file changed since: B would not be A plus the overrides
            _fail(f"book {spec!r} was built from {m['scenario_file']} as it was then (scenario sha256 "
                  f"{str(want)[:12]}); it now resolves to {base.content_hash()[:12]}: rebuild {spec!r} first, "
                  "or give B as a scenario file", 2)
    overrides = base_sets + list(sets)
    scen_path, scen = _resolve(scen_path, overrides)
    try:
        name = build_name(scen, overrides, None)
    except ScenarioError as exc:
        _fail(str(exc), 2)
    console.print(_styled("building ", (name, "bold"), " for the comparison"))
    try:
        build(BuildOptions(name=name, scenario=scen, scenario_path=Path(scen_path).resolve(),
                           overrides=tuple(overrides), jobs=jobs, pdf=pdf))
    except BuildBusy as exc:
        _fail(str(exc), 2)
    except (BuildError, ChapterFailed) as exc:
        _fail(str(exc), 1)
    return name


@app.command()
def compare(
    a: str = typer.Argument(..., help="book A: a built book's name (under _build/) or a scenario YAML"),
    b: Optional[str] = typer.Argument(None, help="book B: a built book's name or a scenario YAML "
                                                 "(default: A with the --set overrides)"),
    set_: List[str] = typer.Option([], "--set", help="build B as A's scenario with this override (repeatable)"),
    jobs: int = typer.Option(os.cpu_count() or 1, "--jobs", min=1, max=64, help="notebooks executed in parallel"),
    no_pdf: bool = typer.Option(False, "--no-pdf", help="build the HTML page only"),
) -> None:
    """Put two books side by side in _build/compare-A-vs-B/: inputs that differ, headline numbers
    with both values and the change, key figures of both in one chart (HTML and PDF)."""
    from scaletax.report.book import BUILD_ROOT, BuildError
    from scaletax.report.compare import CompareError, compare as run_compare

    console = _console()
    if b is not None and set_:
        _fail("give either book B or --set overrides (B is then A with them), not both", 2)
    if b is None and not set_:
        _fail("compare needs book B, or --set overrides to build it from A", 2)
    from scaletax.report.compare import check_name

    for spec in (a, b):
        if spec is not None and Path(spec).suffix not in (".yaml", ".yml"):
            try:
                check_name(spec)  # both names, before anything is read or built
            except CompareError as exc:
                _fail(str(exc), 2)
    a_name = _book_or_build(a, [], jobs, not no_pdf, console)
    b_name = _book_or_build(b if b is not None else a, list(set_), jobs, not no_pdf, console)
    try:
        result = run_compare(BUILD_ROOT, a_name, b_name, pdf=not no_pdf)
    except CompareError as exc:
        _fail(str(exc), 2)
    except BuildError as exc:
        _fail(str(exc), 1)
    console.print(f"{len(result['inputs'])} inputs differ, {len(result['headline'])} headline numbers, "
                  f"{len(result['figures'])} figures overlaid; PDF {result['pdf']}")
    console.print(f"  {BUILD_ROOT / result['name'] / 'html' / 'index.html'}")


@scenario_app.command("show")
def scenario_show(scenario: Optional[Path] = SCENARIO_OPT, set_: List[str] = SET_OPT) -> None:
    """Print the resolved, validated scenario as YAML, with its sha256."""
    import yaml

    _, scen = _resolve(scenario, set_)
    typer.echo(f"# sha256: {scen.content_hash()}")
    typer.echo(yaml.safe_dump(scen.to_plain(), sort_keys=False, allow_unicode=True, width=100), nl=False)


def main() -> None:
    """Entry point: whatever goes wrong ends in one line on stderr, never a traceback on the
    terminal: a bad option or argument exits 2 (``scaletax: error: <command>: <what>``), anything
    unexpected exits 1 with the traceback in a log file it names."""
    try:
        code = app(prog_name="scaletax", standalone_mode=False)
        sys.exit(code if isinstance(code, int) else 0)
    except typer.TyperException as exc:  # typer's click: a usage error (exit 2)
        if type(exc).__name__ == "NoArgsIsHelpError":  # `scaletax` alone: the help
            exc.show()
            sys.exit(exc.exit_code)
        ctx = getattr(exc, "ctx", None)
        try:
            _fail(f"{ctx.command_path if ctx is not None else 'scaletax'}: {exc.format_message()}", exc.exit_code)
        except typer.Exit as done:
            sys.exit(done.exit_code)
    except typer.Abort:
        typer.echo("scaletax: interrupted", err=True)
        sys.exit(130)
    except KeyboardInterrupt:
        typer.echo("scaletax: interrupted", err=True)
        sys.exit(130)
    except (SystemExit, typer.Exit):
        raise
    except BaseException as exc:  # noqa: BLE001
        import tempfile
        import traceback

        log = Path(tempfile.gettempdir()) / f"scaletax-error-{os.getpid()}.log"
        try:
            log.write_text(traceback.format_exc(), encoding="utf-8")
            where = f"; traceback in {log}"
        except OSError:
            where = ""
        first = str(exc).splitlines()[0][:200] if str(exc) else ""
        typer.echo(f"scaletax: error: unexpected {type(exc).__name__}: {first}{where}", err=True)
        sys.exit(1)


if __name__ == "__main__":
    main()
