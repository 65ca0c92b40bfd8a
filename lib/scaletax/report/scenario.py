"""The scenario: the report's inputs, validated before anything runs.

A scenario is a YAML file (``data/scenarios/default.yaml``) plus ``--set dotted.key=value``
overrides. Every field is typed and bounded here, so that what reaches the notebooks is
plain, checked data (papermill injects parameters as code: nothing unvalidated may pass).
A bad input raises :class:`ScenarioError` with a one-line message naming the key.

Strictness lives in two places, once each: the YAML reader (:class:`_Loader`: YAML 1.2 core
scalars, so ``yes``/``0x4000``/``1_6384`` stay text; duplicate keys, anchors and aliases
refused; size, nesting and integer length bounded before anything is built) and the base
model :class:`_Strict` (pydantic strict mode: a boolean or a string is never a number).
Text is kept as typed; :mod:`scaletax.escape` makes it safe where it is printed.
"""
from __future__ import annotations

import difflib
import hashlib
import json
import math
import re
import unicodedata
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (AfterValidator, BaseModel, ConfigDict, Field, PrivateAttr, ValidationError,
                      field_validator, model_validator)

from scaletax import DATA_DIR
from scaletax.inputs import recipes
from scaletax.inputs.options import DISPATCHERS, EXPERT_GEMMS, SCHEDULES
from scaletax.files import InputFileError, read_bounded

DEFAULT_SCENARIO = DATA_DIR / "scenarios" / "default.yaml"

#: Precisions a scenario may train in: the recipe registry's training recipes.
PRECISIONS = recipes.TRAINING
#: A name or id: lowercase letters, digits, '-' and '_', to the end of the text (``\Z``: ``$``
#: would let a trailing newline through).
_SLUG = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}\Z")


def _slug(v: str) -> str:
    if not _SLUG.match(v):
        raise ValueError("use 1-64 lowercase letters, digits, '-' or '_'")
    return v


Slug = Annotated[str, AfterValidator(_slug)]
Id = Annotated[str, Field(min_length=1, max_length=64)]  # checked against the catalogs (with a hint)
#: Bounds on input read before parsing (the error states them).
MAX_SCENARIO_BYTES = 256 * 1024
MAX_DEPTH = 16           # nested mappings/lists in a scenario
MAX_NODES = 20_000       # scalars, mappings and lists in a scenario
MAX_INT_DIGITS = 30
MAX_OVERRIDE_CHARS = 16 * 1024


def _plain_text(v: str) -> str:
    """Text may hold any printable character (it is escaped where it is printed), but no
    control characters other than newline and tab."""
    for ch in v:
        if ch not in "\n\t" and unicodedata.category(ch) in ("Cc", "Cs"):
            raise ValueError(f"text may not contain the control character U+{ord(ch):04X}")
    return v


Text = Annotated[str, Field(min_length=1, max_length=2000), AfterValidator(_plain_text)]
PosFloat = Annotated[float, Field(gt=0, allow_inf_nan=False)]
Share = Annotated[float, Field(gt=0, le=1, allow_inf_nan=False)]


class ScenarioError(ValueError):
    """A scenario that cannot be used; the message is one line and names the key."""


class _Strict(BaseModel):
    """Base of every scenario section: unknown keys refused, immutable, and strict types
    (pydantic strict mode: ``true`` or ``"1e9"`` is not a number, ``1`` is not a boolean)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


#: Marks a value the user set (``--set`` or their scenario) without giving a source for it.
YOUR_INPUT = "your input"


class Price(_Strict):
    """Rental price of one GPU-hour, with where it comes from: a published source, an
    assumption (``assumption: true``) or the user's own figure (``your_input: true``)."""

    usd_per_gpu_hour: PosFloat = Field(le=1000)
    source: Text
    assumption: bool
    your_input: bool = False


class Software(_Strict):
    """The training software every layout of the search is timed with (``search.SearchSpace``), with
    its source: the MoE token dispatcher (Megatron-Core's ``moe_token_dispatcher_type``: "flex" or
    "deepep" deduplicate per NVLink domain, "alltoall" sends one copy per routed expert), the schedule
    (how much of the expert all-to-all hides: "1f1b" none, "ep_overlap" / "dualpipe" every paired one,
    "unknown" half) and how the routed experts run their GEMMs ("per_expert": one call per local expert,
    Transformer Engine's ``GroupedLinear``; "grouped": one kernel, e.g. Megatron-Bridge's fused grouped
    MLP in a full-iteration CUDA graph; "auto": the stack's, per_expert under Megatron-Core)."""

    moe_dispatcher: Literal[tuple(DISPATCHERS)] = "flex"  # type: ignore[valid-type]
    schedule: Literal[SCHEDULES] = "unknown"  # type: ignore[valid-type]
    expert_gemm: Literal[EXPERT_GEMMS] = "auto"  # type: ignore[valid-type]
    source: Text


