"""Every door scenario text could come in by, fuzzed (issue 35).

A corpus of hostile payloads (script and event-handler HTML, remote images, MyST directives and
roles that read files, fences and backtick runs, TeX math that inputs files, table pipes and line
breaks, spreadsheet formulas, Rich markup, bidi and zero-width characters, very long text) is
tried two ways:

- per payload and per target, without a build: each function of :mod:`scaletax.escape`, and a
  book table (``render.tables``) parsed as the book parses it (MyST through docutils, with raw
  HTML and file insertion still *on*, so the escaping alone must hold);
- once end to end: one scenario with a payload in every text field the schema has (found by
  walking the schema, so a new field is fuzzed without a change here), in every text field of an
  inline GPU and an inline model, in the scenario file's name and in an override, built into a
  book (HTML, PDF, CSVs) and compared with another book. Then the parsed DOM holds no element
  or attribute from the payloads, no file the scenario named is copied or included anywhere
  (a planted canary file), no CSV cell starts a formula, and Chromium runs no payload script.
"""
from __future__ import annotations

import csv
import html.parser
import io
import json
import re
import shlex
import shutil
import subprocess
from pathlib import Path
from types import UnionType
from typing import Annotated, Any, Union, get_args, get_origin

import pytest
import yaml
from docutils import nodes
from docutils.core import publish_doctree
from myst_parser.parsers.docutils_ import Parser
from pydantic import BaseModel

from scaletax import ROOT, escape
from scaletax.inputs import hardware, models
from scaletax.render import tables
from scaletax.report import scenario as sc

#: Every payload carries this mark (and a number), so whatever came from one can be found.
MARK = "zqx"
#: The canary file's content: never in any output of a build.
CANARY_TEXT = "CANARY-d41d8cd98f-CONTENT"
#: Placeholder in the payloads for the canary file's path.
CANARY = "@CANARY@"
#: Leads from a page's source folder up to the root, whatever the depth of the stage folder.
UP = "../" * 40


def _payloads() -> list[str]:
    p = [
        "<script>window.{m}=1</script>",
        "<img src=x onerror=window.{m}=1>",
        "<svg onload=window.{m}=1><b>bold</b><u>u</u>",
        "\"><iframe src=//127.0.0.1:9/{m}></iframe><a href=\"javascript:window.{m}=1\">a</a>",
        "![{m}](http://127.0.0.1:9/{m}.png) [link](javascript:window.{m}=1) <http://127.0.0.1:9/{m}>",
        "{{download}}`f <" + UP + CANARY + ">` {{download}}`" + CANARY + "`",
        "{{raw:html}}`<script>window.{m}=1</script>` {{raw}}`html <b>{m}</b>`",
        "```{{include}} " + UP + CANARY + "\n```",
        ":::{{include}} " + UP + CANARY + "\n:::",
        "```{{literalinclude}} " + CANARY + "\n```\n\n```{{image}} http://127.0.0.1:9/{m}.png\n```",
        "~~~{{eval-rst}}\n.. raw:: html\n   :file: " + CANARY + "\n\n.. include:: " + CANARY + "\n~~~",
        "``` ```` ` `` x ``` {m} ````` ``",
        "$\\catcode95=12 \\input{{" + CANARY + "}}$ and $$\\input{{" + CANARY + "}}$$",
        "\\end{{document}} \\input{{" + CANARY + "}} % # & ~ ^ _ {{ }} \\\\ \\par",
        "a | b || c\nd\n\n- list\n1. item\n# heading\n> quote\n    indented",
        "=HYPERLINK(\"http://127.0.0.1:9/{m}\",\"x\")",
        "+cmd|' /C calc'!A0 {m}",
        "-2+3+cmd|' /C calc'!A0",
        "@SUM(1+1)*cmd|' /C calc'!A0",
        "\t=1+1 {m}",
        "\r=1+1 {m}",
        "[bold]{m}[/bold] [/bold] [red]x[/] :warning:",
        "\u202eevil\u202c zero\u200bwidth\ufeff joiner\u200d {m}",
        "{{{{ title }}}} @@commit@@ (target)=\n% comment\n+++\n^^^ [^1] *emph* **strong** _u_",
        "&lt;script&gt;window.{m}=1&lt;/script&gt; &amp; &#60;b&#62;",
        "$(touch {m}-pwned) `id`; rm -rf / # '\"",
        "L" * 900 + " <script>window.{m}=1</script>",
    ]
    return [text.format(m=f"{MARK}{i:02d}") for i, text in enumerate(p)]


