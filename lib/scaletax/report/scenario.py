"""The scenario: the report's inputs, validated before anything runs.

A scenario is a YAML file (``data/scenarios/default.yaml``) plus ``--set dotted.key=value``
overrides. Every field is typed and bounded here, so that what reaches the notebooks is
plain, checked data (papermill injects parameters as code: nothing unvalidated may pass).
A bad input raises :class:`ScenarioError` with a one-line message naming the key.
"""
from __future__ import annotations

import difflib
import hashlib
import json
import math
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (AfterValidator, BaseModel, ConfigDict, Field, ValidationError, field_validator,
                      model_validator)

from scaletax import DATA_DIR

DEFAULT_SCENARIO = DATA_DIR / "scenarios" / "default.yaml"

PRECISIONS = ("bf16", "fp8", "mxfp8", "nvfp4", "mxfp4")
Slug = Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9_-]{0,63}$")]
def _plain_text(v: str) -> str:
    """Text reaches the book's pages verbatim: refuse what would change their markup."""
    for seq in ("```", ":::", "@@"):
        if seq in v:
            raise ValueError(f"text may not contain {seq!r} (it would change the book's markup)")
    return v


Text = Annotated[str, Field(min_length=1, max_length=2000), AfterValidator(_plain_text)]
PosFloat = Annotated[float, Field(gt=0, allow_inf_nan=False)]
Share = Annotated[float, Field(gt=0, le=1, allow_inf_nan=False)]


