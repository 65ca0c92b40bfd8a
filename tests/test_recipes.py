"""The recipe registry: bytes derived from the formats match the specs and Megatron's tables,
the peak each recipe runs at, and one training-precision policy that every chapter follows."""
from __future__ import annotations

import re
from dataclasses import replace

import pytest

from scaletax import ROOT
from scaletax.inputs import hardware, models, recipes
from scaletax.inputs.layout import Layout
from scaletax.model import comm, memory, perf
from scaletax.model.topology import Topology
from scaletax.chapters import communication as cs
from scaletax.chapters import decision as d
from scaletax.chapters import memory as ms
from scaletax.report.chapters import default_parameters

from objects import as_gpu, as_recipe


def test_operand_bytes_follow_the_format_specs():
    # OCP MX v1.0: one E8M0 scale per 32 elements; NVFP4 (arXiv 2509.25149): one E4M3 scale per 16
    expect = {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "mxfp8": 1 + 1 / 32, "mxfp6": 0.75 + 1 / 32,
              "nvfp4": 0.5 + 1 / 16, "mxfp4": 0.5 + 1 / 32}
    assert {n: r.operand_bytes for n, r in recipes.RECIPES.items()} == pytest.approx(expect)
    assert [recipes.get(n).format_class for n in ("bf16", "fp16", "fp8", "mxfp8", "nvfp4", "mxfp4")] == [
        "16bit", "16bit", "8bit", "8bit", "4bit", "4bit"]
    assert [n for n in recipes.NAMES if recipes.get(n).block_scaled] == ["mxfp8", "mxfp6", "nvfp4", "mxfp4"]


def test_state_copy_cast_and_wire_bytes():
    bf16, fp16, fp8, mx8, nv4 = (recipes.get(n) for n in ("bf16", "fp16", "fp8", "mxfp8", "nvfp4"))
    # Megatron distributed-optimizer table: 16-bit grads "4 + 16/d" (2 + 2 + 16, the optimizer keeps an
    # fp32 gradient shard); fp32 grads (grad_reduce_in_fp32) "6 + 12/d" (2 + 4 + 12)
    assert (bf16.param_bytes, bf16.grad_bytes, bf16.optimizer_bytes()) == (2.0, 2.0, 16.0)
    assert (fp16.param_bytes, fp16.grad_bytes, fp16.optimizer_bytes()) == (2.0, 2.0, 16.0)
    assert fp8.optimizer_bytes(grad_bytes=4.0) == 12.0
    # cached row- and column-wise quantized copies; casts read 16 bits and write both copies
    assert (bf16.lowp_copy_bytes, fp8.lowp_copy_bytes) == (0.0, 2.0)
    assert nv4.lowp_copy_bytes == pytest.approx(2 * (0.5 + 1 / 16))
    assert (bf16.cast_bytes, fp8.cast_bytes) == (0.0, 4.0)
    assert mx8.cast_bytes == pytest.approx(2 + 2 * (1 + 1 / 32))
    assert nv4.cast_bytes == pytest.approx(2 + 2 * (0.5 + 1 / 16) + 2)  # + the Hadamard read
    # wire: FP8 gathers and dispatches 1 B; MX and FP4 recipes move MXFP8
    assert (bf16.wire_bytes, fp8.wire_bytes) == (2.0, 1.0)
    assert nv4.wire_bytes == mx8.wire_bytes == pytest.approx(1 + 1 / 32)
    w = comm.WireFormat.for_recipe(as_recipe("nvfp4"))
    assert (w.param, w.dispatch, w.act, w.grad) == (pytest.approx(1 + 1 / 32), pytest.approx(1 + 1 / 32), 2.0, 2.0)


def test_gradient_bytes_are_one_choice_for_memory_and_wire():
    """Megatron-Core DDP reduces its grad buffer in place: the bytes stored per gradient are the
    bytes each DP reduce-scatter moves per gradient, for every recipe and for an explicit override."""
    m = models.get(models.DENSE_1T)
    for name in recipes.TRAINING:
        rec = recipes.get(name)
        assert comm.WireFormat.for_recipe(as_recipe(name)).grad == rec.grad_bytes == memory.resolve_options(as_recipe(name))["grad_bytes"]
    # DP gradient traffic scales with the gradient bytes: fp32 (grad_reduce_in_fp32) doubles it
    lay = Layout(tp=8, pp=8, dp=16)
    topo = Topology.from_gpu(as_gpu("h100_sxm"))
    g2 = comm.step_traffic(m, lay, topo, comm.WireFormat.for_recipe(as_recipe("bf16"))).groups["dp"]
    g4 = comm.step_traffic(m, lay, topo, replace(comm.WireFormat.for_recipe(as_recipe("bf16")), grad=4.0)).groups["dp"]
    # reduce-scatter of gradients + all-gather of 16-bit parameters: 2 + 2 bytes -> 4 + 2 bytes
    assert float(g4.nic_bytes[0] + g4.nvlink_bytes[0]) / float(g2.nic_bytes[0] + g2.nvlink_bytes[0]) == pytest.approx(1.5)