PAYLOADS = _payloads()
#: The payloads a scenario accepts as text (a carriage return is a control character it refuses).
SCENARIO_PAYLOADS = [p for p in PAYLOADS if "\r" not in p]
#: The GPU label's payload (16 characters; the book appends " (yours)"): HTML and math in the text
#: that legends, table cells and chart tooltips show most.
LABEL = f"<b>${MARK}\\in$</b>"
#: Payloads for a text field too short for any of :data:`PAYLOADS`.
SHORT = [f"<b>{MARK}</b>", f"${MARK}\\input$", f"{{raw}}`{MARK}`", f"`{MARK}` |", f"={MARK}+1", f"@{MARK}(1)"]


def _flat(text: str) -> str:
    return " ".join(text.split())


#: Sphinx's smart quotes (on in the book) print straight quotes and dashes typographically.
_SMART = str.maketrans({"\u201c": '"', "\u201d": '"', "\u2018": "'", "\u2019": "'"})


def _shown(text: str) -> str:
    """Page text as typed: smart quotes and dashes back to ASCII, whitespace runs as one space."""
    return _flat(text.translate(_SMART).replace("\u2014", "---").replace("\u2013", "--").replace("\u2026", "..."))


def _with_canary(text: str, canary: Path) -> str:
    return text.replace(CANARY, str(canary))


# ---------------------------------------------------------------------------------------
# Per payload, per target (no build)
# ---------------------------------------------------------------------------------------
MYST = {"myst_enable_extensions": ["colon_fence", "dollarmath", "amsmath", "deflist", "substitution"],
        "myst_url_schemes": ["http", "https", "mailto"],
        "raw_enabled": True, "file_insertion_enabled": True, "report_level": 5, "halt_level": 5}
#: Nodes only markup can make.
MARKUP_NODES = (nodes.raw, nodes.reference, nodes.image, nodes.target, nodes.math, nodes.math_block,
                nodes.substitution_reference, nodes.footnote_reference, nodes.section, nodes.title,
                nodes.bullet_list, nodes.enumerated_list, nodes.block_quote, nodes.comment, nodes.emphasis,
                nodes.strong, nodes.problematic, nodes.system_message, nodes.literal, nodes.literal_block,
                nodes.definition_list, nodes.field_list, nodes.container, nodes.admonition)


def _doctree(source: str):
    return publish_doctree(source, parser=Parser(), settings_overrides=MYST)


@pytest.fixture(scope="module")
def canary(tmp_path_factory):
    path = tmp_path_factory.mktemp("canary") / "canary.txt"
    path.write_text(CANARY_TEXT + "\n")
    return path


@pytest.mark.parametrize("i", range(len(PAYLOADS)))
def test_myst_text_is_text(i, canary):
    text = _with_canary(PAYLOADS[i], canary)
    tree = _doctree("Before " + escape.myst_text(text) + " after.")
    assert [n for n in tree.findall() if isinstance(n, MARKUP_NODES)] == []
    assert tree.astext() == _flat("Before " + text + " after.")
    assert CANARY_TEXT not in tree.astext()


def test_a_table_of_payloads_keeps_its_shape_and_shows_them_as_typed(canary, tmp_path, monkeypatch):
    """Every payload as a header, a cell and in the caption of one book table: one table, as many
    rows and columns as given, every cell's text the payload (whitespace runs as one space)."""
    monkeypatch.setenv("SCALETAX_FIGURES_DIR", str(tmp_path))
    texts = [_with_canary(p, canary) for p in PAYLOADS]
    columns = {f"c{j}": texts[j] for j in range(len(texts))}
    rows = [{f"c{j}": texts[(j + k) % len(texts)] for j in range(len(texts))} for k in range(3)]
    caption = " ".join(texts[:8])
    source = tables.table(rows, columns, label="tbl-fuzz", caption=caption)._repr_markdown_()
    tree = _doctree(source)
    found = list(tree.findall(nodes.table))
    assert len(found) == 1
    assert found[0]["ids"] == ["tbl-fuzz"] or "tbl-fuzz" in found[0].get("names", [])
    assert _flat(found[0].next_node(nodes.title).astext()) == _flat(caption)
    got = [[_flat(entry.astext()) for entry in row.findall(nodes.entry)] for row in found[0].findall(nodes.row)]
    assert got[0] == [_flat(t) for t in texts]
    assert got[1:] == [[_flat(r[f"c{j}"]) for j in range(len(texts))] for r in rows]
    bad = [n for n in found[0].findall() if isinstance(n, MARKUP_NODES) and not isinstance(n, nodes.title)]
    assert bad == []
    # and the CSV beside it: every cell read back as written, none a formula
    with (tmp_path / "tbl-fuzz.csv").open(newline="", encoding="utf-8") as fh:
        cells = list(csv.reader(fh))
    assert [escape.csv_value(c) for c in cells[1]] == [rows[0][f"c{j}"] for j in range(len(texts))]
    assert not [c for r in cells for c in r if _formula(c)]


