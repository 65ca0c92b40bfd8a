"""Extract NVIDIA's Megatron-Bridge performance-benchmark recipes into data/bridge_recipes.csv.

Megatron-Bridge (PyPI ``megatron-bridge``) ships the exact configurations behind its performance
summary (``docs/performance-summary*.md``) as Python functions,
``megatron/bridge/perf_recipes/<family>/<gpu>/*.py``, each building a ``ConfigContainer`` from a base
recipe (``megatron/bridge/recipes/``) and the helpers of ``perf_recipes/_common.py``. This script
reads them WITHOUT importing Megatron: it parses every file with ``ast`` and interprets each
pre-training recipe function symbolically (attribute assignments, calls into other recipe
functions and helpers, keyword constructors such as ``CommOverlapConfig(...)``, simple ``if``
tests), then writes one CSV row per recipe: layout (an explicit pipeline layout in Megatron-Core's string
form), batch, sequence, recompute, MoE dispatcher,
overlap, CUDA graphs, forced load balancing, FSDP, the recipe's function and file, and the
version. A value a recipe chain never sets is left blank (the Megatron-Core / model-bridge default
applies); a value the interpreter could not evaluate (an ``if`` on an unknown, a computed value)
is listed in the ``unresolved`` column instead of guessed. There is no throughput in the recipes.

Regenerate (stdlib only; the book never needs the wheel):

    pip download --no-deps --python-version 3.12 --only-binary=:all: megatron-bridge==0.6.2 -d /tmp/mb
    cd /tmp/mb && mkdir -p bridge && unzip -q -o megatron_bridge-0.6.2-*.whl -d bridge
    python data/sources/bridge_recipes.py /tmp/mb/bridge > data/bridge_recipes.csv
"""
from __future__ import annotations

import ast
import csv
import re
import sys
from pathlib import Path

PACKAGE = "megatron.bridge"


class Unknown:
    """A value the interpreter cannot evaluate (``why`` says where)."""

    def __init__(self, why: str):
        self.why = why

    def __repr__(self) -> str:
        return f"Unknown({self.why})"


class Obj:
    """A configuration object: named fields (``kind`` is the constructor or factory)."""

    def __init__(self, kind: str = "", fields: dict | None = None):
        self.kind = kind
        self.fields = dict(fields or {})

    def copy(self) -> "Obj":
        return Obj(self.kind, {k: (v.copy() if isinstance(v, Obj) else v) for k, v in self.fields.items()})


