"""The hardware catalog: loader validation, unit conversions, precision support."""
import shutil

import pytest

from scaletax.inputs import hardware
from scaletax.inputs.hardware import HardwareError, UnknownHardware, UnsupportedPrecision


def test_catalog_loads_every_gpu_of_the_runs_schema():
    ids = hardware.ids()
    for gpu in ("a100_sxm_80gb", "h100_sxm", "h200_sxm", "h800_sxm", "b200", "gb200", "b300", "gb300", "rubin"):
        assert gpu in ids


def test_units_are_converted_to_si_one_direction():
    h100 = hardware.get("h100_sxm")
    assert h100.nvlink_bw == pytest.approx(450e9)      # 900 GB/s bidirectional -> 450 GB/s per direction
    assert h100.nic_bw == pytest.approx(50e9)          # 400 Gb/s -> 50 GB/s
    assert h100.hbm_bw == pytest.approx(3.35e12)
    assert h100.peak_flops("bf16") == pytest.approx(989.4e12)   # dense, not the 1979 sparse figure
    assert h100.hbm_bytes == pytest.approx(79.6 * 2**30)


def test_dense_flops_are_half_the_sparse_datasheet_numbers():
    # DGX B200: 72 PFLOP/s FP8 quoted with sparsity for 8 GPUs -> 4.5 PFLOP/s dense per GPU.
    assert hardware.get("b200").peak_flops("fp8") == pytest.approx(72e15 / 8 / 2)


def test_hopper_has_no_native_block_scaled_formats():
    h100 = hardware.get("h100_sxm")
    assert h100.supports("fp8") and not h100.supports("mxfp8") and not h100.supports("nvfp4")
    with pytest.raises(UnsupportedPrecision, match="h100_sxm has no native nvfp4"):
        h100.peak_flops("nvfp4")
    with pytest.raises(UnsupportedPrecision):
        hardware.get("a100_sxm_80gb").peak_flops("fp8")
    assert hardware.get("gb300").peak_flops("nvfp4") == pytest.approx(3 * hardware.get("gb300").peak_flops("fp8"))


def test_ridge_point_is_peak_over_bandwidth():
    h100 = hardware.get("h100_sxm")
    assert h100.ridge_point("bf16") == pytest.approx(989.4e12 / 3.35e12)


def test_unknown_id_lists_valid_ids_and_nearest():
    with pytest.raises(UnknownHardware) as exc:
        hardware.get("h100")
    msg = str(exc.value)
    assert "did you mean 'h100_sxm'" in msg and "valid ids:" in msg and "gb300" in msg


def test_every_row_has_sources_and_conflicts_name_the_value_used():
    for gpu in hardware.catalog().values():
        assert len(gpu.sources) > 10
        if gpu.conflicts:
            assert "model uses" in gpu.conflicts or "vs" in gpu.conflicts


def _corrupt(tmp_path, column, value, row_id="b200"):
    src = hardware.HARDWARE_CSV.read_text().splitlines()
    header = src[0].split(",")
    col = header.index(column)
    import csv, io

    rows = list(csv.reader(io.StringIO("\n".join(src))))
    for r in rows[1:]:
        if r[0] == row_id:
            r[col] = value
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows(rows)
    path = tmp_path / "hardware.csv"
    path.write_text(out.getvalue())
    return path, rows.index(next(r for r in rows if r[0] == row_id)) + 1


@pytest.mark.parametrize("column,value,expect", [
    ("hbm_gib", "-80", "greater than 0"),
    ("bf16_tflops", "lots", "valid number"),
    ("status", "rumoured", "'shipping' or 'announced'"),
    ("sources", "", "Field required"),
    ("nvlink_domain", "0", "greater than 0"),
])
def test_corrupted_row_is_reported_with_file_row_and_column(tmp_path, column, value, expect):
    path, rownum = _corrupt(tmp_path, column, value)
    with pytest.raises(HardwareError) as exc:
        hardware.load_catalog(path)
    msg = str(exc.value)
    assert f"hardware.csv: row {rownum}, column '{column}'" in msg
    assert expect in msg
    assert "\n" not in msg


def test_missing_file_and_duplicate_ids(tmp_path):
    with pytest.raises(HardwareError, match="cannot read"):
        hardware.load_catalog(tmp_path / "nope.csv")
    text = hardware.HARDWARE_CSV.read_text().splitlines()
    (tmp_path / "dup.csv").write_text("\n".join(text + [text[2]]) + "\n")
    with pytest.raises(HardwareError, match="duplicate id"):
        hardware.load_catalog(tmp_path / "dup.csv")
