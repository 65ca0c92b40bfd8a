"""Exported figures and tables that cite themselves.

Every ``figures/<label>.png`` gets PNG text chunks (iTXt, UTF-8; PNG spec 1.2 section 4.2.3)
naming its number, caption, scenario and commit; every ``figures/<label>.csv`` gets a sidecar
``<label>.csv-metadata.json`` in the W3C "CSV on the Web" convention (the name a CSVW reader
looks for beside a CSV) with the same facts, the type of each column and the unit of each
number column (``report/units.py``). The numbers are the book's own (``report/numbering.py``),
so "Figure 3.2" in the file is Figure 3.2 in the HTML and in the PDF.
"""
from __future__ import annotations

import csv
import json
import struct
import zlib
from pathlib import Path

from scaletax.report import units

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
KIND_NAME = {"figure": "Figure", "table": "Table"}


def citation(entry: dict, info: dict) -> dict[str, str]:
    """The facts a reused figure or table carries: number and caption, book, scenario, commit."""
    title = f"{KIND_NAME[entry['kind']]} {entry['number']}"
    return {
        "Title": f"{title}: {entry['caption']}" if entry.get("caption") else title,
        "Label": entry["label"],
        "Source": (f"{info['title']} (scaletax {info['version']}, commit {info['commit']}), "
                   f"book {info['name']!r}, page {entry['page']}"),
        "Scenario": f"{info['name']} (scenario sha256 {info['scenario_hash']})",
        "Software": f"scaletax {info['version']}",
        "Creation Time": info["date"],
    }


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def png_chunks(png: bytes) -> list[tuple[bytes, bytes]]:
    """The (type, data) chunks of a PNG."""
    if not png.startswith(PNG_SIGNATURE):
        raise ValueError("not a PNG file")
    out, pos = [], len(PNG_SIGNATURE)
    while pos < len(png):
        (length,) = struct.unpack(">I", png[pos:pos + 4])
        out.append((png[pos + 4:pos + 8], png[pos + 8:pos + 8 + length]))
        pos += 12 + length
    return out


def png_text(png: bytes) -> dict[str, str]:
    """The tEXt and iTXt entries of a PNG (keyword -> text)."""
    text = {}
    for kind, data in png_chunks(png):
        if kind == b"tEXt":
            key, _, val = data.partition(b"\0")
            text[key.decode("latin-1")] = val.decode("latin-1")
        elif kind == b"iTXt":
            key, _, rest = data.partition(b"\0")
            compressed, rest = rest[0], rest[2:]
            _lang, _, rest = rest.partition(b"\0")
            _tkey, _, val = rest.partition(b"\0")
            text[key.decode("latin-1")] = (zlib.decompress(val) if compressed else val).decode("utf-8")
    return text


def stamp_png(png: bytes, text: dict[str, str]) -> bytes:
    """``png`` with ``text`` as iTXt chunks after IHDR, replacing earlier entries of those keys."""
    chunks = [(k, d) for k, d in png_chunks(png)
              if not (k in (b"tEXt", b"iTXt") and d.partition(b"\0")[0].decode("latin-1") in text)]
    new = [(b"iTXt", key.encode("latin-1") + b"\0\0\0\0\0" + val.encode("utf-8")) for key, val in text.items()]
    chunks = chunks[:1] + new + chunks[1:]
    return PNG_SIGNATURE + b"".join(_chunk(k, d) for k, d in chunks)


def _datatype(values: list[str]) -> str:
    present = [v for v in values if v != ""]
    if not present:
        return "string"
    try:
        [float(v) for v in present]
    except ValueError:
        return "string"
    return "number"


def csv_metadata(csv_path: Path, cite: dict[str, str]) -> dict:
    """A CSVW metadata document for ``csv_path``: what it is, where it comes from, its columns."""
    with csv_path.open(newline="", encoding="utf-8") as fh:
        rows = list(csv.reader(fh))
    header, body = rows[0], rows[1:]
    columns = []
    for i, name in enumerate(header):
        col = {"name": name, "titles": name, "datatype": _datatype([r[i] for r in body if i < len(r)])}
        if col["datatype"] == "number":
            col["scaletax:unit"] = units.unit(csv_path.stem, name)
        columns.append(col)
    return {
        "@context": "http://www.w3.org/ns/csvw",
        "url": csv_path.name,
        "dc:title": cite["Title"],
        "dc:identifier": cite["Label"],
        "dc:source": cite["Source"],
        "scaletax:scenario": cite["Scenario"],
        "dc:created": cite["Creation Time"],
        "tableSchema": {"columns": columns},
    }


def stamp_exports(figures: Path, numbers: list[dict], info: dict) -> list[dict]:
    """Stamp every exported PNG and CSV of ``figures`` with its citation; returns the index
    (label, kind, number, caption, page, files) that the manifest lists."""
    index = []
    for entry in numbers:
        cite = citation(entry, info)
        files = []
        png = figures / f"{entry['label']}.png"
        if png.exists():
            png.write_bytes(stamp_png(png.read_bytes(), cite))
            files.append(png.name)
        data = figures / f"{entry['label']}.csv"
        if data.exists():
            meta = data.with_name(data.name + "-metadata.json")
            meta.write_text(json.dumps(csv_metadata(data, cite), indent=1, ensure_ascii=False) + "\n",
                            encoding="utf-8")
            files += [data.name, meta.name]
        index.append({**entry, "files": files})
    return index