class Training(_Strict):
    tokens: PosFloat = Field(ge=1e6, le=1e16, description="token budget of one training run")
    global_batch_tokens: int = Field(ge=1024, le=2**30, description="tokens per optimizer step")
    precision: Literal[PRECISIONS] = Field(description="default training precision")  # type: ignore[valid-type]
    precisions: list[Literal[PRECISIONS]] = Field(min_length=1)  # type: ignore[valid-type]
    tokens_source: Text
    software: Software


class Reliability(_Strict):
    """Inputs of the scale-dependent goodput model (:mod:`scaletax.model.goodput`): the published report
    whose interruption rate is used (``data/failures.csv``) or the planner's own rate, the restart
    time and the checkpoint storage bandwidth, each with its source."""

    failure_report: Id = Field(description="row of data/failures.csv whose interruption rates per GPU-hour are used")
    failures_per_gpu_hour: float | None = Field(default=None, gt=0, le=1e-2, allow_inf_nan=False,
                                                description="your unexpected interruptions per GPU-hour (replaces the report's)")
    failures_source: Text | None = None
    restart_minutes: PosFloat = Field(le=1440, description="from a failure to training again")
    restart_source: Text
    storage_tb_s: PosFloat = Field(le=1000, description="sustained checkpoint write bandwidth, TB/s")
    storage_source: Text

    @field_validator("failure_report")
    @classmethod
    def _known_report(cls, v: str) -> str:
        from scaletax.inputs import failures

        try:
            failures.get(v)
        except KeyError as exc:
            raise ValueError(str(exc).strip("'\"")) from None
        return v


class Cluster(_Strict):
    sizes: list[Annotated[int, Field(ge=8, le=1_000_000)]] = Field(min_length=1)
    gpus: int = Field(ge=8, le=1_000_000, description="cluster size for time to train")
    target_days: PosFloat = Field(le=3650)
    goodput: Share | None = Field(default=None, description="your share of scheduled time that trains; "
                                  "absent: the scale model of cluster.reliability")
    goodput_source: Text | None = None
    reliability: Reliability
    power_mw: PosFloat | None = Field(default=None, le=100_000, description="facility power budget, MW")
    power_mw_source: Text | None = None

    @field_validator("sizes")
    @classmethod
    def _sorted_unique(cls, v: list[int]) -> list[int]:
        if len(set(v)) != len(v):
            raise ValueError("cluster sizes must be unique")
        return sorted(v)


class Energy(_Strict):
    pue: float = Field(ge=1.0, le=3.0, allow_inf_nan=False)
    system_overhead: float | None = Field(default=None, ge=1.0, le=4.0, allow_inf_nan=False,
                                          description="your all-in system power per GPU / GPU TDP (replaces "
                                          "data/systems.csv for every GPU)")
    utilization: Share
    source: Text


class Capex(_Strict):
    """Price of one system (node or rack) bought outright, with where it comes from."""

    usd_per_system: PosFloat = Field(le=1e9)
    source: Text
    assumption: bool
    your_input: bool = False


class Ownership(_Strict):
    """Owning instead of renting (:mod:`scaletax.model.ownership`): system prices per GPU type,
    depreciation life, cost of capital, facility price per MW of IT power a year and the share of
    hours the owned cluster does paid work, each with its source."""

    capex: dict[str, Capex] = Field(default_factory=dict)
    depreciation_years: PosFloat = Field(le=30)
    depreciation_source: Text
    cost_of_capital: float = Field(ge=0, le=1, allow_inf_nan=False, description="yearly rate, e.g. 0.1")
    cost_of_capital_source: Text
    facility_usd_per_mw_year: float = Field(ge=0, le=1e8, allow_inf_nan=False,
                                            description="facility lease or cost per MW of IT power a year")
    facility_source: Text
    busy_share: Share = Field(description="share of the year the owned GPUs do paid work")
    busy_source: Text


class Economics(_Strict):
    prices: dict[str, Price] = Field(min_length=1)
    energy: Energy
    usd_per_mwh: float = Field(ge=0, le=10_000, allow_inf_nan=False,
                               description="electricity price; 0 when the GPU-hour price includes power")
    usd_per_mwh_source: Text
    price_includes_power: bool = Field(default=False, description="all-in rental prices: cost adds no energy")
    ownership: Ownership | None = None