class ScenarioError(ValueError):
    """A scenario that cannot be used; the message is one line and names the key."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=False)


class Price(_Strict):
    """Rental price of one GPU-hour, with where it comes from."""

    usd_per_gpu_hour: PosFloat = Field(le=1000)
    source: Text
    assumption: bool


class Training(_Strict):
    tokens: PosFloat = Field(ge=1e6, le=1e16, description="token budget of one training run")
    global_batch_tokens: int = Field(ge=1024, le=2**30, description="tokens per optimizer step")
    precision: Literal[PRECISIONS] = Field(description="default training precision")  # type: ignore[valid-type]
    precisions: list[Literal[PRECISIONS]] = Field(min_length=1)  # type: ignore[valid-type]
    tokens_source: Text


class Cluster(_Strict):
    sizes: list[Annotated[int, Field(ge=8, le=1_000_000)]] = Field(min_length=1)
    gpus: int = Field(ge=8, le=1_000_000, description="cluster size for time to train")
    target_days: PosFloat = Field(le=3650)

    @field_validator("sizes")
    @classmethod
    def _sorted_unique(cls, v: list[int]) -> list[int]:
        if len(set(v)) != len(v):
            raise ValueError("cluster sizes must be unique")
        return sorted(v)


class Energy(_Strict):
    pue: float = Field(ge=1.0, le=3.0, allow_inf_nan=False)
    system_overhead: float = Field(ge=1.0, le=4.0, allow_inf_nan=False,
                                   description="all-in system power per GPU / GPU TDP")
    utilization: Share
    source: Text


class Economics(_Strict):
    prices: dict[str, Price] = Field(min_length=1)
    energy: Energy
    usd_per_mwh: PosFloat = Field(le=10_000)
    usd_per_mwh_source: Text


class Precision(_Strict):
    seed: int = Field(ge=0, le=2**31 - 1)
    experiment_seeds: int = Field(ge=1, le=16)
    experiment_steps: int = Field(ge=10, le=100_000)


class Scenario(_Strict):
    """The whole scenario; every chapter reads a declared subset of it."""

    name: Slug
    title: Text
    question: Text
    models: list[Slug] = Field(min_length=1)
    gpus: list[Slug] = Field(min_length=1)
    training: Training
    cluster: Cluster
    economics: Economics
    precision: Precision

    @field_validator("gpus")
    @classmethod
    def _known_gpus(cls, v: list[str]) -> list[str]:
        from scaletax import hardware

        return _known_ids(v, hardware.ids(), "GPU")

    @field_validator("models")
    @classmethod
    def _known_models(cls, v: list[str]) -> list[str]:
        from scaletax import models

        return _known_ids(v, models.ids(), "model")

    @model_validator(mode="after")
    def _prices_cover_gpus(self) -> "Scenario":
        from scaletax import hardware

        for g in self.economics.prices:
            if g not in hardware.ids():
                raise ValueError(f"economics.prices: unknown GPU id {g!r}; allowed: {', '.join(hardware.ids())}")
        missing = [g for g in self.gpus if g not in self.economics.prices]
        if missing:
            raise ValueError(f"economics.prices has no price for {', '.join(missing)}")
        if self.training.precision not in self.training.precisions:
            raise ValueError("training.precision must be one of training.precisions")
        return self

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


def _known_ids(ids: list[str], valid: list[str], kind: str) -> list[str]:
    """``ids`` if each is in ``valid`` and none repeats; else a one-line error."""
    for i in ids:
        if i not in valid:
            raise ValueError(f"unknown {kind} id {i!r}; allowed: {', '.join(valid)}")
    if len(set(ids)) != len(ids):
        raise ValueError(f"{kind} ids must be unique")
    return ids


def canonical_json(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


# --------------------------------------------------------------------------------------
# Loading and overrides
# --------------------------------------------------------------------------------------
def _fields_of(model: type[BaseModel] | None) -> list[str]:
    return list(model.model_fields) if model is not None else []


def _submodel(model: type[BaseModel], key: str) -> type[BaseModel] | None:
    ann = model.model_fields[key].annotation
    return ann if isinstance(ann, type) and issubclass(ann, BaseModel) else None


def _check_keys(data: Any, model: type[BaseModel], prefix: str = "") -> None:
    """Refuse unknown keys with the nearest valid one, before pydantic sees the data."""
    if not isinstance(data, dict):
        return
    for key, value in data.items():
        allowed = _fields_of(model)
        if key not in allowed:
            near = difflib.get_close_matches(str(key), allowed, n=1)
            hint = f"; did you mean '{prefix}{near[0]}'?" if near else ""
            raise ScenarioError(
                f"unknown key '{prefix}{key}'{hint} (allowed here: {', '.join(allowed)})"
            )
        sub = _submodel(model, key)
        if sub is not None:
            _check_keys(value, sub, f"{prefix}{key}.")


def _format_validation(exc: ValidationError) -> str:
    err = exc.errors()[0]
    loc = ".".join(str(p) for p in err["loc"])
    msg = err["msg"]
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, "):]
    got = err.get("input")
    got_txt = "" if isinstance(got, (dict, list)) or got is None else f" (got {got!r})"
    where = f"{loc}: " if loc else ""
    return f"{where}{msg}{got_txt}".replace("\n", " ")


def parse_override(text: str) -> tuple[str, Any]:
    """Split ``dotted.key=value``; the value is read as a YAML scalar or flow list."""
    if "=" not in text:
        raise ScenarioError(f"--set {text!r}: expected dotted.key=value")
    key, raw = text.split("=", 1)
    key = key.strip()
    if not key or any(not part for part in key.split(".")):
        raise ScenarioError(f"--set {text!r}: empty key")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw  # a plain string that is not YAML (e.g. holds ': ')
    if isinstance(value, float) and not math.isfinite(value):
        raise ScenarioError(f"{key}: must be a finite number (got {raw!r})")
    return key, value


def _child(schema: Any, part: str) -> Any:
    """Schema one level down: a model class, ("map", value schema) for dict fields, or None."""
    if isinstance(schema, tuple):  # inside a dict field: any key, the value schema below
        return schema[1]
    ann = schema.model_fields[part].annotation
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        return ann
    if getattr(ann, "__origin__", None) is dict:
        value = ann.__args__[1]
        return ("map", value if isinstance(value, type) and issubclass(value, BaseModel) else None)
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
            near = difflib.get_close_matches(part, allowed, n=1)
            hint = f"; did you mean '{prefix}{near[0]}'?" if near else ""
            raise ScenarioError(
                f"unknown key '{prefix}{part}'{hint} (allowed here: {', '.join(allowed)})"
            )
        if i == len(parts) - 1:
            is_text = not isinstance(schema, tuple) and schema.model_fields[part].annotation is str
            node[part] = raw if (is_text and raw is not None) else value
            return
        if not isinstance(node.get(part), dict):
            node[part] = {}
        node = node[part]
        schema = _child(schema, part)


def load_yaml(path: Path | str) -> dict:
    """Read a scenario YAML file into a dict, with one-line errors."""
    path = Path(path)
    if not path.exists():
        raise ScenarioError(f"scenario file not found: {path}")
    if path.is_dir():
        raise ScenarioError(f"scenario path is a folder, not a file: {path}")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ScenarioError(f"cannot read scenario file {path}: {exc}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or "invalid YAML"
        raise ScenarioError(f"{path.name}: malformed YAML{where}: {problem}") from None
    if not isinstance(data, dict) or "name" not in data:
        raise ScenarioError(
            f"{path.name}: not a scenario (expected a mapping with keys such as name, models, gpus)"
        )
    return data


def resolve(path: Path | str | None = None, overrides: list[str] | tuple[str, ...] = ()) -> Scenario:
    """Load, override and validate a scenario. Raises ScenarioError (one line)."""
    data = load_yaml(path or DEFAULT_SCENARIO)
    _check_keys(data, Scenario)
    for text in overrides:
        key, value = parse_override(text)
        apply_override(data, key, value, raw=text.split("=", 1)[1])
    try:
        return Scenario.model_validate(data)
    except ValidationError as exc:
        raise ScenarioError(_format_validation(exc)) from None


def build_name(scenario: Scenario, overrides: list[str] | tuple[str, ...], name: str | None) -> str:
    """The output folder name: given, or the scenario name (+ a hash of the overrides)."""
    if name:
        try:
            _SlugModel(name=name)
        except ValidationError:
            raise ScenarioError(
                f"--name {name!r}: use 1-64 lowercase letters, digits, '-' or '_'"
            ) from None
        return name
    if not overrides:
        return scenario.name
    digest = hashlib.sha256("\n".join(sorted(overrides)).encode()).hexdigest()[:8]
    return f"{scenario.name}-{digest}"


class _SlugModel(_Strict):
    name: Slug