class Interpreter:
    """Symbolic interpreter of the recipe functions of one unpacked wheel (``root``)."""

    def __init__(self, root: Path):
        self.root = root
        self.modules: dict[str, ast.Module] = {}
        self.unresolved: list[str] = []
        self.depth = 0

    # ---- modules and names ----------------------------------------------------------------
    def module(self, name: str) -> ast.Module | None:
        if name not in self.modules:
            rel = Path(*name.split("."))
            for p in (self.root / rel.with_suffix(".py"), self.root / rel / "__init__.py"):
                if p.is_file():
                    self.modules[name] = ast.parse(p.read_text(encoding="utf-8"), filename=str(p))
                    break
            else:
                self.modules[name] = None  # type: ignore[assignment]
        return self.modules[name]

    def lookup(self, modname: str, name: str, seen: int = 0):
        """(module, definition node) of ``name`` in ``modname`` following imports and aliases."""
        mod = self.module(modname)
        if mod is None or seen > 20:
            return None
        for node in mod.body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name == name:
                return modname, node
        for node in mod.body:
            if isinstance(node, ast.ImportFrom) and node.module:
                for a in node.names:
                    if (a.asname or a.name) == name:
                        src = node.module
                        if node.level:
                            base = modname.split(".")[: -node.level]
                            src = ".".join(base + [node.module])
                        if not src.startswith(PACKAGE):
                            return None
                        return self.lookup(src, a.name, seen + 1)
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) \
                    and node.targets[0].id == name:
                return modname, node
            if isinstance(node, ast.AnnAssign) and node.value is not None and isinstance(node.target, ast.Name) \
                    and node.target.id == name:
                return modname, node
        return None

    # ---- functions ------------------------------------------------------------------------
    def call_function(self, modname: str, fn: ast.FunctionDef, args: list, kwargs: dict):
        if self.depth > 40:
            return Unknown(f"recursion in {fn.name}")
        env: dict = {}
        params = fn.args.posonlyargs + fn.args.args
        defaults = [None] * (len(params) - len(fn.args.defaults)) + list(fn.args.defaults)
        for i, p in enumerate(params):
            if i < len(args):
                env[p.arg] = args[i]
            elif p.arg in kwargs:
                env[p.arg] = kwargs[p.arg]
            elif defaults[i] is not None:
                env[p.arg] = self.eval(defaults[i], {}, modname)
        for p, d in zip(fn.args.kwonlyargs, fn.args.kw_defaults):
            env[p.arg] = kwargs.get(p.arg, self.eval(d, {}, modname) if d is not None else None)
        self.depth += 1
        try:
            return self.run_block(fn.body, env, modname, fn.name)
        finally:
            self.depth -= 1

    def run_block(self, body: list, env: dict, modname: str, where: str):
        """Run statements; returns the ``return`` value (``_NoReturn`` if none was reached)."""
        for st in body:
            if isinstance(st, ast.Return):
                return self.eval(st.value, env, modname) if st.value is not None else None
            if isinstance(st, (ast.Assign, ast.AnnAssign)):
                if st.value is None:
                    continue
                value = self.eval(st.value, env, modname)
                for t in (st.targets if isinstance(st, ast.Assign) else [st.target]):
                    self.assign(t, value, env, modname)
            elif isinstance(st, ast.AugAssign):
                self.assign(st.target, Unknown(f"{where}:{st.lineno} augmented assignment"), env, modname)
            elif isinstance(st, ast.Expr):
                if isinstance(st.value, ast.Call):
                    self.eval(st.value, env, modname)
            elif isinstance(st, ast.If):
                test = self.eval(st.test, env, modname)
                if isinstance(test, Unknown):
                    touched = _touches(st)
                    if touched:
                        self.unresolved.append(f"{where}:{st.lineno} if ({test.why}) may set {', '.join(touched)}")
                    continue
                r = self.run_block(st.body if test else st.orelse, env, modname, where)
                if r is not _NoReturn:
                    return r
            elif isinstance(st, (ast.For, ast.While, ast.With, ast.Try)):
                touched = _touches(st)
                if touched:
                    self.unresolved.append(f"{where}:{st.lineno} {type(st).__name__.lower()} not run, may set "
                                           f"{', '.join(touched)}")
        return _NoReturn

    def assign(self, target, value, env: dict, modname: str) -> None:
        if isinstance(target, ast.Name):
            env[target.id] = value
        elif isinstance(target, ast.Attribute):
            base = self.eval(target.value, env, modname)
            if isinstance(base, Obj):
                base.fields[target.attr] = value
        elif isinstance(target, (ast.Tuple, ast.List)):
            for i, t in enumerate(target.elts):
                v = value[i] if isinstance(value, (tuple, list)) and i < len(value) else Unknown("unpacking")
                self.assign(t, v, env, modname)

    # ---- expressions ----------------------------------------------------------------------
    def eval(self, node, env: dict, modname: str):
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, (ast.List, ast.Tuple)):
            return [self.eval(e, env, modname) for e in node.elts]
        if isinstance(node, ast.Dict):  # a literal table (the layout maps keyed by (pp, vp))
            if any(k is None for k in node.keys):
                return Unknown("dict")
            keys = [_key(self.eval(k, env, modname)) for k in node.keys]
            if any(isinstance(k, Unknown) for k in keys):
                return Unknown("dict")
            return dict(zip(keys, (self.eval(v, env, modname) for v in node.values)))
        if isinstance(node, ast.Subscript):
            base, key = self.eval(node.value, env, modname), _key(self.eval(node.slice, env, modname))
            try:
                return base[key] if isinstance(base, (dict, list)) and not isinstance(key, Unknown) else \
                    Unknown("subscript")
            except (KeyError, IndexError, TypeError):
                return Unknown("subscript")
        if isinstance(node, ast.ListComp) and len(node.generators) == 1 and not node.generators[0].ifs \
                and isinstance(node.generators[0].target, ast.Name) and isinstance(node.generators[0].iter, ast.Name):
            gen = node.generators[0]
            items = self.eval(gen.iter, env, modname)
            if not isinstance(items, list):
                return Unknown("comprehension")
            return [self.eval(node.elt, {**env, gen.target.id: x}, modname) for x in items]
        if isinstance(node, ast.Name):
            if node.id in env:
                return env[node.id]
            if node.id in ("True", "False", "None"):
                return {"True": True, "False": False, "None": None}[node.id]
            hit = self.lookup(modname, node.id)
            if hit and isinstance(hit[1], (ast.Assign, ast.AnnAssign)):
                return self.eval(hit[1].value, {}, hit[0])
            return Unknown(f"name {node.id}")
        if isinstance(node, ast.Attribute):
            base = self.eval(node.value, env, modname)
            if isinstance(base, Obj):
                if node.attr not in base.fields:
                    return Unknown(f"unset {node.attr}")
                return base.fields[node.attr]
            return Unknown(f"attribute {node.attr}")
        if isinstance(node, ast.Call):
            return self.call(node, env, modname)
        if isinstance(node, ast.Compare) and len(node.ops) == 1:
            a, b = self.eval(node.left, env, modname), self.eval(node.comparators[0], env, modname)
            if isinstance(a, Unknown) or isinstance(b, Unknown):
                return Unknown("comparison with an unknown")
            op = node.ops[0]
            try:
                if isinstance(op, ast.Eq):
                    return a == b
                if isinstance(op, ast.NotEq):
                    return a != b
                if isinstance(op, ast.Is):
                    return a is b
                if isinstance(op, ast.IsNot):
                    return a is not b
                if isinstance(op, ast.In):
                    return _key(a) in b
                if isinstance(op, ast.NotIn):
                    return _key(a) not in b
            except TypeError:
                return Unknown("comparison")
            return Unknown("comparison")
        if isinstance(node, ast.BoolOp):  # short-circuit: a known False (and) / True (or) decides
            decisive = not isinstance(node.op, ast.And)
            unknown = None
            for v in node.values:
                x = self.eval(v, env, modname)
                if isinstance(x, Unknown):
                    unknown = unknown or x
                elif bool(x) == decisive:
                    return x
            return Unknown("boolean with an unknown") if unknown else (not decisive)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            v = self.eval(node.operand, env, modname)
            return v if isinstance(v, Unknown) else (not v)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            v = self.eval(node.operand, env, modname)
            return v if isinstance(v, Unknown) else -v
        if isinstance(node, ast.IfExp):
            t = self.eval(node.test, env, modname)
            if isinstance(t, Unknown):
                return t
            return self.eval(node.body if t else node.orelse, env, modname)
        if isinstance(node, ast.BinOp):
            a, b = self.eval(node.left, env, modname), self.eval(node.right, env, modname)
            if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
                ops = {ast.Add: lambda: a + b, ast.Sub: lambda: a - b, ast.Mult: lambda: a * b,
                       ast.FloorDiv: lambda: a // b}
                f = ops.get(type(node.op))
                if f:
                    return f()
            if isinstance(a, list) and isinstance(node.op, (ast.Add, ast.Mult)):  # list arithmetic of the layouts
                if isinstance(node.op, ast.Add) and isinstance(b, list):
                    return a + b
                if isinstance(node.op, ast.Mult) and isinstance(b, int) and not isinstance(b, bool):
                    return a * b
            return Unknown("arithmetic")
        return Unknown(type(node).__name__)

    def call(self, node: ast.Call, env: dict, modname: str):
        args = [self.eval(a, env, modname) for a in node.args if not isinstance(a, ast.Starred)]
        kwargs = {k.arg: self.eval(k.value, env, modname) for k in node.keywords if k.arg}
        f = node.func
        if isinstance(f, ast.Name):
            if f.id == "getattr" and len(args) >= 2:
                if isinstance(args[0], Obj):
                    return args[0].fields.get(args[1], args[2] if len(args) > 2 else Unknown("getattr"))
                return Unknown("getattr")
            if f.id == "hasattr" and len(args) == 2:
                return args[1] in args[0].fields if isinstance(args[0], Obj) else Unknown("hasattr")
            if f.id == "isinstance":
                if isinstance(args[0], Obj):
                    return False  # only ``isinstance(cfg.mixed_precision, str)``-style tests occur
                if isinstance(args[0], str):
                    return True
                return Unknown("isinstance")
            if f.id in ("list", "tuple") and args and isinstance(args[0], list):
                return list(args[0])
            hit = self.lookup(modname, f.id)
            if hit and isinstance(hit[1], ast.FunctionDef):
                res = self.call_function(hit[0], hit[1], args, kwargs)
                if hit[0].endswith("training.mixed_precision"):  # a precision factory: its name is the recipe
                    res = res if isinstance(res, Obj) else Obj()
                    res.kind = f"precision:{hit[1].name}"
                return res
            if hit and isinstance(hit[1], ast.ClassDef) or (not hit and f.id[:1].isupper()):
                return Obj(f.id, kwargs)
            return Unknown(f"call {f.id}")
        if isinstance(f, ast.Attribute):
            if f.attr == "from_hf_pretrained" and args and isinstance(args[0], str):
                return Obj("provider", {"hf_model": args[0]})
            base = self.eval(f.value, env, modname)
            if f.attr == "to_megatron_provider" and isinstance(base, Obj):
                return base
            if f.attr == "copy" and isinstance(base, Obj):
                return base.copy()
            return Unknown(f"method {f.attr}")
        return Unknown("call")


def _key(v):
    """A value as a dict key: lists (the interpreter's tuples) become tuples."""
    return tuple(_key(x) for x in v) if isinstance(v, list) else v


def _touches(stmt) -> list[str]:
    """Extracted fields (``FIELDS``) that ``stmt`` assigns directly, and "return" if it returns."""
    hit = []
    for n in ast.walk(stmt):
        if isinstance(n, (ast.Assign, ast.AnnAssign)):
            for t in (n.targets if isinstance(n, ast.Assign) else [n.target]):
                if isinstance(t, ast.Attribute) and t.attr in FIELDS:
                    hit.append(t.attr)
        elif isinstance(n, ast.Return):
            hit.append("return")
    return list(dict.fromkeys(hit))


class _NoReturnType:
    pass


_NoReturn = _NoReturnType()

#: Output columns (data/sources/README.md documents each).
COLUMNS = ("recipe", "kind", "family", "model", "hf_model", "gpu", "gpu_count", "precision", "tp", "pp", "cp", "vp", "ep",
           "etp", "dp", "sequence_parallel", "mbs", "gbs", "seq_len", "recompute_granularity", "recompute_method",
           "recompute_num_layers", "recompute_modules", "moe_token_dispatcher_type", "moe_flex_dispatcher_backend",
           "overlap_moe_expert_parallel_comm", "delay_wgrad_compute", "tp_comm_overlap", "cuda_graph_impl",
           "cuda_graph_scope", "moe_router_force_load_balancing", "moe_expert_rank_capacity_factor",
           "use_megatron_fsdp", "data_parallel_sharding_strategy", "fp8_param_gather", "cpu_offloading",
           "cpu_offloading_num_layers", "fine_grained_activation_offloading", "offload_modules", "pipeline_model_parallel_layout", "file", "megatron_bridge_version", "unresolved")
#: ``_perf_precision`` arguments and mixed-precision factories -> the runs-table precision.
#: Configuration fields the CSV reports (an unevaluated branch that sets one is listed in ``unresolved``).
FIELDS = frozenset({
    "tensor_model_parallel_size", "pipeline_model_parallel_size", "context_parallel_size",
    "virtual_pipeline_model_parallel_size", "expert_model_parallel_size", "expert_tensor_parallel_size",
    "sequence_parallel", "micro_batch_size", "global_batch_size", "seq_length", "recompute_granularity",
    "recompute_method", "recompute_num_layers", "recompute_modules", "moe_token_dispatcher_type",
    "moe_flex_dispatcher_backend", "overlap_moe_expert_parallel_comm", "delay_wgrad_compute", "tp_comm_overlap",
    "cuda_graph_impl", "cuda_graph_scope", "moe_router_force_load_balancing", "moe_expert_rank_capacity_factor",
    "use_megatron_fsdp", "data_parallel_sharding_strategy", "fp8_param_gather", "cpu_offloading", "cpu_offloading_num_layers",
    "fine_grained_activation_offloading", "offload_modules", "pipeline_model_parallel_layout", "mixed_precision", "comm_overlap"})
PRECISIONS = {"bf16": "bf16", "fp8_cs": "fp8", "fp8_mx": "mxfp8", "nvfp4": "nvfp4",
              "bf16_mixed": "bf16", "bf16_with_fp8_current_scaling_mixed": "fp8", "bf16_with_mxfp8_mixed": "mxfp8",
              "bf16_with_nvfp4_mixed": "nvfp4"}
NAME = re.compile(r"^(?P<model>.+?)_pretrain_(?P<gpus>\d+)gpu_(?P<gpu>[a-z0-9]+)_(?P<prec>[a-z0-9]+)(?P<tag>_.*)?_config$")


def _cell(v) -> str:
    if isinstance(v, Unknown):
        return "?"
    if isinstance(v, Obj):
        return v.kind
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, list):  # "[]": an explicitly empty list (e.g. selective recompute of no module)
        return ";".join(_cell(x) for x in v) if v else "[]"
    return str(v)