class Fleet(_Strict):
    """A fleet as the news reports it: a name, the GPU type its count is in, the count, and
    whether the count is a claimed equivalence (``equivalent: true``: "~20,000 H-equivalents" is
    ``gpu: h100_sxm, count: 20000, equivalent: true``, priced and timed as that many H100s) and
    verified, with a source."""

    name: Annotated[str, Field(min_length=1, max_length=120), AfterValidator(_plain_text)]
    gpu: Id
    count: int = Field(ge=1, le=10_000_000)
    equivalent: bool = Field(default=False, description="the count is claimed as equal to that many GPUs of gpu")
    verified: bool = False
    source: Text


class Comparisons(_Strict):
    """The decision chapter's reference GPUs (catalog ids; in the scenario or not)."""

    baseline: Id = Field(description="GPU the advantage waterfall starts from")
    hopper_reference: Id = Field(description="reference Hopper of the break-even comparison when in the scenario")
    heq_hopper: list[Id] = Field(min_length=1, description="Hopper GPUs of the H-equivalents")
    heq_blackwell: list[Id] = Field(min_length=1, description="Blackwell GPUs whose H-equivalents are computed")
    price_pairs: list[Annotated[list[Id], Field(min_length=2, max_length=2)]] = Field(
        default_factory=list, max_length=10,
        description="[newer, older] GPU pairs whose cost per token ratio is drawn against their price ratio")
    source: Text

    @field_validator("price_pairs")
    @classmethod
    def _catalog_pairs(cls, v: list[list[str]]) -> list[list[str]]:
        from scaletax.inputs import hardware

        for pair in v:
            _known_ids(pair, list(hardware._data_catalog()), "GPU")
        if len({tuple(p) for p in v}) != len(v):
            raise ValueError("price pairs must be unique")
        return v

    @field_validator("heq_hopper", "heq_blackwell")
    @classmethod
    def _catalog_lists(cls, v: list[str]) -> list[str]:
        from scaletax.inputs import hardware

        return _known_ids(v, list(hardware._data_catalog()), "GPU")

    @field_validator("baseline", "hopper_reference")
    @classmethod
    def _catalog_id(cls, v: str) -> str:
        from scaletax.inputs import hardware

        return _known_ids([v], list(hardware._data_catalog()), "GPU")[0]


class Precision(_Strict):
    seed: int = Field(ge=0, le=2**31 - 1)
    experiment_seeds: int = Field(ge=1, le=16)
    experiment_steps: int = Field(ge=10, le=100_000)


