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

    from scaletax import hardware
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