@pytest.mark.parametrize("i", range(len(PAYLOADS)))
def test_markup_keeps_payload_text_as_text(i):
    """A link or a citation the book writes around payload text: one reference, its text the payload."""
    text = PAYLOADS[i]
    tree = _doctree(escape.markup(escape.myst_link(text, "https://example.org/a b<c>"), " ", text, " ",
                                  escape.myst_role("cite", "narayanan2021")))
    refs = list(tree.findall(nodes.reference))
    assert [(_flat(r.astext()), r["refuri"]) for r in refs] == [(_flat(text), "https://example.org/a%20b%3Cc%3E")]
    assert not [n for n in tree.findall() if isinstance(n, (nodes.raw, nodes.image, nodes.math, nodes.literal_block))]
    with pytest.raises(ValueError):
        escape.myst_link("x", "javascript:" + text)
    with pytest.raises(ValueError):
        escape.myst_role("cite", text)


@pytest.mark.parametrize("i", range(len(PAYLOADS)))
def test_code_spans_and_fences_hold_the_payload(i):
    text = PAYLOADS[i]
    code = _doctree("See " + escape.myst_code(text) + ".")
    assert [lit.astext() for lit in code.findall(nodes.literal)] == [_flat(text)]
    block = _doctree("Text.\n\n" + escape.myst_fence(text, "yaml") + "\n\nAfter.\n")
    # CommonMark reads a carriage return as a line ending (scenario text has none: it refuses them)
    assert [b.astext() for b in block.findall(nodes.literal_block)] == [text.replace("\r", "\n").strip("\n")]
    assert not list(block.findall(nodes.raw))


class _Elements(html.parser.HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, list]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, attrs))

    def handle_data(self, data):
        self.text.append(data)


@pytest.mark.parametrize("i", range(len(PAYLOADS)))
def test_html_text_and_script_json(i):
    text = PAYLOADS[i]
    parsed = _Elements()
    parsed.feed(f'<p title="{escape.html_text(text)}">{escape.html_text(text)}</p>')
    assert parsed.tags == [("p", [("title", text)])] and "".join(parsed.text) == text
    obj = {"title": text, "values": [text, 1.5]}
    script = _Elements()
    script.feed(f"<script>var x = {escape.script_json(obj)};</script><p>after</p>")
    assert [t for t, _ in script.tags] == ["script", "p"]  # the payload did not end the script
    assert json.loads(script.text[0][len("var x = "):-1]) == obj
    assert "</" not in escape.script_json(obj) and "<!--" not in escape.script_json(obj)
    assert json.loads(escape.expr_string(text)) == text and escape.expr_string(text).isascii()


def _formula(cell: str) -> bool:
    """A CSV cell a spreadsheet reads as a formula: it starts with one of ``= + - @``, tab, CR, LF
    (or their full-width forms) and is not a number (digits, one sign, point, exponent, percent)."""
    return cell.startswith(escape.FORMULA_START) and not re.fullmatch(r"[-+]?(\d[\d,]*\.?\d*|\.\d+)([eE][-+]?\d+)?%?", cell)


@pytest.mark.parametrize("i", range(len(PAYLOADS)))
def test_csv_cells_never_start_a_formula_and_read_back(i):
    text = PAYLOADS[i]
    for variant in (text, "'" + text, text.lstrip(), "-1.5e3", "+2", "'=x"):
        cell = escape.csv_cell(variant)
        assert not _formula(cell)
        assert escape.csv_value(cell) == variant
        buf = io.StringIO()
        csv.writer(buf).writerow([cell])
        assert next(csv.reader(io.StringIO(buf.getvalue()))) == [cell]


@pytest.mark.parametrize("i", range(len(PAYLOADS)))
def test_shell_words_and_console_lines_are_text(i):
    from scaletax.report import cli

    text = PAYLOADS[i]
    assert shlex.split(escape.shell_command(["scaletax", "build", "--set", f"title={text}"])) == \
        ["scaletax", "build", "--set", f"title={text}"]
    console = cli._console(stderr=False)
    with console.capture() as cap:
        console.print(cli._styled("building ", (text, "bold"), f" from {text}"), soft_wrap=True)
    assert _flat(cap.get()) == _flat(f"building {text} from {text}")  # markup and emoji codes as typed


