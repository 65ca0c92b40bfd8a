"""The command line: exit statuses, one-line errors, and nothing written on bad input."""
import pytest

from conftest import run_cli


@pytest.mark.parametrize("args,expect", [
    (["build", "--set", "cluster.size=3"], "unknown key 'cluster.size'; did you mean 'cluster.sizes'?"),
    (["build", "--set", "gpus=[h100]"], "unknown GPU id 'h100'"),
    (["build", "--set", "training.tokens=-1"], "training.tokens"),
    (["build", "--set", "training.tokens=.nan"], "must be a finite number"),
    (["build", "--scenario", "does/not/exist.yaml"], "scenario file not found"),
    (["build", "--name", "../x"], "--name"),
    (["scenario", "show", "--set", "models=[nope]"], "unknown model id 'nope'"),
])
def test_bad_input_exits_2_with_one_line_and_writes_nothing(tmp_path, args, expect):
    build_dir = tmp_path / "build"
    proc = run_cli(args, build_dir)
    assert proc.returncode == 2, proc.stderr
    err = proc.stderr.strip()
    assert expect in err
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert not build_dir.exists()


def test_malformed_yaml_file(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: [unclosed\n")
    proc = run_cli(["build", "--scenario", str(bad)], tmp_path / "build")
    assert proc.returncode == 2
    assert "malformed YAML at line" in proc.stderr
    assert not (tmp_path / "build").exists()


def test_scenario_show_prints_resolved_yaml_and_hash(tmp_path):
    proc = run_cli(["scenario", "show", "--set", "cluster.gpus=32768"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("# sha256: ")
    assert "gpus: 32768" in proc.stdout
    # the power budget, the goodput model's inputs, ownership and the fleets are shown with their sources
    for text in ("power_mw: 200", "failure_report: llama3_405b", "restart_minutes: 10", "storage_tb_s: 2.0",
                 "depreciation_years: 5", "facility_usd_per_mw_year:", "fleets:", "name: H-equivalent fleet"):
        assert text in proc.stdout, text


def test_build_refuses_when_build_dir_cannot_be_written(tmp_path):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the build folder should be\n")
    proc = run_cli(["build", "--no-pdf"], blocker / "sub")
    assert proc.returncode == 1
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("scaletax: error: cannot write to the build folder")
    assert "Traceback" not in proc.stderr


def test_corrupted_data_file_stops_the_build_before_anything_runs(tmp_path, monkeypatch, capsys):
    import typer

    from scaletax.inputs import hardware
    from scaletax.report import cli

    bad = tmp_path / "hardware.csv"
    lines = hardware.HARDWARE_CSV.read_text().splitlines()
    lines[3] = lines[3].replace(",hopper,", ",hoper,", 1)
    bad.write_text("\n".join(lines) + "\n")
    monkeypatch.setattr(hardware, "HARDWARE_CSV", bad)
    hardware.catalog.cache_clear()
    try:
        with pytest.raises(typer.Exit) as exc:
            cli._check_data()
    finally:
        hardware.catalog.cache_clear()
    assert exc.value.exit_code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("scaletax: error: data file error: hardware.csv: row 4, column 'family'")
    assert len(err.splitlines()) == 1


# ---------------------------------------------------------------------------------------
# Every refusal is one line with exit 2 and writes nothing (issue 14's cases)
# ---------------------------------------------------------------------------------------
def _one_line(proc, code, expect):
    """The error: one line (a refusal: the only line; a failure: the last, after progress)."""
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == code, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr, proc.stderr
    if code == 2:
        assert len(lines) == 1, lines
    assert [ln for ln in lines if "error" in ln.lower()] == lines[-1:], lines
    assert lines[-1].startswith("scaletax: error: ") and expect in lines[-1], lines
    return lines[-1]


@pytest.mark.parametrize("args,expect", [
    (["build", "--name", ""], "--name '': use 1-64 lowercase letters"),
    (["build", "--set", "economics.energy.pue=true"], "economics.energy.pue: Input should be a valid number (got True)"),
    (["build", "--set", "precision.seed=true"], "precision.seed: Input should be a valid integer (got True)"),
    (["build", "--set", 'training.tokens="1e9"'], "training.tokens: Input should be a valid number (got '1e9')"),
    (["build", "--set", "training.global_batch_tokens=0x4000"], "(got '0x4000')"),
    (["build", "--set", "training.global_batch_tokens=1_6384"], "(got '1_6384')"),
    (["build", "--set", "precision.seed=" + "1" * 5000], "integer longer than 30 digits"),
    (["build", "--set", "economics.prices.b200.usd_per_gpu_hr=3"], "did you mean 'economics.prices.b200.usd_per_gpu_hour'?"),
    (["build", "--scenario", "/dev/zero"], "is not a regular file"),
])
def test_refusals_exit_2_in_one_line(tmp_path, args, expect):
    _one_line(run_cli(args, tmp_path / "build", timeout=120), 2, expect)
    assert not (tmp_path / "build").exists()


def test_scenario_files_refused_before_reading(tmp_path):
    import os

    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    _one_line(run_cli(["build", "--scenario", str(fifo)], tmp_path / "b", timeout=60), 2, "is not a regular file")
    deep = tmp_path / "deep.yaml"
    deep.write_text("name: x\nmodels: " + "[" * 1000 + "]" * 1000 + "\n")
    _one_line(run_cli(["scenario", "show", "--scenario", str(deep)], tmp_path, timeout=60), 2, "nested deeper than 16")
    dup = tmp_path / "dup.yaml"
    from scaletax.report.scenario import DEFAULT_SCENARIO
    dup.write_text(DEFAULT_SCENARIO.read_text().replace("  usd_per_mwh: 80\n", "  usd_per_mwh: 80\n  usd_per_mwh: 90\n"))
    _one_line(run_cli(["scenario", "show", "--scenario", str(dup)], tmp_path, timeout=60), 2,
              "duplicate key 'usd_per_mwh' at line")
    big = tmp_path / "big.yaml"
    big.write_text("name: x\n" + "#" * (300 * 1024) + "\n")
    _one_line(run_cli(["build", "--scenario", str(big)], tmp_path / "b", timeout=60), 2, "the limit is 262144 bytes")
    assert not (tmp_path / "b").exists()


def test_a_lock_path_that_is_a_folder_is_one_line_exit_1(tmp_path):
    build = tmp_path / "build"
    (build / ".locks" / "default.lock").mkdir(parents=True)
    err = _one_line(run_cli(["build", "--no-pdf"], build, timeout=300), 1, "cannot take the lock")
    assert "default.lock" in err
    assert not (build / "default").exists()


def test_a_cache_that_cannot_be_written_is_one_line_exit_1_with_a_log(tmp_path):
    build = tmp_path / "build"
    build.mkdir()
    (build / ".cache").write_text("a file where the cache folder should be\n")
    err = _one_line(run_cli(["build", "--no-pdf"], build, timeout=300), 1, "scaletax: error: cannot build: ")
    log = err.rsplit("log: ", 1)[1]
    assert "Traceback" in open(log).read()
    assert not (build / "default").exists()


def test_rich_markup_in_a_path_is_printed_as_typed(tmp_path):
    """A scenario path holding Rich markup (``[/bold]`` crashed the progress line with MarkupError,
    exit 1): printed as typed, and the build goes on to its own error (here an unwritable folder)."""
    from scaletax.report.scenario import DEFAULT_SCENARIO

    scen = tmp_path / "plan [/bold] [red]x[/red] :warning:.yaml"  # folders "plan [", "bold] [red]x[", a file
    scen.parent.mkdir(parents=True)
    scen.write_text(DEFAULT_SCENARIO.read_text())
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the build folder should be\n")
    proc = run_cli(["build", "--scenario", str(scen), "--no-pdf", "--name", "x"], blocker / "sub", timeout=120)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 1 and "MarkupError" not in proc.stderr, proc.stderr
    assert lines[0] == f"building x from {scen} with {__import__('os').cpu_count() or 1} job(s)"
    assert lines[-1].startswith("scaletax: error: cannot write to the build folder")


@pytest.mark.parametrize("args,expect", [
    (["build", "--jobs", "[/bold]"], "scaletax build: Invalid value for '--jobs'"),
    (["build", "--bogus"], "scaletax build: No such option: --bogus"),
    (["plan", "--model", "kimi_k2"], "scaletax plan: Missing option '--gpu'."),
    (["bogus"], "scaletax: No such command 'bogus'."),
])
def test_usage_errors_are_one_line_exit_2(tmp_path, args, expect):
    line = _one_line(run_cli(args, tmp_path / "build", timeout=60), 2, expect)
    assert line.startswith(f"scaletax: error: {expect}")


@pytest.mark.parametrize("a,b", [("probe/../other", "small"), ("/etc", "small"), ("..", "small"),
                                 ("small", "../small"), ("small\n", "other")])
def test_compare_takes_names_never_paths(tmp_path, a, b):
    """A book is a name under _build/: a path, '..' or a name with a newline is refused in one
    line (it read books outside _build/ and failed with an unexpected error, exit 1)."""
    bad = a if a != "small" else b
    line = _one_line(run_cli(["compare", a, b, "--no-pdf"], tmp_path / "build", timeout=60), 2, "is not a book name")
    assert line == (f"scaletax: error: {bad!r} is not a book name: give the name of a built book under _build/ "
                    "(1-64 lowercase letters, digits, '-' or '_') or a scenario .yaml file").replace("\n", " ")
    assert not (tmp_path / "build").exists()