def test_the_models_read_the_registry():
    m = models.get(models.DENSE_1T)
    lay = Layout(tp=8, pp=8, dp=16)
    o = memory.resolve_options(as_recipe("nvfp4"))
    assert (o["param_bytes"], o["grad_bytes"], o["optimizer_bytes"]) == (2.0, 2.0, 16.0)
    assert o["lowp"] == recipes.get("nvfp4").lowp_copy_bytes
    # weights: 16-bit parameters plus the quantized copies of the linear weights
    w = {p: float(memory.breakdown(m, lay, as_recipe(p)).weights[0]) for p in ("bf16", "fp8", "nvfp4")}
    assert w["bf16"] < w["nvfp4"] < w["fp8"]
    g = hardware.get("h100_sxm")
    assert perf.gemm_reference_size(g, as_recipe("fp8")) == pytest.approx(1.5 * 1.0 * g.peak_flops("fp8") / g.hbm_bw)
    assert perf.compute_precision(as_recipe("fp16")).name == "fp16" and perf.compute_precision(as_recipe("nvfp4")).name == "bf16"
    assert recipes.TRAINING == memory.PRECISIONS == recipes.TRAINING


def test_peaks_and_native_support():
    h100, b200 = hardware.get("h100_sxm"), hardware.get("b200")
    assert h100.peak_flops("fp8") == h100.fp8_tflops * 1e12
    assert not h100.supports("mxfp8") and b200.supports("mxfp8")  # block scales need native MX
    assert b200.peak_flops("nvfp4") == b200.fp4_tflops * 1e12 == b200.peak_flops("mxfp4")
    assert not h100.supports("int3")
    with pytest.raises(hardware.HardwareError, match="unknown precision 'int3'; valid: bf16, fp16, fp8"):
        h100.peak_flops("int3")


def test_mxfp6_has_a_peak_but_no_training_recipe():
    r = recipes.get("mxfp6")
    assert not r.trains and "mxfp6" not in recipes.TRAINING and r.peak_column == "fp6_tflops"
    with pytest.raises(ValueError, match="precision: unknown 'mxfp6'; valid: bf16, fp16, fp8, mxfp8, nvfp4, mxfp4"):
        recipes.training("mxfp6")
    with pytest.raises(ValueError, match="the memory model does not train in mxfp6"):
        memory.resolve_options(r)
    with pytest.raises(ValueError, match="precision: unknown 'int3'"):
        recipes.get("int3")


def test_training_precision_policy():
    def tp(g, *a):
        return recipes.training_precision(hardware.get(g), *a).name

    assert tp("b200", "nvfp4", ["bf16", "nvfp4"]) == "nvfp4"
    # Hopper has no FP4: the fastest native one the scenario allows, else BF16
    assert tp("h100_sxm", "nvfp4", ["bf16", "fp8", "nvfp4"]) == "fp8"
    assert tp("h100_sxm", "nvfp4", ["bf16", "nvfp4"]) == "bf16"
    assert tp("h100_sxm", "nvfp4") == "fp8"  # default: any training recipe
    assert tp("a100_sxm_80gb", "fp8") == "bf16"  # BF16 and FP16 tie: the first listed
    assert tp("h100_sxm", "nvfp4", []) == "bf16"
    assert recipes.fastest_precision(hardware.get("gb200"), "fp8", ["bf16", "fp8", "nvfp4"]).name == "nvfp4"
    assert recipes.fastest_precision(hardware.get("h200_sxm"), "fp8", ["bf16", "fp8", "nvfp4"]).name == "fp8"
    # the model takes the objects, resolved once where the ids come in
    with pytest.raises(TypeError, match="expected a hardware.GPU, got str 'h100_sxm'"):
        perf.prepare(models.get(models.DENSE_1T), Layout(tp=8, pp=8, dp=16), recipes.training("bf16"), "h100_sxm")
    with pytest.raises(TypeError, match="expected a recipes.Recipe, got str 'bf16'"):
        memory.breakdown(models.get(models.DENSE_1T), Layout(tp=8, pp=8, dp=16), "bf16")
    with pytest.raises(ValueError, match="precision: unknown 'int3'"):
        tp("h100_sxm", "int3")


def test_every_chapter_trains_hopper_in_the_same_precision():
    """An NVFP4 scenario that allows only BF16 besides: H100 trains in BF16 in the decision,
    memory and communication chapters alike (before the registry, memory and communication
    chose FP8)."""
    wanted, allowed = "nvfp4", ["bf16", "nvfp4"]
    params = default_parameters("decision")
    params.update(models=[models.DENSE_1T], gpus=["h100_sxm", "b200"], training_precision=wanted,
                  training_precisions=allowed)
    plan = d.Plan.from_params(**params)
    assert plan.run_precision("h100_sxm") == "bf16" and plan.run_precision("b200") == "nvfp4"
    m = models.get(models.DENSE_1T)
    r = ms.min_gpus(m, "h100_sxm", wanted, 2**24, max_gpus=512, allowed=allowed)
    assert r["precision"] == "bf16"
    assert "modelled in BF16" in ms.precision_note(["h100_sxm"], wanted, allowed)
    comm_rows, _ = cs.llama_rows("h100_sxm", wanted, allowed)
    assert comm_rows == cs.llama_rows("h100_sxm", "bf16")[0] != cs.llama_rows("h100_sxm", "fp8")[0]


def test_no_recipe_fact_outside_the_registry():
    """Block-scale overheads and the MXFP6 recipe are written in inputs/recipes.py only (the number
    formats themselves live in inputs/formats.py, their quantizers in model/precision.py)."""
    pat = re.compile(r"1\s*/\s*32|0\.5\s*\+\s*1\s*/\s*16|\bmxfp6\b")
    lib = ROOT / "lib" / "scaletax"
    hits = [f"{p.relative_to(lib)}:{i}" for p in sorted(lib.rglob("*.py"))
            if p.relative_to(lib).as_posix() not in ("inputs/recipes.py", "inputs/formats.py", "model/precision.py")
            for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if pat.search(line)]
    assert hits == []