#: Megatron-Core's layer names of a list-form layout and their characters in the string form
#: (megatron-core 0.19.2 pipeline_parallel_layer_layout.py:303-308).
LAYER_CHARS = {"embedding": "E", "decoder": "t", "mtp": "m", "loss": "L"}


def _layout_cell(v) -> str:
    """An explicit pipeline layout in Megatron-Core's string form (a list-of-lists layout written as
    one: "Et*8|(t*8|)*6t*5mL"); "?" if not evaluated, blank if none."""
    if v is None:
        return ""
    if isinstance(v, str):
        return v
    if not (isinstance(v, list) and v and all(isinstance(st, list) and all(x in LAYER_CHARS for x in st) for st in v)):
        return "?"  # not evaluated (or built by a loop the interpreter does not run)
    return layout_text(["".join(LAYER_CHARS[x] for x in st) for st in v])


def layout_text(stages: list[str]) -> str:
    """Stages (strings of layer characters) in Megatron-Core's string form, compressed as its grammar
    allows: a run of one character as ``c*n``, a run of equal stages as ``(stage|)*n``."""
    def run(st: str) -> str:
        return re.sub(r"(.)\1+", lambda m: f"{m.group(1)}*{len(m.group(0))}", st)

    out, i = [], 0
    while i < len(stages):
        j = i
        while j + 1 < len(stages) and stages[j + 1] == stages[i]:
            j += 1
        last = j == len(stages) - 1
        if j > i and not last:
            out.append(f"({run(stages[i])}|)*{j - i + 1}")
        else:
            out += [run(stages[i]) + "|"] * (j - i + 1)
        i = j + 1
    return "".join(out)[:-1]