@pytest.mark.pdf
def test_latex_text_of_every_payload_compiles_and_typesets_as_typed(tmp_path, canary):
    from conftest import require_tools

    require_tools("xelatex", "pdftotext")
    texts = [_with_canary(p, canary) for p in PAYLOADS]
    body = "\n".join(f"\\noindent[{i}] {escape.latex_text(t)}\\par" for i, t in enumerate(texts))
    (tmp_path / "t.tex").write_text("\\documentclass{article}\n\\usepackage{fontspec}\n\\begin{document}\n"
                                    + body + "\n\\end{document}\n")
    proc = subprocess.run(["xelatex", "-interaction=nonstopmode", "-halt-on-error", "-no-shell-escape", "t.tex"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:]
    out = subprocess.run(["pdftotext", "t.pdf", "-"], cwd=tmp_path, capture_output=True, text=True).stdout
    assert CANARY_TEXT not in out
    assert f"\\input{{{canary}}}" in _flat(out)


# ---------------------------------------------------------------------------------------
# The scenario's text fields, from the schema
# ---------------------------------------------------------------------------------------
def _is_text(field) -> bool:
    """A scenario text field: a ``str`` with the scenario's text rule (``scenario.Text``, a fleet's
    name), or an optional one (``Text | None``)."""
    if field.annotation is str:
        return any(getattr(m, "func", None) is sc._plain_text for m in field.metadata)
    return any(get_origin(a) is Annotated and get_args(a)[0] is str
               and any(getattr(m, "func", None) is sc._plain_text for m in get_args(a)[1:])
               for a in get_args(field.annotation))


def _max_length(field) -> int:
    """The most characters a text field takes (its ``max_length``, from the field or its
    ``Annotated`` type)."""
    metas = list(field.metadata) + [m for a in get_args(field.annotation) if get_origin(a) is Annotated
                                    for m in get_args(a)[1:]]
    metas += [m for f in metas if hasattr(f, "metadata") for m in f.metadata]  # a Field(...) inside Annotated
    return min((m.max_length for m in metas if getattr(m, "max_length", None)), default=10**9)


def _sections(ann, data, prefix: str) -> dict[str, int]:
    """The text fields under a value of type ``ann`` holding ``data`` (a resolved scenario's part):
    a section (a schema), an optional one where ``data`` has it, every item of a list of sections
    and every entry of a map of sections (an id, a number or a map of anything holds none)."""
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        return _text_fields(ann, data, prefix) if isinstance(data, dict) else {}
    args = get_args(ann)
    if get_origin(ann) is list and args and isinstance(data, list):
        return {k: n for i, item in enumerate(data) for k, n in _sections(args[0], item, f"{prefix}{i}.").items()}
    if get_origin(ann) is dict and len(args) == 2 and isinstance(data, dict):
        return {k: n for key, item in data.items() for k, n in _sections(args[1], item, f"{prefix}{key}.").items()}
    out: dict[str, int] = {}
    for a in args:  # a union (``Section | None``): the member ``data`` is
        out.update(_sections(a, data, prefix))
    return out


def _text_fields(model: type[BaseModel], data: dict, prefix: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for name, field in model.model_fields.items():
        if _is_text(field):
            out[prefix + name] = _max_length(field)
        elif name in data:
            out.update(_sections(field.annotation, data[name], f"{prefix}{name}."))
    return out


def scenario_text_fields(data: dict, model: type[BaseModel] = sc.Scenario) -> dict[str, int]:
    """Dotted keys of every text field of the scenario schema, with the most characters each
    takes, for the parts ``data`` (a scenario) has: the sections, optional sections, lists of
    sections (``fleets.0.name``) and maps of sections (``economics.prices.<gpu>.source``)."""
    return _text_fields(model, data, "")


def schema_text_paths(ann: Any = sc.Scenario, prefix: str = "") -> set[str]:
    """Every text field the schema can hold, as dotted patterns with ``*`` for an item of a list or
    an entry of a map (``fleets.*.name``, ``economics.ownership.capex.*.source``), whether or not a
    scenario has that part: what :func:`scenario_text_fields` must find in the fuzz scenario."""
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        out: set[str] = set()
        for name, field in ann.model_fields.items():
            out |= {prefix + name} if _is_text(field) else schema_text_paths(field.annotation, f"{prefix}{name}.")
        return out
    args = get_args(ann)
    if get_origin(ann) is list and args:
        return schema_text_paths(args[0], prefix + "*.")
    if get_origin(ann) is dict and len(args) == 2:
        return schema_text_paths(args[1], prefix + "*.")
    return set().union(*(schema_text_paths(a, prefix) for a in args))  # a union or an Annotated type


def _matches(pattern: str, field: str) -> bool:
    return re.fullmatch(re.escape(pattern).replace(r"\*", r"[^.]+"), field) is not None


def _is_inline_text(field) -> bool:
    """A text field of an inline definition's schema: ``str`` or ``str | None`` (not a ``Literal``)."""
    return field.annotation is str or (get_origin(field.annotation) in (Union, UnionType)
                                       and set(get_args(field.annotation)) == {str, type(None)})


def inline_text_fields(schema: type[BaseModel], extra: tuple[str, ...] = ("source",)) -> list[str]:
    """The text fields an inline GPU or model may set (text fields of its schema but the id),
    and the keys ``define`` takes besides the schema (``source``)."""
    return [k for k, f in schema.model_fields.items() if _is_inline_text(f) and k != "id"] + \
        [k for k in extra if k not in schema.model_fields]


def test_the_field_walk_finds_every_text_field():
    data = sc.resolve().to_plain()
    found = scenario_text_fields(data)
    assert {"title", "question", "training.tokens_source", "cluster.goodput_source", "cluster.power_mw_source",
            "cluster.reliability.failures_source", "cluster.reliability.restart_source",
            "cluster.reliability.storage_source", "economics.energy.source", "economics.usd_per_mwh_source",
            "economics.ownership.depreciation_source", "economics.ownership.cost_of_capital_source",
            "economics.ownership.facility_source", "economics.ownership.busy_source", "comparisons.source"} <= set(found)
    assert {f"economics.prices.{g}.source" for g in data["economics"]["prices"]} <= set(found)
    assert {f"economics.ownership.capex.{g}.source" for g in data["economics"]["ownership"]["capex"]} <= set(found)
    assert data["fleets"] and {f"fleets.{i}.{k}" for i in range(len(data["fleets"])) for k in ("name", "source")} <= set(found)
    assert found["fleets.0.name"] == 120 and found["title"] == 2000
    assert "name" not in found and "fleets.0.gpu" not in found  # a slug and an id, not text
    # the schema's patterns: the walk of the default scenario finds each, so a field added to a
    # section the default has is fuzzed without a change here (the fuzz scenario's own check is in
    # test_the_fuzz_scenario_fills_every_text_field_of_the_schema)
    patterns = schema_text_paths()
    assert {"title", "fleets.*.name", "economics.prices.*.source", "economics.ownership.capex.*.source",
            "cluster.reliability.restart_source"} <= patterns and "fleets.*.gpu" not in patterns
    assert [p for p in patterns if not any(_matches(p, f) for f in found)] == []
    # a text field added to either schema joins these (and the fuzz) without a change here
    assert {"name", "label", "hbm_basis", "verification", "sources", "conflicts", "assumptions", "system",
            "source"} <= set(inline_text_fields(hardware.GPU)) and "id" not in inline_text_fields(hardware.GPU)
    assert {"name", "source", "notes"} <= set(inline_text_fields(models.Model))


def _put(data: dict, dotted: str, value: Any) -> None:
    *head, last = dotted.split(".")
    for part in head:
        data = data[int(part)] if isinstance(data, list) else data[part]
    data[last] = value


def fuzz_scenario(canary: Path) -> tuple[dict, dict[str, str]]:
    """The default scenario (two GPUs, two models, a short experiment, a fleet and a system price of
    the inline GPU) with a payload in every text field: each field gets three payloads (as many as
    its length allows; a short one where none fits), rotated so that each payload lands in several
    fields of different kinds. Returns the scenario and {field: text}."""
    data = yaml.safe_load((ROOT / "data/scenarios/default.yaml").read_text(encoding="utf-8"))
    data["name"] = "fuzz"
    data["precision"].update(experiment_steps=40, experiment_seeds=2)
    data["cluster"].update(sizes=[1024, 8192], gpus=8192)
    gpu = {"id": "fz_gpu", "base": "gb200"}
    model = {"id": "fz-model", "base": "megatron_1t"}
    data["gpus"] = ["h100_sxm", gpu]
    data["models"] = ["kimi_k2", model]
    data["economics"]["prices"] = {
        "h100_sxm": {"usd_per_gpu_hour": 2.35, "assumption": False, "source": "x"},
        "fz_gpu": {"usd_per_gpu_hour": 4.5, "assumption": True, "source": "x"}}
    data["fleets"].append({"name": "fleet", "gpu": "fz_gpu", "count": 5000, "source": "x"})
    data["economics"]["ownership"]["capex"]["fz_gpu"] = {"usd_per_system": 3e6, "assumption": True, "source": "x"}
    fields = scenario_text_fields(data)
    fields.update({f"gpus.1.{k}": 2000 for k in inline_text_fields(hardware.GPU)})
    fields.update({f"models.1.{k}": 2000 for k in inline_text_fields(models.Model)})
    payloads = SCENARIO_PAYLOADS
    n = len(payloads)
    texts: dict[str, str] = {}
    for i, (field, most) in enumerate(fields.items()):
        picked = [_with_canary(payloads[(i + k * 9) % n], canary) for k in range(3)]
        while picked and len(" ".join(picked)) > most:
            picked.pop()
        text = " ".join(picked) or SHORT[i % len(SHORT)]  # a field too short for any payload takes a short one
        if field == "gpus.1.label":
            text = LABEL
        if field == "gpus.1.sources" and "." not in text:
            text += " ."  # the GPU schema wants a document or URL named
        texts[field] = text
        if field.startswith(("gpus.1.", "models.1.")):
            (gpu if field.startswith("gpus") else model)[field.rsplit(".", 1)[1]] = text
        else:
            _put(data, field, text)
    return data, texts


def test_the_fuzz_scenario_fills_every_text_field_of_the_schema(canary):
    """Every text field the scenario schema has (optional sections, lists and maps included) and
    every text field of the inline GPU and model schemas holds a payload in the fuzz scenario. A new
    optional section or list the fuzz scenario lacks fails here by name."""
    _, texts = fuzz_scenario(canary)
    missing = [p for p in sorted(schema_text_paths()) if not any(_matches(p, f) for f in texts)]
    assert missing == [], f"no payload in {missing}: give fuzz_scenario a value of that part"
    for kind, schema in (("gpus.1", hardware.GPU), ("models.1", models.Model)):
        assert {f"{kind}.{k}" for k in inline_text_fields(schema)} <= set(texts)


def test_every_payload_lands_in_several_fields_and_the_scenario_takes_them(tmp_path, canary):
    data, texts = fuzz_scenario(canary)
    for i, p in enumerate(SCENARIO_PAYLOADS):
        assert sum(_with_canary(p, canary) in t for t in texts.values()) >= 2, i
    with pytest.raises(sc.ScenarioError, match="question: text may not contain the control character U\\+000D"):
        sc.resolve(overrides=["question=\r=1+1"])
    path = tmp_path / "fuzz.yaml"
    path.write_text(yaml.safe_dump(data, allow_unicode=True, sort_keys=False), encoding="utf-8")
    scen = sc.resolve(path)
    plain = scen.to_plain()
    for field, text in texts.items():
        if field.startswith(("gpus.", "models.")):
            continue
        node: Any = plain
        for part in field.split("."):
            node = node[int(part)] if isinstance(node, list) else node[part]
        assert node == text, field
    defs = scen.definitions()
    gpu, model = defs["gpus"]["fz_gpu"], defs["models"]["fz-model"]
    assert gpu["assumptions"] == texts["gpus.1.assumptions"] and gpu["label"] == texts["gpus.1.label"] + " (yours)"
    assert model["name"] == texts["models.1.name"] + " (yours)" and texts["models.1.source"] in model["source"]


# ---------------------------------------------------------------------------------------
# End to end: one book, one comparison
# ---------------------------------------------------------------------------------------
#: Where a text node holding payload text may sit: elements that show text, never run it.
TEXT_TAGS = {"p", "span", "code", "pre", "div", "li", "dd", "dt", "td", "th", "h1", "h2", "h3", "title",
             "cite", "em", "strong", "section", "article", "main", "body", "html", "ul", "ol", "dl",
             "table", "tbody", "thead", "tr", "blockquote", "figcaption", "caption", "a", "nav", "header",
             "label", "button"}
#: How the book's own chart scripts start (render/charts.Figure.html), then a JSON array.
CHART_SCRIPT = "(window.__scaletaxCharts = window.__scaletaxCharts || []).push("
#: Elements no payload may make or fill.
ACTIVE_TAGS = {"script", "style", "iframe", "img", "object", "embed", "svg", "math", "b", "u", "link", "meta",
               "form", "input", "video", "audio", "source", "base", "frame", "frameset"}


@pytest.fixture(scope="module")
def fuzz_book(built_book, tmp_path_factory, canary):
    """The fuzz scenario built as book ``fuzz`` beside the small book, and ``compare fuzz small``."""
    from conftest import run_cli

    root = built_book["build_dir"]
    work = tmp_path_factory.mktemp("fuzz")
    data, texts = fuzz_scenario(canary)
    scen = work / f"plan `{MARK}f` $(touch {MARK}-pwned) [bold].yaml"
    scen.write_text(yaml.safe_dump(data, allow_unicode=True, sort_keys=False), encoding="utf-8")
    sets = ["--set", f"economics.usd_per_mwh_source={_with_canary(PAYLOADS[5], canary)} {PAYLOADS[0]}"]
    build = run_cli(["build", "--scenario", str(scen), *sets, "--name", "fuzz", "--jobs", "2"], root)
    assert build.returncode == 0, build.stderr[-3000:]
    comp = run_cli(["compare", "fuzz", "small", "--jobs", "2"], root)
    assert comp.returncode == 0, comp.stderr[-3000:]
    return {"book": root / "fuzz", "compare": root / "compare-fuzz-vs-small", "work": work, "texts": texts,
            "stderr": build.stderr + comp.stderr}


def _html_pages(folder: Path) -> list[Path]:
    return sorted(folder.rglob("*.html"))


@pytest.mark.book
def test_fuzzed_book_and_comparison_hold_no_markup_file_or_formula_from_the_payloads(fuzz_book, canary):
    from bs4 import BeautifulSoup

    book, comp = fuzz_book["book"], fuzz_book["compare"]
    assert f"{MARK}f" in fuzz_book["stderr"] and "[bold].yaml" in fuzz_book["stderr"]  # the path, as typed
    assert not list(fuzz_book["work"].glob(f"{MARK}-pwned*")) and not list(ROOT.glob(f"{MARK}-pwned*"))
    pages = _html_pages(book / "html") + _html_pages(comp / "html")
    assert len(pages) > 12
    seen: dict[str, int] = {}
    for page in pages:
        raw = page.read_text(encoding="utf-8")
        assert CANARY_TEXT not in raw, page
        soup = BeautifulSoup(raw, "html.parser")
        for el in soup.find_all(True):
            for attr, val in el.attrs.items():
                text = " ".join(val) if isinstance(val, list) else str(val)
                assert MARK not in text and CANARY_TEXT not in text, (page.name, el.name, attr, text[:100])
            if el.name == "script" and el.get_text().startswith(CHART_SCRIPT):
                # a chart of the book: the payloads are data in its JSON (GPU and model names), and
                # no character of them can end the script (every "<" is \u003c)
                body = el.get_text()
                assert "<" not in body and body.endswith(");"), (page.name, body[:100])
                json.loads(body[len(CHART_SCRIPT):-2])
            elif el.name in ACTIVE_TAGS:
                assert MARK not in el.get_text(), (page.name, el.name, el.get_text()[:100])
        for text in soup.find_all(string=lambda s: MARK in s):
            if text.parent.name == "script" and str(text).startswith(CHART_SCRIPT):
                continue  # chart data, checked above
            assert text.parent.name in TEXT_TAGS, (page.name, text.parent.name, str(text)[:100])
            for m in re.findall(MARK + r"\d\d", text):
                seen[m] = seen.get(m, 0) + 1
    # every payload reached the pages, as text
    assert set(seen) >= {re.search(MARK + r"\d\d", p).group(0) for p in SCENARIO_PAYLOADS if re.search(MARK + r"\d\d", p)}
    # the pages show the texts as typed: the title (page title and brand), the question, the GPU's
    # assumptions on the hardware page
    texts = fuzz_book["texts"]
    intro = BeautifulSoup((book / "html" / "intro.html").read_text(encoding="utf-8"), "html.parser")
    assert _flat(texts["title"]) in _flat(intro.title.get_text())
    assert _flat(intro.find(class_="logo__title").get_text()) == _flat(texts["title"])
    assert _shown(texts["question"]) in _shown(intro.get_text())
    hw = BeautifulSoup((book / "html" / "hardware.html").read_text(encoding="utf-8"), "html.parser")
    assert _shown(texts["gpus.1.assumptions"]) in _shown(hw.get_text())
    # nothing the scenario named was copied: no downloads, no image but the book's own charts
    for out in (book, comp):
        assert not [p for p in out.rglob("*") if p.is_dir() and p.name == "_downloads"]
        for f in out.rglob("*"):
            assert MARK not in f.name and canary.name not in f.name, f
            if f.is_file() and f.stat().st_size < 50_000_000:
                assert CANARY_TEXT.encode() not in f.read_bytes(), f
        images = [p for p in (out / "html").rglob("_images/*")]
        assert all(p.suffix in (".png", ".svg") and p.stat().st_size > 0 for p in images)
    # no CSV cell (book and comparison) starts a formula
    csvs = sorted((book / "figures").glob("*.csv"))
    assert len(csvs) > 20
    starts = 0
    for path in csvs:
        with path.open(newline="", encoding="utf-8") as fh:
            for row in csv.reader(fh):
                assert not [c for c in row if _formula(c)], (path.name, [c for c in row if _formula(c)][:2])
                starts += sum(escape.csv_value(c).startswith(escape.FORMULA_START) for c in row)
    assert starts > 0  # payload cells that would have been formulas were there, neutralized
    cmp = json.loads((comp / "comparison.json").read_text(encoding="utf-8"))
    assert any(MARK in json.dumps(r) for r in cmp["inputs"])
    # the PDFs: no file content, the payload text shown
    if (book / "fuzz.pdf").exists() and shutil.which("pdftotext"):
        for pdf in (book / "fuzz.pdf", comp / "compare-fuzz-vs-small.pdf"):
            text = subprocess.run(["pdftotext", str(pdf), "-"], capture_output=True, text=True).stdout
            assert CANARY_TEXT not in text and "root:x:0:0" not in text, pdf
            assert MARK in text, pdf
        first = subprocess.run(["pdftotext", "-l", "3", str(book / "fuzz.pdf"), "-"], capture_output=True,
                               text=True).stdout
        # the title page: the title as typed (TeX may break a long word at a hyphen)
        assert re.sub(r"[\s-]", "", first).startswith(re.sub(r"[\s-]", "", texts["title"]))


#: Shows every chart mark's tooltip (the pointer events Vega listens for, on each mark of each drawn
#: chart) and reports the elements the tooltips held and how many showed payload text.
HOVER_JS = """
() => {
  const tags = new Set(); let shown = 0; let marked = 0;
  const marks = document.querySelectorAll('.scaletax-chart svg g[class*="mark-"] > path');
  for (const el of marks) {
    const r = el.getBoundingClientRect();
    const at = {bubbles: true, cancelable: true, view: window, clientX: r.x + r.width / 2, clientY: r.y + r.height / 2};
    el.dispatchEvent(new PointerEvent('pointermove', at));
    el.dispatchEvent(new MouseEvent('mousemove', at));
    const tip = document.getElementById('vg-tooltip-element');
    if (!tip || !tip.classList.contains('visible')) continue;
    shown++;
    if (tip.textContent.includes('@MARK@')) marked++;
    tip.querySelectorAll('*').forEach((e) => tags.add(e.tagName.toLowerCase()));
  }
  return {shown, marked, tags: Array.from(tags)};
}
""".replace("@MARK@", MARK)
#: What a chart tooltip is made of (vega-tooltip: a heading and a table of keys and values).
TOOLTIP_TAGS = {"h2", "table", "tbody", "tr", "td"}


@pytest.mark.book
@pytest.mark.browser
def test_no_payload_script_runs_in_chromium(fuzz_book):
    """Every page of the fuzzed book and the comparison, opened from disk in Chromium with the
    network blocked, every chart drawn and every chart mark's tooltip shown: no dialog, no script
    error, no ``window.zqx..`` set by a payload, no request a payload made, and tooltips (which
    vega-tooltip writes as HTML) holding the payload text only as text."""
    from conftest import require_tools

    require_tools("chromium")
    from playwright.sync_api import sync_playwright

    from test_browser import ARGS, CHROMIUM

    pages = [p for p in _html_pages(fuzz_book["book"] / "html") + _html_pages(fuzz_book["compare"] / "html")
             if p.name not in ("search.html", "genindex.html")]
    tips = {"shown": 0, "marked": 0, "tags": set()}
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            for path in pages:
                page = browser.new_page()
                dialogs, requests, errors = [], [], []
                page.on("dialog", lambda d, dialogs=dialogs: (dialogs.append(d.message), d.dismiss()))
                page.on("pageerror", lambda e, errors=errors: errors.append(str(e)[:200]))

                def route(r, requests=requests):
                    url = r.request.url
                    if not url.startswith(("file:", "data:", "blob:")):
                        requests.append(url)
                        r.abort()
                    elif MARK in url:
                        requests.append(url)
                        r.abort()
                    else:
                        r.continue_()

                page.route("**/*", route)
                page.goto(path.resolve().as_uri(), wait_until="load")
                page.wait_for_function("() => Object.keys(window.__scaletaxViews || {}).length"
                                       " >= document.querySelectorAll('.scaletax-chart').length", timeout=60_000)
                page.wait_for_timeout(300)  # let handlers of broken images fire, if any were made
                got = page.evaluate(HOVER_JS)
                pwned = page.evaluate(f"() => Object.keys(window).filter(k => k.startsWith('{MARK}'))")
                page.close()
                assert dialogs == [] and pwned == [] and errors == [], (path.name, dialogs, pwned, errors)
                assert requests == [], (path.name, requests[:3])
                tips["shown"] += got["shown"]
                tips["marked"] += got["marked"]
                tips["tags"] |= set(got["tags"])
        finally:
            browser.close()
    assert tips["marked"] > 10 and tips["shown"] > tips["marked"]  # tooltips with the GPU label's payload were shown
    assert tips["tags"] <= TOOLTIP_TAGS, tips["tags"]