class Scenario(_Strict):
    """The whole scenario; every chapter reads a declared subset of it."""

    name: Slug
    title: Text
    question: Text
    #: Catalog ids or inline definitions (``models.define`` / ``hardware.define``: the schema
    #: of data/models.yaml / data/hardware.csv, or ``base: <id>`` plus the fields that differ).
    models: list[Id | dict[str, Any]] = Field(min_length=1)
    gpus: list[Id | dict[str, Any]] = Field(min_length=1)
    training: Training
    cluster: Cluster
    economics: Economics
    comparisons: Comparisons
    precision: Precision
    fleets: list[Fleet] = Field(default_factory=list, max_length=50)

    _user_gpus: dict = PrivateAttr(default_factory=dict)
    _user_models: dict = PrivateAttr(default_factory=dict)

    @field_validator("gpus")
    @classmethod
    def _known_gpus(cls, v: list) -> list:
        from scaletax.inputs import hardware

        _known_ids(_entry_ids(v, "GPU"), list(hardware._data_catalog()), "GPU", inline=_inline_ids(v))
        for entry in v:
            if isinstance(entry, dict):
                _plain_entry(entry)
                hardware.define(entry)  # validates; raises HardwareError (a ValueError)
        return v

    @field_validator("models")
    @classmethod
    def _known_models(cls, v: list) -> list:
        from scaletax.inputs import models

        _known_ids(_entry_ids(v, "model"), list(models._data_catalog()), "model", inline=_inline_ids(v))
        for entry in v:
            if isinstance(entry, dict):
                _plain_entry(entry)
                models.define(entry)
        return v

    @model_validator(mode="after")
    def _prices_cover_gpus(self) -> "Scenario":
        from scaletax.inputs import hardware, models

        self._user_gpus = {e["id"]: hardware.define(e) for e in self.gpus if isinstance(e, dict)}
        self._user_models = {e["id"]: models.define(e) for e in self.models if isinstance(e, dict)}
        known = list(hardware._data_catalog()) + list(self._user_gpus)
        for g in self.economics.prices:
            if g not in known:
                raise ValueError(f"economics.prices: {hardware._unknown(g, known)}; allowed: {', '.join(known)}")
        missing = [g for g in self.gpu_ids if g not in self.economics.prices]
        if missing:
            raise ValueError(f"economics.prices has no price for {', '.join(missing)}")
        own = self.economics.ownership
        for g in (own.capex if own is not None else {}):
            if g not in known:
                raise ValueError(f"economics.ownership.capex: {hardware._unknown(g, known)}; allowed: {', '.join(known)}")
        for i, f in enumerate(self.fleets):
            if f.gpu not in known:
                raise ValueError(f"fleets.{i}.gpu: {hardware._unknown(f.gpu, known)}; allowed: {', '.join(known)}")
        if self.economics.energy.system_overhead is None:
            for gid, g in self._user_gpus.items():
                if g.system_w is None:
                    raise ValueError(f"gpus: {gid} has no system power: give non_gpu_w (W per GPU beyond its TDP), "
                                     "derive it with base: <catalog id>, or set economics.energy.system_overhead")
        if self.training.precision not in self.training.precisions:
            raise ValueError("training.precision must be one of training.precisions")
        return self

    @property
    def gpu_ids(self) -> list[str]:
        """The scenario's GPU ids (catalog and inline), in scenario order."""
        return [e["id"] if isinstance(e, dict) else e for e in self.gpus]

    @property
    def model_ids(self) -> list[str]:
        return [e["id"] if isinstance(e, dict) else e for e in self.models]

    def definitions(self) -> dict[str, dict[str, dict]]:
        """The resolved user-defined GPUs and models, JSON-ready: ``{"gpus": {id: fields},
        "models": {id: fields}}`` (empty sections when the scenario uses catalog ids only)."""
        return {"gpus": {k: g.model_dump(mode="json") for k, g in self._user_gpus.items()},
                "models": {k: m.model_dump(mode="json") for k, m in self._user_models.items()}}

    def register(self) -> None:
        """Make the user-defined GPUs and models visible to hardware.get / models.get here."""
        from scaletax.inputs import hardware, models

        hardware.unregister()
        models.unregister()
        hardware.register(self._user_gpus)
        models.register(self._user_models)

    def user_inputs(self) -> list[str]:
        """One line per value the user supplied (defined GPUs and models, sourceless values)."""
        out = [f"GPU {k}: {g.verification}" for k, g in self._user_gpus.items()]
        out += [f"model {k}: {m.source}" for k, m in self._user_models.items()]
        for g, p in self.economics.prices.items():
            if p.your_input:
                out.append(f"price of {g}: ${p.usd_per_gpu_hour:g} per GPU-hour ({p.source})")
        own = self.economics.ownership
        for g, c in (own.capex.items() if own is not None else ()):
            if c.your_input:
                out.append(f"system price of {g}: ${c.usd_per_system:,.0f} ({c.source})")
        plain = self.to_plain()
        for key in ("training.tokens_source", "training.software.source", "economics.energy.source",
                    *sorted(_SINGLE - {"training.tokens_source"})):
            value = _at(plain, key)
            if isinstance(value, str) and value.startswith(YOUR_INPUT):
                out.append(f"{key.rsplit('.', 1)[0]}: {value}")
        return out

    def to_plain(self) -> dict[str, Any]:
        """JSON-ready dict (the resolved scenario)."""
        return self.model_dump(mode="json")

    def content_hash(self) -> str:
        """sha256 of the resolved scenario (canonical JSON), hex."""
        return hashlib.sha256(canonical_json(self.to_plain()).encode()).hexdigest()

    def get(self, dotted: str) -> Any:
        """Value at a dotted key of the resolved scenario (plain data)."""
        node: Any = self.to_plain()
        for part in dotted.split("."):
            node = node[part]
        return node


def _plain_entry(entry: dict) -> None:
    """Text of an inline definition reaches the book's tables: the rules of scenario text."""
    for key, value in entry.items():
        if isinstance(value, str):
            if len(value) > 2000:
                raise ValueError(f"{entry.get('id')}.{key}: at most 2000 characters")
            _plain_text(value)


def _entry_ids(entries: list, kind: str) -> list[str]:
    out = []
    for e in entries:
        if isinstance(e, dict):
            if not isinstance(e.get("id"), str) or not _SLUG.match(e["id"]):
                raise ValueError(f"an inline {kind} needs an 'id' of lowercase letters, digits, '-' or '_' (got {e.get('id')!r})")
            out.append(e["id"])
        else:
            out.append(e)
    return out


def _inline_ids(entries: list) -> set[str]:
    return {e["id"] for e in entries if isinstance(e, dict)}


def _known_ids(ids: list[str], valid: list[str], kind: str, inline: set[str] = frozenset()) -> list[str]:
    """``ids`` if each is in ``valid`` (or defined inline) and none repeats; else a one-line error
    (with a case-insensitive or nearest-id hint)."""
    from scaletax.inputs import hardware

    for i in ids:
        if i in inline:
            if i in valid:
                raise ValueError(f"inline {kind} id {i!r} is a catalog id; give your {kind} another id "
                                 f"(or derive from it with base: {i})")
            continue
        if i not in valid:
            raise ValueError(f"{hardware._unknown(i, valid, f'{kind} id')}; allowed: {', '.join(valid)}")
    if len(set(ids)) != len(ids):
        raise ValueError(f"{kind} ids must be unique")
    return ids


