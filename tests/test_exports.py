"""Exported figures and tables carry their number, caption, scenario and commit."""
import json
import zlib

import pytest
import vl_convert as vlc

from scaletax.report import exports

INFO = {"title": "The scale tax", "version": "0.1.0", "commit": "abc123+dirty", "name": "my-plan",
        "scenario_hash": "f" * 64, "date": "2026-12-01 10:00 UTC"}


def _png():
    return vlc.vegalite_to_png({"mark": "point", "data": {"values": [{"x": 1}]}, "encoding": {"x": {"field": "x"}}})


def test_png_text_chunks_round_trip_and_keep_the_image_valid():
    png = _png()
    stamped = exports.stamp_png(png, {"Title": "Figure 3.2: Bytes per GPU – by term", "Scenario": "my-plan"})
    assert exports.png_text(stamped)["Title"] == "Figure 3.2: Bytes per GPU – by term"
    kinds = [k for k, _ in exports.png_chunks(stamped)]
    assert kinds[0] == b"IHDR" and kinds[-1] == b"IEND" and kinds.count(b"iTXt") == 2
    # every chunk's CRC is right (a viewer would reject the file otherwise)
    pos = 8
    while pos < len(stamped):
        n = int.from_bytes(stamped[pos:pos + 4], "big")
        body = stamped[pos + 4:pos + 8 + n]
        assert int.from_bytes(stamped[pos + 8 + n:pos + 12 + n], "big") == zlib.crc32(body)
        pos += 12 + n
    # the image data is untouched; stamping again replaces rather than duplicates
    assert [d for k, d in exports.png_chunks(stamped) if k == b"IDAT"] == \
        [d for k, d in exports.png_chunks(png) if k == b"IDAT"]
    again = exports.stamp_png(stamped, {"Title": "Figure 3.3"})
    assert exports.png_text(again) == {"Title": "Figure 3.3", "Scenario": "my-plan"}
    with pytest.raises(ValueError, match="not a PNG"):
        exports.png_chunks(b"GIF89a")


def test_stamp_exports_writes_citation_into_png_and_csv_sidecar(tmp_path):
    (tmp_path / "fig-mem-terms.png").write_bytes(_png())
    (tmp_path / "fig-mem-terms.csv").write_text("gpu,gib,note\nh100_sxm,71.5,x\ngb200,,y\n")
    (tmp_path / "tbl-dec-cost.csv").write_text("model,cost,cost_low,cost_high\nKimi K2,13.3,12.1,15.4\n")
    numbers = [{"label": "fig-mem-terms", "kind": "figure", "number": "4.1", "caption": "Bytes per GPU.",
                "page": "memory"},
               {"label": "tbl-dec-cost", "kind": "table", "number": "8.3", "caption": "Cost.", "page": "decision"}]
    index = exports.stamp_exports(tmp_path, numbers, INFO)
    text = exports.png_text((tmp_path / "fig-mem-terms.png").read_bytes())
    assert text["Title"] == "Figure 4.1: Bytes per GPU."
    assert "commit abc123+dirty" in text["Source"] and text["Scenario"].startswith("my-plan (scenario sha256 fff")
    meta = json.loads((tmp_path / "tbl-dec-cost.csv-metadata.json").read_text())
    assert meta["url"] == "tbl-dec-cost.csv" and meta["dc:title"] == "Table 8.3: Cost."
    assert [c["datatype"] for c in meta["tableSchema"]["columns"]] == ["string", "number", "number", "number"]
    assert [c.get("scaletax:unit") for c in meta["tableSchema"]["columns"]] == [None] + ["million USD"] * 3
    fig_meta = json.loads((tmp_path / "fig-mem-terms.csv-metadata.json").read_text())
    assert [c["datatype"] for c in fig_meta["tableSchema"]["columns"]] == ["string", "number", "string"]
    assert fig_meta["tableSchema"]["columns"][1]["scaletax:unit"] == "GiB"
    assert index[0]["files"] == ["fig-mem-terms.png", "fig-mem-terms.csv", "fig-mem-terms.csv-metadata.json"]


def test_a_column_unit_comes_from_its_file_then_its_name_then_its_ending():
    from scaletax.report import units

    assert units.unit("fig-comm-tax", "t_step") == "s"
    assert units.unit("tbl-dec-time", "tps_low") == units.unit("tbl-dec-time", "tps") == "tokens/s per GPU"
    assert units.unit("tbl-mem-min", "hbm_tib") == "TiB" and units.unit("x", "busbw_gb_s") == "GB/s"
    # the same name, two meanings: GPUs in one file, a row number in another
    assert units.unit("fig-comm-busbw", "n") == "GPUs" and units.unit("fig-val-mfu", "n") == "index (no unit)"
    assert units.unit("tbl-x", "no_such_thing") is None