def _precision(cfg: Obj, name_prec: str) -> str:
    mp = cfg.fields.get("mixed_precision")
    kind = mp.kind.split(":", 1)[-1] if isinstance(mp, Obj) else (mp if isinstance(mp, str) else "")
    return PRECISIONS.get(kind, PRECISIONS.get({"fp8cs": "fp8_cs", "fp8mx": "fp8_mx"}.get(name_prec, name_prec), "?"))


#: Sequence length above which a (non-benchmark) training recipe of ``recipes/<family>/<gpu>/`` is
#: kept, kind "training": the benchmark recipes stop at 8,192 tokens, the long-context ones are there.
LONG_CONTEXT = 8192


def extract(root: Path) -> list[dict[str, str]]:
    """One row per pre-training benchmark recipe (``perf_recipes/``, kind "benchmark") of the
    unpacked wheel at ``root``, then the long-context pre-training recipes of ``recipes/``
    (sequence > :data:`LONG_CONTEXT`, kind "training": recommended layouts, not benchmarks)."""
    version = next((p.name.removesuffix(".dist-info").split("-")[1] for p in root.glob("megatron_bridge-*.dist-info")), "")
    out = []
    bridge = root / "megatron" / "bridge"
    paths = [("benchmark", p) for p in sorted((bridge / "perf_recipes").glob("*/*/*.py"))]
    paths += [("training", p) for p in sorted((bridge / "recipes").glob("*/*/*.py"))]
    for kind, path in paths:
        if path.name == "__init__.py":
            continue
        family, gpu = path.parent.parent.name, path.parent.name
        modname = ".".join(path.relative_to(root).with_suffix("").parts)
        interp = Interpreter(root)
        mod = interp.module(modname)
        for fn in mod.body:
            if not isinstance(fn, ast.FunctionDef):
                continue
            m = NAME.match(fn.name)
            if not m:
                continue
            interp.unresolved = []
            cfg = interp.call_function(modname, fn, [], {})
            if not isinstance(cfg, Obj):
                continue
            model = cfg.fields.get("model") if isinstance(cfg.fields.get("model"), Obj) else Obj()
            train = cfg.fields.get("train") if isinstance(cfg.fields.get("train"), Obj) else Obj()
            ddp = cfg.fields.get("ddp") if isinstance(cfg.fields.get("ddp"), Obj) else Obj()
            co = cfg.fields.get("comm_overlap") if isinstance(cfg.fields.get("comm_overlap"), Obj) else Obj()
            ds = cfg.fields.get("dataset") if isinstance(cfg.fields.get("dataset"), Obj) else Obj()
            g = model.fields.get
            tp, pp, cp = (g("tensor_model_parallel_size", 1), g("pipeline_model_parallel_size", 1),
                          g("context_parallel_size", 1))
            gpus = int(m["gpus"])
            dp = gpus // (tp * pp * cp) if all(isinstance(x, int) for x in (tp, pp, cp)) else Unknown("dp")
            seq = model.fields.get("seq_length", ds.fields.get("seq_length"))
            if kind == "training" and not (isinstance(seq, int) and seq > LONG_CONTEXT):
                continue
            row = {
                "recipe": fn.name, "kind": kind, "family": family, "model": m["model"], "hf_model": g("hf_model"), "gpu": gpu,
                "gpu_count": gpus, "precision": _precision(cfg, m["prec"]), "tp": tp, "pp": pp, "cp": cp,
                "vp": g("virtual_pipeline_model_parallel_size"), "ep": g("expert_model_parallel_size", 1),
                "etp": g("expert_tensor_parallel_size"), "dp": dp, "sequence_parallel": g("sequence_parallel"),
                "mbs": train.fields.get("micro_batch_size"), "gbs": train.fields.get("global_batch_size"),
                "seq_len": g("seq_length", ds.fields.get("seq_length")),
                **{k: g(k) for k in ("recompute_granularity", "recompute_method", "recompute_num_layers",
                                     "recompute_modules", "moe_token_dispatcher_type", "moe_flex_dispatcher_backend")},
                "overlap_moe_expert_parallel_comm": co.fields.get("overlap_moe_expert_parallel_comm"),
                "delay_wgrad_compute": co.fields.get("delay_wgrad_compute"),
                "tp_comm_overlap": co.fields.get("tp_comm_overlap"),
                **{k: g(k) for k in ("cuda_graph_impl", "cuda_graph_scope", "moe_router_force_load_balancing",
                                     "moe_expert_rank_capacity_factor")},
                "use_megatron_fsdp": ddp.fields.get("use_megatron_fsdp"),
                "data_parallel_sharding_strategy": ddp.fields.get("data_parallel_sharding_strategy"),
                "fp8_param_gather": (cfg.fields["mixed_precision"].fields.get("fp8_param_gather")
                                     if isinstance(cfg.fields.get("mixed_precision"), Obj) else None),
                "cpu_offloading": g("cpu_offloading"), "cpu_offloading_num_layers": g("cpu_offloading_num_layers"),
                "fine_grained_activation_offloading": g("fine_grained_activation_offloading"),
                "offload_modules": g("offload_modules"),
                "pipeline_model_parallel_layout": _layout_cell(g("pipeline_model_parallel_layout")),
                "file": str(path.relative_to(root)), "megatron_bridge_version": version,
                "unresolved": " | ".join(dict.fromkeys(interp.unresolved)),
            }
            out.append({k: _cell(row[k]) for k in COLUMNS})
    return out


def main(argv: list[str]) -> int:
    if len(argv) != 2 or not (Path(argv[1]) / "megatron" / "bridge" / "perf_recipes").is_dir():
        print("usage: bridge_recipes.py UNPACKED_WHEEL_DIR (with megatron/bridge/perf_recipes)", file=sys.stderr)
        return 2
    rows = extract(Path(argv[1]))
    w = csv.DictWriter(sys.stdout, fieldnames=COLUMNS, lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