def _nearest(word: str, valid: list[str], prefix: str = "") -> str:
    """"; did you mean 'x'?" for the closest valid word, or ""."""
    near = difflib.get_close_matches(str(word), list(valid), n=1)
    return f"; did you mean '{prefix}{near[0]}'?" if near else ""


def canonical_json(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


# --------------------------------------------------------------------------------------
# Loading and overrides
# --------------------------------------------------------------------------------------
def _fields_of(model: type[BaseModel] | None) -> list[str]:
    return list(model.model_fields) if model is not None else []


def _submodel(model: type[BaseModel], key: str) -> type[BaseModel] | None:
    ann = _unwrap(model.model_fields[key].annotation)
    return ann if isinstance(ann, type) and issubclass(ann, BaseModel) else None


def _unwrap(ann: Any) -> Any:
    """``X`` for an optional ``X | None``; the annotation itself otherwise."""
    args = [a for a in getattr(ann, "__args__", ()) if a is not type(None)]
    if getattr(ann, "__origin__", None) is None and len(args) == 1 and type(None) in ann.__args__:
        return args[0]
    return ann


def _check_keys(data: Any, schema: Any = None, prefix: str = "") -> None:
    """Refuse unknown keys with the nearest valid one, before pydantic sees the data;
    descends into sections and into the entries of map fields (e.g. each price)."""
    schema = Scenario if schema is None else schema
    if not isinstance(data, dict):
        return
    for key, value in data.items():
        if isinstance(schema, tuple):  # a map field: any key, entries of one schema
            if schema[1] is not None:
                _check_keys(value, schema[1], f"{prefix}{key}.")
            continue
        allowed = _fields_of(schema)
        if key not in allowed:
            raise ScenarioError(f"unknown key '{prefix}{key}'{_nearest(str(key), allowed, prefix)} "
                                f"(allowed here: {', '.join(allowed)})")
        sub = _child(schema, key)
        if isinstance(sub, tuple) and sub[0] == "list":
            for i, item in enumerate(value if isinstance(value, list) else []):
                _check_keys(item, sub[1], f"{prefix}{key}.{i}.")
        elif sub is not None:
            _check_keys(value, sub, f"{prefix}{key}.")


def _format_validation(exc: ValidationError) -> str:
    err = exc.errors()[0]
    loc = ".".join(str(p) for p in err["loc"])
    msg = err["msg"]
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, "):]
    got = err.get("input")
    got_txt = "" if isinstance(got, (dict, list)) or got is None else f" (got {_short(got)})"
    where = f"{loc}: " if loc else ""
    return f"{where}{msg}{got_txt}".replace("\n", " ")


def _short(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "...'"


def parse_override(text: str) -> tuple[str, Any]:
    """Split ``dotted.key=value``; the value is read as a YAML scalar or flow list (with the
    scenario file's strict reader)."""
    if len(text) > MAX_OVERRIDE_CHARS:
        raise ScenarioError(f"--set {text[:40]!r}...: longer than {MAX_OVERRIDE_CHARS} characters")
    if "=" not in text:
        raise ScenarioError(f"--set {_short(text)}: expected dotted.key=value")
    key, raw = text.split("=", 1)
    key = key.strip()
    if not key or any(not part for part in key.split(".")):
        raise ScenarioError(f"--set {_short(text)}: empty key")
    try:
        value = _parse_yaml(raw, f"--set {key}") if raw.strip() else ""
    except ScenarioError as exc:
        if "malformed YAML" not in str(exc):
            raise
        value = raw  # a plain string that is not YAML (e.g. holds ': ')
    if isinstance(value, float) and not math.isfinite(value):
        raise ScenarioError(f"{key}: must be a finite number (got {raw!r})")
    return key, value


def _child(schema: Any, part: str) -> Any:
    """Schema one level down: a model class, ("map", value schema) for dict fields, ("list",
    entry model) for lists of sections, or None."""
    if isinstance(schema, tuple):  # inside a dict field: any key, the value schema below
        return schema[1]
    ann = _unwrap(schema.model_fields[part].annotation)
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        return ann
    if getattr(ann, "__origin__", None) is dict:
        value = ann.__args__[1]
        return ("map", value if isinstance(value, type) and issubclass(value, BaseModel) else None)
    if getattr(ann, "__origin__", None) is list:
        entry = ann.__args__[0]
        if isinstance(entry, type) and issubclass(entry, BaseModel):
            return ("list", entry)
    return None


def apply_override(data: dict, key: str, value: Any, raw: str | None = None) -> None:
    """Set ``data[a][b][c] = value`` for key ``a.b.c``; unknown keys are refused.

    A text field gets ``raw`` (the characters after '=') as is, not its YAML reading.
    """
    parts = key.split(".")
    schema: Any = Scenario
    node = data
    for i, part in enumerate(parts):
        prefix = ".".join(parts[:i]) + "." if i else ""
        if schema is None:
            raise ScenarioError(f"{prefix.rstrip('.')}: is a value, not a section")
        if not isinstance(schema, tuple) and part not in schema.model_fields:
            allowed = _fields_of(schema)
            raise ScenarioError(f"unknown key '{prefix}{part}'{_nearest(part, allowed, prefix)} "
                                f"(allowed here: {', '.join(allowed)})")
        if i == len(parts) - 1:
            is_text = not isinstance(schema, tuple) and _unwrap(schema.model_fields[part].annotation) is str
            node[part] = raw if (is_text and raw is not None) else value
            return
        child = _child(schema, part)
        if isinstance(child, tuple) and child[0] == "list":
            raise ScenarioError(f"{prefix}{part}: a list; set it whole ({prefix}{part}=[{{...}}, ...])")
        if not isinstance(node.get(part), dict):
            node[part] = {}
        node = node[part]
        schema = child


_INT = "tag:yaml.org,2002:int"
_FLOAT = "tag:yaml.org,2002:float"
_BOOL = "tag:yaml.org,2002:bool"


class _Loader(yaml.SafeLoader):
    """PyYAML's safe loader with YAML 1.2 core-schema scalars and no duplicate keys.

    Booleans are only true/false; integers only decimal digits (no ``0x``, octal or ``_``);
    floats may omit the dot (``1e9``). Everything else is text, which the strict model then
    refuses where a number or a boolean is expected."""

    yaml_implicit_resolvers = {
        ch: [(tag, rx) for tag, rx in resolvers if tag not in (_INT, _FLOAT, _BOOL)]
        for ch, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
    }

    def construct_mapping(self, node, deep=False):
        seen: set = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            if not isinstance(key, str):
                raise ScenarioError(f"line {key_node.start_mark.line + 1}: keys must be text (got {key!r})")
            if key in seen:
                raise ScenarioError(f"duplicate key {key!r} at line {key_node.start_mark.line + 1}")
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _construct_int(loader: _Loader, node) -> int:
    digits = loader.construct_scalar(node)
    if len(digits.lstrip("+-")) > MAX_INT_DIGITS:
        raise ScenarioError(f"line {node.start_mark.line + 1}: integer longer than {MAX_INT_DIGITS} digits")
    return int(digits, 10)


def _construct_float(loader: _Loader, node) -> float:
    text = loader.construct_scalar(node).lower()
    if text.lstrip("+-") in (".inf", ".nan"):
        return float(text.replace(".", ""))
    return float(text)


_Loader.add_implicit_resolver(_BOOL, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF"))
_Loader.add_implicit_resolver(_INT, re.compile(r"^[-+]?[0-9]+$"), list("-+0123456789"))
_Loader.add_implicit_resolver(
    _FLOAT, re.compile(r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
                       r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"), list("-+0123456789."))
_Loader.add_constructor(_INT, _construct_int)
_Loader.add_constructor(_FLOAT, _construct_float)


def _parse_yaml(text: str, where: str) -> Any:
    """YAML text -> plain data, bounded: nesting depth and node count are checked on the
    event stream before any object is built; anchors and aliases are refused."""
    depth = nodes = 0
    try:
        for event in yaml.parse(text, Loader=_Loader):
            if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
                raise ScenarioError(f"{where}: anchors and aliases (&, *) are not allowed "
                                    f"(line {event.start_mark.line + 1})")
            if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
                depth += 1
                if depth > MAX_DEPTH:
                    raise ScenarioError(f"{where}: nested deeper than {MAX_DEPTH} levels "
                                        f"(line {event.start_mark.line + 1})")
            elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
                depth -= 1
            if isinstance(event, (yaml.ScalarEvent, yaml.MappingStartEvent, yaml.SequenceStartEvent)):
                nodes += 1
                if nodes > MAX_NODES:
                    raise ScenarioError(f"{where}: more than {MAX_NODES} values")
        return yaml.load(text, Loader=_Loader)  # noqa: S506 (a SafeLoader subclass)
    except ScenarioError as exc:
        msg = str(exc)
        raise ScenarioError(msg if msg.startswith(where) else f"{where}: {msg}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or "invalid YAML"
        raise ScenarioError(f"{where}: malformed YAML{at}: {problem}") from None
    except (ValueError, RecursionError) as exc:
        raise ScenarioError(f"{where}: unreadable value: {str(exc).splitlines()[0][:200]}") from None


def _is_text_key(key: str) -> bool:
    """Whether dotted ``key`` names a text field of the schema (False when it names none)."""
    schema: Any = Scenario
    parts = key.split(".")
    for i, part in enumerate(parts):
        if schema is None or (not isinstance(schema, tuple) and part not in schema.model_fields):
            return False
        if i == len(parts) - 1:
            return not isinstance(schema, tuple) and _unwrap(schema.model_fields[part].annotation) is str
        schema = _child(schema, part)
        if isinstance(schema, tuple) and schema[0] == "list":
            return False
    return False


def load_yaml(path: Path | str) -> dict:
    """Read a scenario YAML file into a dict, with one-line errors."""
    path = Path(path)
    try:
        data = read_bounded(path, MAX_SCENARIO_BYTES, "scenario file")
    except InputFileError as exc:
        raise ScenarioError(str(exc)) from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ScenarioError(f"cannot read scenario file {path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    data = _parse_yaml(text, path.name)
    if not isinstance(data, dict) or "name" not in data:
        raise ScenarioError(
            f"{path.name}: not a scenario (expected a mapping with keys such as name, models, gpus)"
        )
    return data


#: Value key -> the key of the source text that vouches for it (prices: per GPU, below).
SOURCED = {"training.tokens": "training.tokens_source",
           "economics.usd_per_mwh": "economics.usd_per_mwh_source",
           "economics.price_includes_power": "economics.usd_per_mwh_source",
           "cluster.goodput": "cluster.goodput_source",
           "cluster.power_mw": "cluster.power_mw_source",
           "cluster.reliability.failures_per_gpu_hour": "cluster.reliability.failures_source",
           "cluster.reliability.restart_minutes": "cluster.reliability.restart_source",
           "cluster.reliability.storage_tb_s": "cluster.reliability.storage_source",
           "economics.energy.pue": "economics.energy.source",
           "economics.energy.system_overhead": "economics.energy.source",
           "economics.energy.utilization": "economics.energy.source",
           "economics.ownership.depreciation_years": "economics.ownership.depreciation_source",
           "economics.ownership.cost_of_capital": "economics.ownership.cost_of_capital_source",
           "economics.ownership.facility_usd_per_mw_year": "economics.ownership.facility_source",
           "economics.ownership.busy_share": "economics.ownership.busy_source",
           "training.software.moe_dispatcher": "training.software.source",
           "training.software.schedule": "training.software.source",
           "training.software.expert_gemm": "training.software.source"}
#: Sources that cover one value only: a new value drops the old text (energy.source covers several).
_SINGLE = {"training.tokens_source", "economics.usd_per_mwh_source", "cluster.goodput_source",
           "cluster.power_mw_source", "cluster.reliability.failures_source", "cluster.reliability.restart_source",
           "cluster.reliability.storage_source", "economics.ownership.depreciation_source",
           "economics.ownership.cost_of_capital_source", "economics.ownership.facility_source",
           "economics.ownership.busy_source"}
#: Entries with a value, a source and ``assumption`` / ``your_input`` flags, per GPU: (section, value key).
_PER_GPU = (("economics.prices", "usd_per_gpu_hour"), ("economics.ownership.capex", "usd_per_system"))
_MISSING = object()


def _at(data: Any, dotted: str) -> Any:
    node = data
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return _MISSING
        node = node[part]
    return node


def _put(data: dict, dotted: str, value: Any) -> None:
    *head, last = dotted.split(".")
    node = data
    for part in head:
        node = node.setdefault(part, {})
    node[last] = value


def _sourced_pairs(data: dict) -> list[tuple[str, str]]:
    pairs = list(SOURCED.items())
    for section, key in _PER_GPU:
        entries = _at(data, section)
        if isinstance(entries, dict):
            pairs += [(f"{section}.{g}.{key}", f"{section}.{g}.source") for g in entries]
    return pairs


def _per_gpu_source(skey: str) -> bool:
    return any(skey.startswith(section + ".") for section, _ in _PER_GPU)


def _same(a: Any, b: Any) -> bool:
    """Equal values, reading numbers written as text ("15e12") as numbers."""
    def num(x):
        if isinstance(x, str):
            try:
                return float(x)
            except ValueError:
                return x
        return x
    return num(a) == num(b)


def _shown(value: Any) -> str:
    """A value as a user would type it: ``2e13``, not ``20000000000000.0``."""
    if isinstance(value, float) and math.isfinite(value):
        plain = f"{value:.15g}"
        for digits in range(17):  # the shortest exponent form that reads back the same
            sci = f"{value:.{digits}e}"
            if float(sci) == value:
                break
        mant, exp = sci.split("e")
        sci = f"{mant}e{int(exp)}"
        return sci if len(sci) < len(plain) else plain
    return str(value)


def relabel_sources(data: dict, reference: dict, how: str) -> None:
    """Label values the user changed as "your input" unless they gave a new source with them.

    A value that differs from ``reference`` (the scenario it was changed from) while its source
    text is still the reference's (or missing) gets the source ``your input (<how>: key=value)``;
    a price also gets ``your_input: true, assumption: false``. Sources covering several values
    (the energy factors) keep the old text for the values that did not change.
    """
    changed: dict[str, list[str]] = {}
    for vkey, skey in _sourced_pairs(data):
        value = _at(data, vkey)
        if value is _MISSING or _same(value, _at(reference, vkey)):
            continue
        src = _at(data, skey)
        if src is _MISSING or src == _at(reference, skey):
            changed.setdefault(skey, []).append(f"{vkey}={_shown(value)}")
    for skey, what in changed.items():
        label = f"{YOUR_INPUT} ({how} {', '.join(what)})"
        old = _at(data, skey)
        if skey not in _SINGLE and not _per_gpu_source(skey) and isinstance(old, str):
            label += f"; other values: {old}"
        _put(data, skey, label)
        if _per_gpu_source(skey):
            _put(data, skey.rsplit(".", 1)[0] + ".your_input", True)
            _put(data, skey.rsplit(".", 1)[0] + ".assumption", False)


#: Sections added to the schema after scenario files were in use: a scenario file without one
#: takes the default scenario's (with its sources), so an older file keeps working.
ADDED_LATER = ("cluster.reliability", "cluster.power_mw", "cluster.power_mw_source", "economics.ownership", "fleets",
               "comparisons.price_pairs", "training.software")


def resolve(path: Path | str | None = None, overrides: list[str] | tuple[str, ...] = ()) -> Scenario:
    """Load, override and validate a scenario. Raises ScenarioError (one line).

    Values changed by ``--set`` (or, in a scenario file other than the default, changed from the
    default) without a new source are labelled as the user's (:func:`relabel_sources`); the
    sections of :data:`ADDED_LATER` a scenario file lacks are the default scenario's.
    """
    import copy

    path = Path(path or DEFAULT_SCENARIO)
    data = load_yaml(path)
    _check_keys(data)
    if path.resolve() != DEFAULT_SCENARIO.resolve():
        default = load_yaml(DEFAULT_SCENARIO)
        for key in ADDED_LATER:  # a scenario written before these existed gets the default's, sources and all
            parent = _at(data, key.rsplit(".", 1)[0]) if "." in key else data
            if isinstance(parent, dict) and _at(data, key) is _MISSING and _at(default, key) is not _MISSING:
                _put(data, key, copy.deepcopy(_at(default, key)))
        relabel_sources(data, default, f"in {path.name}:")
    reference = copy.deepcopy(data)
    for text in overrides:
        if "=" in text and _is_text_key(text.split("=", 1)[0].strip()):
            key, raw = text.split("=", 1)
            apply_override(data, key.strip(), raw, raw=raw)  # text is taken as typed, never parsed
            continue
        key, value = parse_override(text)
        apply_override(data, key, value, raw=text.split("=", 1)[1])
    _check_keys(data)  # again: an override may set a whole section
    relabel_sources(data, reference, "--set")
    try:
        return Scenario.model_validate(data)
    except ValidationError as exc:
        raise ScenarioError(_format_validation(exc)) from None
    except RecursionError:
        raise ScenarioError("scenario nested too deeply") from None


#: Readable part of an automatic name: at most this many characters of the scenario name.
NAME_PREFIX_CHARS = 48


def build_name(scenario: Scenario, overrides: list[str] | tuple[str, ...], name: str | None) -> str:
    """The output folder name: ``name`` if given (checked), else derived from the resolved
    scenario: the scenario name alone for the shipped default scenario, otherwise the name
    plus 12 hex digits of :meth:`Scenario.content_hash`. Equal resolved scenarios share a
    name, different ones never do (whatever order or form the overrides took)."""
    if name is not None:
        try:
            _SlugModel(name=name)
        except ValidationError:
            raise ScenarioError(
                f"--name {_short(name)}: use 1-64 lowercase letters, digits, '-' or '_'"
            ) from None
        return name
    digest = scenario.content_hash()
    if digest == _default_hash():
        return scenario.name
    return f"{scenario.name[:NAME_PREFIX_CHARS]}-{digest[:12]}"


def _default_hash() -> str:
    """Content hash of the shipped default scenario (the one book called by its bare name)."""
    return resolve(DEFAULT_SCENARIO).content_hash()


class _SlugModel(_Strict):
    name: Slug
