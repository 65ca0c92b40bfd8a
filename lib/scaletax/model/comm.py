"""Collective communication on a two-level topology (NVLink domain + rail-optimized scale-out).

Cost model: latency (alpha) + bandwidth (beta), per phase,
    t = alpha_launch + sum_phases( steps * alpha_link + bytes_on_wire / (link_bw * eff) ),
with ``eff`` the achieved fraction of the link rate at large messages, fitted to the published
measurements in ``data/collectives.csv`` (:func:`fit_calibration`). For a fixed algorithm the
achieved algorithm bandwidth is then the saturating curve
    algbw(m) = m / t(m) = bw_peak_eff * m / (m + m_half),   m_half = latency * bw_peak_eff,
(:func:`latency_bandwidth`, :func:`saturating_bw`): the alpha-beta model and the saturating
bandwidth curve are the same statement.

Message size ``nbytes`` is per GPU, with NCCL's conventions (nccl-tests doc/PERFORMANCE.md):
all_reduce: the buffer each GPU holds; reduce_scatter: each GPU's full input (it keeps 1/n);
all_gather: each GPU's full output (it contributes 1/n); all_to_all: each GPU's whole send
buffer (1/n of it to each peer, itself included); p2p: the bytes sent.

Bytes on the wire per GPU (Thakur, Rabenseifner & Gropp 2005, "Optimization of collective
communication operations in MPICH", IJHPCA 19(1); NCCL busbw doc):
ring all_reduce 2(n-1)/n m in 2(n-1) steps; reduce_scatter / all_gather (n-1)/n m in n-1 steps;
recursive halving / doubling: the same bytes in ceil(log2 n) steps per pass; all_to_all
(n-1)/n m; double-binary-tree all_reduce ~2 m in 2 ceil(log2 n) steps (Sanders, Speck & Traeff
2009, used by NCCL >= 2.4); in-network reduction (NVLS on NVSwitch, SHARP on InfiniBand) ~1 m in
2 steps (the switch reduces, each GPU sends its data once and receives the result once).

Hierarchical collectives over a group with ``n_in`` GPUs per domain in ``n_out`` domains
(:func:`scaletax.model.topology.placement`), rail-optimized (each GPU its own NIC):
all_reduce = [reduce-scatter + all-gather in the domain, costed as an intra-domain all_reduce]
           + all_reduce of the 1/n_in shard across domains over the NICs;
reduce_scatter = in-domain reduce_scatter of m + cross-domain reduce_scatter of m/n_in;
all_gather = the mirror image; the phases run one after the other (sum). NCCL pipelines
chunks through NVLink and NIC at once, so for groups with several GPUs per domain the sum is
pessimistic: for a 1 GiB all-reduce over 2 x 8 H100 it is 1.6x the slower phase alone, and the
model's busbw there (~246 GB/s) is below what a pipelined ring would reach.
all_to_all sends (n_in-1)/n m over NVLink and (n-n_in)/n m over the NIC concurrently (NCCL
posts all peer sends at once), so its time is the max of the two phases.

Public API
----------
Collectives: ``collective_time``, ``collective_phases``, ``predicted_busbw``, ``busbw``,
``algbw``, ``bus_factor``, ``wire_bytes``, ``link_bytes``, ``latency_bandwidth``,
``saturating_bw``, ``moe_dispatch_bytes``, ``moe_alltoall_time``, ``moe_rank_imbalance``,
``ep_link_eff`` / ``ep_link_curve`` (DeepEP-class kernels' achieved NVLink rate, measured),
``ep_rdma_factor`` / ``ep_rdma_curve`` (their NIC rate by nodes spanned, measured),
``expected_max_normal``; calibration:
``calibration_points``, ``fit_calibration``, ``predict_point``, ``calibration_table``.
Per step: ``WireFormat``, ``step_traffic`` -> ``StepComm`` of ``GroupTraffic`` (both with
``take``, ``concat`` and ``map``: the one way to select, join or combine traffic; the chapter's
per-group tables are in :mod:`scaletax.chapters.communication`). Overlap: ``Overlap``, ``exposed_comm`` ->
``ExposedComm``, ``exposed_time`` (the step-time model's entry point).
The topology (``Topology``, ``placement``, calibrated constants) is in :mod:`scaletax.model.topology`.
"""
from __future__ import annotations

import csv
import functools
import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Sequence

import numpy as np

from scaletax import DATA_DIR
from scaletax.inputs import hardware, recipes
from scaletax.inputs.options import SCHEDULES, STACKS
from scaletax.model.topology import Topology, placement

COLLECTIVES_CSV = DATA_DIR / "collectives.csv"

OPS = ("all_reduce", "reduce_scatter", "all_gather", "all_to_all", "p2p")
#: ring: NCCL's ring (n-1 latency steps per pass). rhd: recursive halving / doubling (Thakur et
#: al. 2005, Sec. 4: Rabenseifner all-reduce, recursive-halving reduce-scatter, recursive-
#: doubling all-gather): the ring's bytes in ceil(log2 n) steps per pass. tree: double binary
#: tree all-reduce. in_network: NVLS / SHARP all-reduce where the topology has it, ring elsewhere.
#: auto: per phase, the fastest available, as NCCL's tuner picks per call (ring is never faster
#: than rhd in this model, nor tree at equal latency, so auto = min(rhd, in-network)); it also
#: makes "a group inside one domain is never slower than spread over domains" hold, because a
#: one-domain group may run the same two-level schedule over NVLink. Only all_reduce has tree /
#: in-network variants: in-network reduction does not cut the bytes a GPU must send in
#: reduce_scatter nor receive in all_gather, so those use ring (or rhd under auto).
ALGORITHMS = ("auto", "ring", "rhd", "tree", "in_network")


def _f(x) -> np.ndarray:
    return np.asarray(x, dtype=float)


def _check_op(op: str) -> None:
    if op not in OPS:
        raise ValueError(f"unknown collective {op!r}; valid: {', '.join(OPS)}")


def bus_factor(op: str, n) -> np.ndarray:
    """NCCL bus-bandwidth factor: busbw = algbw * factor (nccl-tests doc/PERFORMANCE.md).

    2(n-1)/n for all_reduce; (n-1)/n for reduce_scatter, all_gather, all_to_all; 1 for p2p.
    """
    _check_op(op)
    n = _f(n)
    if op == "all_reduce":
        return 2.0 * (n - 1.0) / n
    if op == "p2p":
        return np.ones_like(n)
    return (n - 1.0) / n


def wire_bytes(op: str, nbytes, n) -> np.ndarray:
    """Bytes each GPU sends (= receives) in a flat ring / direct collective of n GPUs.

    ring all_reduce 2(n-1)/n m; reduce_scatter, all_gather, all_to_all (n-1)/n m; p2p m
    (Thakur et al. 2005; NCCL busbw = these bytes / time).
    """
    return _f(nbytes) * bus_factor(op, n)


# --- per-phase costs (seconds), all broadcasting; zero when the phase has one GPU -----------
def _log2ceil(n):
    return np.ceil(np.log2(np.maximum(n, 1.0)))


def _ring_allreduce(m, n, bw, alpha):
    # ring all-reduce: 2(n-1) steps, 2(n-1)/n m bytes per GPU (Thakur et al. 2005, Sec. 4.5)
    return 2.0 * (n - 1.0) * alpha + 2.0 * (n - 1.0) / n * m / bw


def _rhd_allreduce(m, n, bw, alpha):
    # Rabenseifner: recursive-halving reduce-scatter + recursive-doubling all-gather,
    # 2 ceil(log2 n) steps, 2(n-1)/n m bytes per GPU (Thakur et al. 2005, Sec. 4.5)
    return 2.0 * _log2ceil(n) * alpha + 2.0 * (n - 1.0) / n * m / bw


def _half(m, n, bw, alpha, ring: bool):
    # reduce-scatter or all-gather, (n-1)/n m bytes per GPU: ring n-1 steps, recursive
    # halving / doubling ceil(log2 n) steps (Thakur et al. 2005, Secs. 4.2 and 4.4)
    steps = (n - 1.0) if ring else _log2ceil(n)
    return steps * alpha + (n - 1.0) / n * m / bw


def _tree_allreduce(m, n, bw, alpha):
    # double binary tree: reduce up + broadcast down, 2 ceil(log2 n) steps, ~2 m bytes per GPU
    # (Sanders, Speck & Traeff 2009; NCCL 2.4 blog "Massively Scale Your Deep Learning Training")
    return np.where(n > 1, 2.0 * _log2ceil(n) * alpha + 2.0 * m / bw, 0.0)


def _innet_allreduce(m, n, bw, alpha):
    # in-switch reduction (NVLS / SHARP): send m once, receive the reduced m once, 2 steps
    # (NVIDIA NVLink SHARP in NCCL >= 2.17; Graham et al. 2016, SHARP, COMHPC)
    return np.where(n > 1, 2.0 * alpha + m / bw, 0.0)


def _allreduce_phase(m, n, bw, alpha, innet_bw, innet_ok, algorithm):
    if algorithm == "ring":
        return _ring_allreduce(m, n, bw, alpha)
    if algorithm == "rhd":
        return _rhd_allreduce(m, n, bw, alpha)
    if algorithm == "tree":
        return _tree_allreduce(m, n, bw, alpha)
    if algorithm == "in_network":
        return np.where(innet_ok, _innet_allreduce(m, n, innet_bw, alpha), _ring_allreduce(m, n, bw, alpha))
    innet = np.where(innet_ok, _innet_allreduce(m, n, innet_bw, alpha), np.inf)
    return np.minimum(_rhd_allreduce(m, n, bw, alpha), innet)


@dataclass(frozen=True)
class _Links:
    """Float views of a topology's link parameters (computed once per call chain)."""

    domain: np.ndarray
    bv: np.ndarray      # achieved NVLink B/s
    bn: np.ndarray      # achieved NIC B/s
    bs_nv: np.ndarray   # NVLS all-reduce B/s
    bs_ib: np.ndarray   # SHARP all-reduce B/s
    nvls: np.ndarray
    ib_sharp: np.ndarray
    a0: np.ndarray
    av: np.ndarray
    an: np.ndarray

    @classmethod
    def of(cls, topo: Topology) -> "_Links":
        return cls(domain=np.asarray(topo.domain, dtype=np.int64), bv=topo.nvlink_eff_bw,
                   bn=topo.nic_eff_bw, bs_nv=_f(topo.nvlink_bw) * topo.nvls_eff,
                   bs_ib=_f(topo.nic_bw) * topo.sharp_eff, nvls=np.asarray(topo.nvls, dtype=bool),
                   ib_sharp=np.asarray(topo.ib_sharp, dtype=bool), a0=_f(topo.alpha_launch),
                   av=_f(topo.alpha_nvlink), an=_f(topo.alpha_nic))


def _placed(n, stride, domain):
    """(n, n_in, n_out) as float arrays (:func:`scaletax.model.topology.placement`)."""
    n_int = np.asarray(n, dtype=np.int64)
    n_in, n_out = placement(n_int, stride, domain)
    return _f(n_int), _f(n_in), _f(n_out)


def _phases(op, m, n, n_in, n_out, lk: _Links, algorithm):
    """(t_intra, t_inter, combine) for a placed group; see :func:`collective_phases`."""
    if op == "all_reduce":
        t_in = _allreduce_phase(m, n_in, lk.bv, lk.av, lk.bs_nv, lk.nvls, algorithm)
        t_out = _allreduce_phase(m / n_in, n_out, lk.bn, lk.an, lk.bs_ib, lk.ib_sharp, algorithm)
        return t_in, t_out, "sum"
    if op in ("reduce_scatter", "all_gather"):
        ring = algorithm != "auto" and algorithm != "rhd"
        return (_half(m, n_in, lk.bv, lk.av, ring), _half(m / n_in, n_out, lk.bn, lk.an, ring), "sum")
    if op == "all_to_all":
        # direct exchange: all n-1 peer sends posted at once (one latency step per link type);
        # (n_in-1)/n m over NVLink, (n-n_in)/n m over the NIC, concurrently
        n_rem = n - n_in
        t_in = np.where(n_in > 1, lk.av + (n_in - 1.0) / n * m / lk.bv, 0.0)
        t_out = np.where(n_rem > 0, lk.an + n_rem / n * m / lk.bn, 0.0)
        return t_in, t_out, "max"
    # p2p between two ranks `stride` apart: NVLink when both are in one domain
    same = n_in >= 2
    return np.where(same, lk.av + m / lk.bv, 0.0), np.where(same, 0.0, lk.an + m / lk.bn), "sum"


def _time(op, m, n, n_in, n_out, lk: _Links, algorithm):
    t_in, t_out, combine = _phases(op, m, n, n_in, n_out, lk, algorithm)
    body = t_in + t_out if combine == "sum" else np.maximum(t_in, t_out)
    active = (m > 0) if op == "p2p" else (n > 1) & (m > 0)
    return np.where(active, lk.a0 + body, 0.0)


def _check(op, nbytes, algorithm):
    _check_op(op)
    if algorithm not in ALGORITHMS:
        raise ValueError(f"unknown algorithm {algorithm!r}; valid: {', '.join(ALGORITHMS)}")
    m = _f(nbytes)
    if np.any(m < 0):
        raise ValueError("nbytes must be >= 0")
    return m


def collective_phases(op: str, nbytes, n, topo: Topology, stride=1, algorithm: str = "auto"):
    """Intra-domain and inter-domain time of one collective, seconds (before launch latency).

    Returns ``(t_intra, t_inter, combine)`` with combine ``"sum"`` (phases in sequence) or
    ``"max"`` (concurrent, all_to_all). ``stride`` places the group (:func:`placement`).
    """
    m = _check(op, nbytes, algorithm)
    n, n_in, n_out = _placed(2 if op == "p2p" else n, stride, topo.domain)
    return _phases(op, m, n, n_in, n_out, _Links.of(topo), algorithm)


def collective_time(op: str, nbytes, n, topo: Topology, stride=1, algorithm: str = "auto") -> np.ndarray:
    """Time of one collective, seconds; broadcasts over nbytes, n, stride and topology fields.

    op: one of :data:`OPS`; nbytes: message size per GPU (module docstring conventions), bytes;
    n: GPUs in the group (for p2p: 2); stride: rank distance between group members (product of
    the inner parallel sizes) used to place the group on domains; algorithm: :data:`ALGORITHMS`.
    A group of one GPU (or an empty message) costs 0.

    Guarantees (tested): more bandwidth is never slower; a bigger message never takes less time;
    under ``auto`` a group inside one domain is never slower than the same group spread over
    domains, for physically ordered links: achieved NIC (and SHARP) bandwidth at most half the
    achieved NVLink bandwidth, and NIC step latency at least NVLink's (at least ceil(log2 n_out)
    times it when IB SHARP is on, whose 2-step latency would otherwise undercut a log-depth
    NVLink schedule).
    """
    m = _check(op, nbytes, algorithm)
    n, n_in, n_out = _placed(2 if op == "p2p" else n, stride, topo.domain)
    return _time(op, m, n, n_in, n_out, _Links.of(topo), algorithm)


def algbw(nbytes, t) -> np.ndarray:
    """NCCL algorithm bandwidth: message bytes / time, B/s."""
    return _f(nbytes) / _f(t)


def busbw(op: str, nbytes, n, t) -> np.ndarray:
    """NCCL bus bandwidth, B/s: algbw * :func:`bus_factor` (nccl-tests doc/PERFORMANCE.md)."""
    return algbw(nbytes, t) * bus_factor(op, n)


def predicted_busbw(op: str, nbytes, n, topo: Topology, stride=1, algorithm: str = "auto") -> np.ndarray:
    """Bus bandwidth the model predicts for one collective, B/s."""
    return busbw(op, nbytes, n, collective_time(op, nbytes, n, topo, stride, algorithm))


def latency_bandwidth(op: str, n, topo: Topology, stride=1, algorithm: str = "ring"):
    """(latency s, seconds per byte) of a fixed-algorithm collective: t(m) = latency + m * c.

    Then algbw(m) = (1/c) * m / (m + m_half) with m_half = latency / c (:func:`saturating_bw`).
    ``algorithm="auto"`` is piecewise-linear in m (the tuner switches), so it is refused here.
    """
    if algorithm == "auto":
        raise ValueError("latency_bandwidth needs a fixed algorithm (ring, rhd, tree or in_network)")
    m1, m2 = 2.0**20, 2.0**40
    t1 = collective_time(op, m1, n, topo, stride, algorithm)
    per_byte = (collective_time(op, m2, n, topo, stride, algorithm) - t1) / (m2 - m1)
    return t1 - per_byte * m1, per_byte


def saturating_bw(nbytes, bw_peak, m_half) -> np.ndarray:
    """Achieved bandwidth bw_peak * m / (m + m_half), B/s: the alpha-beta model's algbw."""
    m = _f(nbytes)
    return _f(bw_peak) * m / (m + _f(m_half))


# --- mixture-of-experts token exchange ----------------------------------------------------
def moe_dispatch_bytes(tokens, top_k, hidden, bytes_per_elem) -> np.ndarray:
    """Send buffer of one MoE dispatch (or combine) per GPU, bytes: tokens * k * hidden * bytes.

    Each of the GPU's ``tokens`` goes to ``top_k`` experts (GShard, Lepikhin et al. 2020;
    DeepSeek-V3 Sec. 3.2.2). With uniform routing over ``ep`` ranks the fraction (ep-1)/ep is
    remote, which :func:`collective_time` ("all_to_all") applies; no per-node deduplication
    (DeepEP sends a token once per node over RDMA, which this upper bound ignores).
    """
    return _f(tokens) * _f(top_k) * _f(hidden) * _f(bytes_per_elem)


def moe_alltoall_time(tokens, top_k, hidden, bytes_per_elem, ep, topo: Topology, stride=1) -> np.ndarray:
    """One MoE dispatch (or combine) all-to-all over ``ep`` ranks, seconds."""
    return collective_time("all_to_all", moe_dispatch_bytes(tokens, top_k, hidden, bytes_per_elem),
                           ep, topo, stride)


#: Published MoE dispatch / combine kernel benchmarks (verbatim copy of the shared reference table;
#: data/sources/README.md): DeepEP, HybridEP, DeepGEMM, attention and NCCL rows with their sources.
KERNEL_BENCHMARKS_CSV = DATA_DIR / "kernel_benchmarks.csv"
#: The rows :func:`ep_link_eff` reads: HybridEP on GB200 NVL72 (multi-node NVLink, 8 to 36 ranks),
#: kernel-only "algorithm bandwidth" at the 32 SMs the Megatron-Bridge benchmark recipes give it
#: (``moe_hybridep_num_sms = 32``): FP8 dispatch and BF16 combine (NVIDIA's README_Hybrid-EP.md on
#: DeepEP branch hybrid-ep at 94a9f8f; bytes received per rank over its NVLink, per-rank deduplicated).
#: The per-direction NVLink rate of the GPU those rows ran on, B/s: GB200's NVLink 5, 1.8 TB/s per GPU
#: both directions (data/hardware.csv gb200 nvlink; a constant, not a catalog read, so that a cached
#: search's key covers it: tests/test_fidelity.py holds it to the catalog).
EP_BENCH_LINK_BW = 900e9
EP_BENCH_ROWS: tuple[tuple[str, str, str], ...] = (
    ("gb200", "HybridEP dispatch (kernel only, 32 SMs)", "fp8"),
    ("gb200", "HybridEP combine (kernel only, 32 SMs)", "bf16"))


def _gbps_by_ranks(path: Path | str, keep, what: str) -> dict[int, list[float]]:
    """The GB/s of the rows of data/kernel_benchmarks.csv that ``keep(row)`` accepts, per rank count;
    ``what`` names them in the one-line error for a row without ranks or in another unit, or none."""
    by: dict[int, list[float]] = {}
    with open(path, newline="", encoding="utf-8") as fh:
        for r in csv.DictReader(fh):
            if keep(r):
                if r["unit"] != "GB/s" or not r["ranks"]:
                    raise ValueError(f"{path}: {what} row without ranks or in {r['unit']!r}")
                by.setdefault(int(r["ranks"]), []).append(float(r["value"]))
    if not by:
        raise ValueError(f"{path}: no {what} row")
    return by


def _frozen(*arrays: np.ndarray) -> tuple[np.ndarray, ...]:
    for a in arrays:
        a.flags.writeable = False
    return arrays


@functools.lru_cache(maxsize=2)
def ep_link_curve(path: Path | str = KERNEL_BENCHMARKS_CSV) -> tuple[np.ndarray, np.ndarray]:
    """(ranks, achieved fraction of the per-direction NVLink rate) of the MoE dispatch and combine
    kernels inside one NVLink domain: the mean of :data:`EP_BENCH_ROWS` at each rank count, over
    GB200's 900 GB/s per direction (:data:`EP_BENCH_LINK_BW`). Falls from 0.81 at 8 ranks to 0.60 at
    36 (the NVSwitch fabric serves more peers per GPU; DeepEP on 8 H800s: 153-158 of ~200 GB/s,
    0.77-0.79, the same as at 8 ranks here)."""
    by = _gbps_by_ranks(path, lambda r: any(r["gpu"] == g and r["op"] == op and r["dtype"].startswith(dt)
                                            for g, op, dt in EP_BENCH_ROWS), f"HybridEP GB200 {EP_BENCH_ROWS}")
    ranks = np.array(sorted(by), dtype=np.float64)
    return _frozen(ranks, np.array([np.mean(by[int(k)]) * 1e9 / EP_BENCH_LINK_BW for k in ranks]))


def ep_link_eff(ranks) -> np.ndarray:
    """Achieved fraction of the NVLink rate of DeepEP-class dispatch and combine kernels among
    ``ranks`` GPUs of one NVLink domain (:func:`ep_link_curve`, interpolated in log2 of the ranks;
    below 8 ranks the 8-rank value, above 36 the 36-rank value: ASSUMPTION, no measurement beyond
    36 ranks, so the fall with more peers is not extrapolated), vectorized."""
    k, e = ep_link_curve()
    x = np.log2(np.maximum(np.asarray(ranks, dtype=np.float64), 1.0))
    return np.interp(x, np.log2(k), e)


#: The rows :func:`ep_rdma_curve` reads: MoE dispatch and combine across 8-GPU nodes with one 400 Gb/s
#: NIC per GPU, (gpu, kernel) pairs of data/kernel_benchmarks.csv. DeepEP V1's normal kernels on H800
#: (CX7; docs/legacy.md at dd758ca: 4096 tokens per rank, hidden 7168, top-8) and HybridEP's kernel-only
#: figures on H100 at the most SMs measured, 16 (README_Hybrid-EP.md at 94a9f8f; the NIC is not named
#: there: ASSUMPTION, the 400 Gb/s of DGX H100): the kernels behind Megatron-Core's flex dispatcher
#: ("deepep", "hybridep") in the Megatron-Bridge 0.6 recipes. DeepEP V2's rows (ElasticBuffer,
#: 2026-04-30) are not read: their "logical bandwidth" includes local-rank traffic by a count the README
#: does not state. Read with V1's count, its 2-node figures (81-91 GB/s) would show no 2-node loss, so a
#: stack on V2 may pay less across two nodes than :func:`ep_rdma_factor` charges.
EP_RDMA_ROWS: tuple[tuple[str, str], ...] = (
    ("h800_sxm", "DeepEP V1 normal dispatch (RDMA)"), ("h800_sxm", "DeepEP V1 normal combine (RDMA)"),
    ("h100_sxm", "HybridEP dispatch (kernel only, 16 SMs)"), ("h100_sxm", "HybridEP combine (kernel only, 16 SMs)"))
#: The NIC line rate (B/s, one direction) and GPUs per node of the machines :data:`EP_RDMA_ROWS` ran on.
EP_RDMA_NIC_BW = 50e9
EP_RDMA_NODE = 8


@functools.lru_cache(maxsize=2)
def ep_rdma_curve(path: Path | str = KERNEL_BENCHMARKS_CSV) -> tuple[np.ndarray, np.ndarray]:
    """(nodes spanned, achieved fraction of the NIC line rate for the bytes that leave the node) of
    DeepEP-class dispatch and combine across 8-GPU nodes, the mean of :data:`EP_RDMA_ROWS` per node count.

    The published "RDMA bandwidth" counts a token once per distinct destination node, its own node
    included (DeepEP tests/legacy/test_internode.py: ``rdma_idx``, ``num_rdma_token_sent``), although
    the kernel copies the own node's share locally (csrc/kernels/legacy/internode.cu: the RDMA put only
    ``if (dst_rdma_rank != rdma_rank)``). Under routing symmetric across D nodes 1/D of the counted
    copies stay home, so the bytes on the NIC per second are (D-1)/D of the figure (DeepEP's 58 GB/s
    at 32 ranks is above the 50 GB/s line rate: only a count with the home copies can be). That gives
    0.43 (DeepEP) and 0.68 (HybridEP) of the line rate at 2 nodes, 0.85-0.88 at 4 and 8: across
    two nodes the kernels move the home half through the same pipeline and the NIC idles half the
    time. (Across 8 nodes 0.865: the ``nic_eff`` NCCL's all-reduce calibrates is 0.866.)"""
    by = _gbps_by_ranks(path, lambda r: (r["gpu"], r["op"]) in EP_RDMA_ROWS and r["scope"] == "internode",
                        f"RDMA dispatch {EP_RDMA_ROWS}")
    if len(by) < 2:
        raise ValueError(f"{path}: fewer than two node counts among the RDMA dispatch rows ({EP_RDMA_ROWS})")
    nodes = np.array(sorted(by), dtype=np.float64) / EP_RDMA_NODE
    return _frozen(nodes, np.array([np.mean(by[int(d * EP_RDMA_NODE)]) * 1e9 * (d - 1) / d / EP_RDMA_NIC_BW
                                    for d in nodes]))


def ep_rdma_factor(domains) -> np.ndarray:
    """The NIC rate of a DeepEP-class dispatch or combine spanning ``domains`` NVLink domains, as a
    fraction of its rate across the most nodes measured, where the NIC binds (:func:`ep_rdma_curve`,
    interpolated in log2 of the domains; at most 1; below 2 domains the 2-domain value, above the
    widest the widest's, 1). ASSUMPTION: an NVL72 rack's share stays home the same way an 8-GPU
    node's does (no multi-rack measurement). Vectorized."""
    d, e = ep_rdma_curve()
    x = np.log2(np.maximum(np.asarray(domains, dtype=np.float64), 2.0))
    return np.minimum(1.0, np.interp(x, np.log2(d), e / e[-1]))


@functools.lru_cache(maxsize=1)
def _normal_grid() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The grid of :func:`expected_max_normal` on [0, 12] and log Phi(x), log Phi(-x) there
    (computed once: 12,001 calls of math.erf; read-only arrays)."""
    x = np.linspace(0.0, 12.0, 12001)  # the integrand is odd-split at 0: one grid per side
    erf = np.frompyfunc(math.erf, 1, 1)(x / math.sqrt(2.0)).astype(np.float64)
    log_hi, log_lo = np.log(0.5 * (1.0 + erf)), np.log(np.maximum(0.5 * (1.0 - erf), 1e-300))
    for a in (x, log_hi, log_lo):
        a.flags.writeable = False
    return x, log_hi, log_lo


def expected_max_normal(n) -> np.ndarray:
    """E[max of n independent standard normals] (0 for n = 1; 1/sqrt(pi) for n = 2), vectorized.

    E[max] = int_0^inf (1 - Phi(x)^n) dx - int_-inf^0 Phi(x)^n dx, by the trapezoid rule on
    [-12, 12] (error < 1e-9 for n <= 1e6).
    """
    n = np.asarray(n, dtype=np.float64)
    u, inv = np.unique(n, return_inverse=True)
    out = [_expected_max_normal(m) for m in u.tolist()]
    return np.asarray(out, dtype=np.float64)[inv].reshape(n.shape)


@functools.lru_cache(maxsize=4096)
def _expected_max_normal(m: float) -> float:
    """:func:`expected_max_normal` of one n (each n integrated once per process)."""
    x, log_hi, log_lo = _normal_grid()
    return float(np.trapezoid(1.0 - np.exp(m * log_hi), x) - np.trapezoid(np.exp(m * log_lo), x))


def moe_rank_imbalance(experts, top_k, ep, tokens) -> np.ndarray:
    """Expected max / mean routed token copies per EP rank, >= 1: the slowest rank of an MoE
    layer sets its time (the combine all-to-all waits for it), vectorized.

    ``tokens`` tokens enter one EP group's dispatch, each routed to ``top_k`` distinct experts of
    ``experts`` drawn uniformly (what Megatron-Core's ``moe_router_force_load_balancing`` does,
    random router logits; the Megatron-Bridge benchmark rows use it), the experts split evenly
    over ``ep`` ranks. A token's copies on one rank are hypergeometric, variance
    v = k (1/ep)(1 - 1/ep)(E - k)/(E - 1); tokens are independent, so a rank's copies have mean
    mu = N k / ep and variance N v, and sum to N k over the ranks (correlation -1/(ep - 1)). The
    expected maximum of such counts (normal limit) is mu + sqrt(N v ep / (ep - 1)) x
    :func:`expected_max_normal` (ep). A trained router with an auxiliary balance loss is less
    even than this: the factor is a lower bound there.
    """
    E, k = _f(experts), _f(top_k)
    ep = np.maximum(_f(ep), 1.0)
    n = np.maximum(_f(tokens), 1.0)
    v = k * (1.0 / ep) * (1.0 - 1.0 / ep) * np.maximum(E - k, 0.0) / np.maximum(E - 1.0, 1.0)
    mu = n * k / ep
    sd = np.sqrt(n * v * ep / np.maximum(ep - 1.0, 1.0))
    return np.where(ep > 1, 1.0 + expected_max_normal(ep) * sd / mu, 1.0)


# --- calibration against data/collectives.csv --------------------------------------------
#: Row ``use`` value "fit:<Topology field>" -> the algorithm the measurement ran.
_FIT_TARGETS = {"nvlink_eff": "ring", "nvls_eff": "in_network", "nic_eff": "ring"}


def calibration_points(path: Path | str = COLLECTIVES_CSV) -> list[dict]:
    """Rows of the published-measurements table (``data/collectives.csv``) as dicts."""
    path = Path(path)
    with path.open(encoding="utf-8", newline="") as fh:
        rows = list(csv.DictReader(fh))
    for i, row in enumerate(rows, start=2):
        for col in ("point_id", "hardware", "collective", "n_gpus", "gpus_per_domain", "metric",
                    "value_gb_s", "link_gb_s_per_dir", "use", "source", "verification"):
            if not (row.get(col) or "").strip():
                raise ValueError(f"{path.name}: row {i}: column {col!r} is empty")
    return rows


def _setting(row: dict, **fields) -> tuple[Topology, int]:
    """Topology (catalog GPU, the row's domain size) and group size of one measurement (the
    table's GPU id is looked up here, where the table comes in)."""
    topo = Topology.from_gpu(hardware.get(row["hardware"]), domain=int(row["gpus_per_domain"]),
                             nvls=row["algorithm"] == "nvls", **fields)
    return topo, int(row["n_gpus"])


def fit_calibration(path: Path | str = COLLECTIVES_CSV) -> dict[str, float]:
    """Efficiencies fitted to the ``fit:*`` rows of ``data/collectives.csv``.

    Each fit row is one large-message busbw measurement. With the efficiency set to 1 the model
    gives t1(m) = latency + w; the efficiency that reproduces the measured time
    t = m * bus_factor / busbw (NCCL busbw definition) is eff = w / (t - latency).
    """
    out: dict[str, float] = {}
    for row in calibration_points(path):
        use = row["use"].strip()
        if not use.startswith("fit:"):
            continue
        key = use.split(":", 1)[1]
        if key not in _FIT_TARGETS:
            raise ValueError(f"{Path(path).name}: point {row['point_id']}: unknown fit target {key!r}")
        algorithm = _FIT_TARGETS[key]
        op, m = row["collective"], float(row["message_bytes"])
        topo, n = _setting(row, **{key: 1.0})
        lat, per_byte = latency_bandwidth(op, n, topo, 1, algorithm)
        t_meas = m * float(bus_factor(op, n)) / (float(row["value_gb_s"]) * 1e9)
        out[key] = float(per_byte * m / (t_meas - lat))
    return out


def predict_point(row: dict, topo: Topology | None = None) -> float:
    """The model's value (GB/s) for one ``data/collectives.csv`` row, with calibrated defaults.

    metric busbw: NCCL bus bandwidth of the row's collective and algorithm; a2a_link_bw: bytes
    sent over the bottleneck link (NVLink when the group fits one domain, else the NIC) / time;
    link_bw: achieved bandwidth of that link at large messages.
    """
    if topo is None:
        topo, n = _setting(row)
    else:
        n = int(row["n_gpus"])
    op, metric = row["collective"], row["metric"]
    m = float(row["message_bytes"] or 2.0**30)
    if metric == "busbw":
        algorithm = "in_network" if row["algorithm"] == "nvls" else "ring"
        return float(predicted_busbw(op, m, n, topo, 1, algorithm)) / 1e9
    if metric == "a2a_link_bw":
        t = float(collective_time(op, m, n, topo))
        n_in, _ = placement(n, 1, topo.domain)
        remote = (n - n_in) if n_in < n else (n - 1)
        return float(remote / n * m / t) / 1e9
    if metric == "link_bw":
        return float(topo.nvlink_eff_bw if row["interconnect"].startswith("NVLink") else topo.nic_eff_bw) / 1e9
    raise ValueError(f"point {row['point_id']}: unknown metric {metric!r}")


def calibration_table(path: Path | str = COLLECTIVES_CSV) -> list[dict]:
    """Each published point with the model's prediction and the relative error."""
    out = []
    for row in calibration_points(path):
        pred = predict_point(row)
        meas = float(row["value_gb_s"])
        out.append({"point_id": row["point_id"], "hardware": row["hardware"],
                    "collective": row["collective"], "algorithm": row["algorithm"],
                    "n_gpus": int(row["n_gpus"]), "use": row["use"], "measured_gb_s": meas,
                    "predicted_gb_s": pred, "rel_error": pred / meas - 1.0,
                    "verification": row["verification"]})
    return out


# =========================================================================================
# Traffic per training step for a layout (vectorized over a LayoutArray)
# =========================================================================================
#: Parallel groups reported per step, in table order. tp: tensor parallel (attention, dense MLP,
#: shared experts); etp: expert tensor parallel (routed experts); cp: context parallel;
#: pp: pipeline; ep: expert parallel; dp: gradient reduction / distributed optimizer of the
#: non-expert parameters over dp*cp ranks (Megatron); edp: the same for expert parameters.
GROUPS = ("tp", "etp", "cp", "pp", "ep", "dp", "edp")
#: The ``layout.group_strides`` group each traffic group is placed as (the rest: its own name).
_PLACEMENT = {"dp": "dp_cp"}

#: ASSUMPTION: gradient-reduction bucket of Megatron-Core's DDP, max(40e6, 1e6 * dp) parameters
#: (megatron/core/distributed/distributed_data_parallel.py default bucket size; recalled, not
#: re-read). Sets the number of DP collectives (latency) and the last, unhidden bucket.
DP_BUCKET_PARAMS = 40_000_000
DP_BUCKET_PARAMS_PER_RANK = 1_000_000


@dataclass(frozen=True)
class WireFormat:
    """Bytes per element of each kind of traffic (ASSUMPTIONS, see :meth:`for_recipe`).

    act: TP/SP, CP and PP activations and activation gradients (bf16 in Megatron/TE: TP
    collectives and p2p run in the autocast dtype); grad: DP gradient reduce-scatter /
    all-reduce in the dtype of the main-gradient buffer, the recipe's ``grad_bytes`` (the same
    bytes ``memory`` stores; :data:`scaletax.inputs.recipes.GRAD_BYTES`, 16-bit): Megatron-Core DDP reduces
    its grad buffer in place (``grad_reduce_in_fp32`` makes both 4 B); param: distributed-optimizer
    parameter all-gather (bf16, or 1 B with FP8 parameters,
    Transformer Engine ``fp8_param_gather``); dispatch / combine: MoE all-to-all token payloads
    forward (DeepSeek-V3 Sec. 3.3: FP8 dispatch, BF16 combine); backward all-to-alls carry
    gradients at ``act`` bytes.
    """

    act: float = 2.0
    grad: float = recipes.GRAD_BYTES
    param: float = 2.0
    dispatch: float = 2.0
    combine: float = 2.0

    @classmethod
    def for_recipe(cls, precision: recipes.Recipe) -> "WireFormat":
        """Wire format of a training recipe (:mod:`scaletax.inputs.recipes`): parameter gathers and MoE
        dispatch in the recipe's ``wire_bytes`` (FP8 1 B; MX and FP4 recipes MXFP8), gradients
        in its main-gradient dtype (``grad_bytes``), activations 16-bit
        (ASSUMPTIONS stated in the registry)."""
        rec = recipes.check(precision)
        return cls(param=rec.wire_bytes, dispatch=rec.wire_bytes, grad=rec.grad_bytes)


@dataclass(frozen=True)
class GroupTraffic:
    """One parallel group's communication per GPU per training step (numpy arrays).

    count: collectives (or p2p transfers) per step; nvlink_bytes / nic_bytes: bytes each GPU
    sends per step over NVLink / its NIC (ring or direct algorithm wire bytes); seconds:
    communication time per step if nothing overlapped it; size, stride: the group's size and
    rank stride (:func:`scaletax.inputs.layout.group_strides`); domain: NVLink domain size.
    """

    count: np.ndarray
    nvlink_bytes: np.ndarray
    nic_bytes: np.ndarray
    seconds: np.ndarray
    size: np.ndarray
    stride: np.ndarray
    domain: np.ndarray

    @property
    def bytes(self) -> np.ndarray:
        """Bytes sent per GPU per step over both link types."""
        return self.nvlink_bytes + self.nic_bytes

    @property
    def per_domain(self) -> np.ndarray:
        """Members of the group that share one NVLink domain."""
        return placement(self.size, self.stride, self.domain)[0]

    @property
    def domains(self) -> np.ndarray:
        """NVLink domains the group spans."""
        return placement(self.size, self.stride, self.domain)[1]

    #: Fields that add up over layers and collectives (``map`` applies to these only).
    AMOUNTS = ("count", "nvlink_bytes", "nic_bytes", "seconds")
    _FIELDS = AMOUNTS + ("size", "stride", "domain")

    def __len__(self) -> int:
        shape = np.broadcast_shapes(*(np.shape(getattr(self, f)) for f in self._FIELDS))
        return int(shape[0]) if shape else 1

    def take(self, idx) -> "GroupTraffic":
        """The entries at ``idx`` (index array or boolean mask), every field as an array."""
        n = len(self)
        return GroupTraffic(**{f: _pick(getattr(self, f), n, idx) for f in self._FIELDS})

    def map(self, fn, *others: "GroupTraffic") -> "GroupTraffic":
        """``fn`` applied to each amount of this and ``others`` (same layouts); placement of this one."""
        return replace(self, **{f: fn(getattr(self, f), *(getattr(o, f) for o in others)) for f in self.AMOUNTS})

    @staticmethod
    def concat(parts: Sequence["GroupTraffic"], lengths: Sequence[int] | None = None) -> "GroupTraffic":
        """One ``GroupTraffic`` holding every entry of ``parts`` in order (``lengths``: their
        lengths when the caller knows them)."""
        lengths = [len(p) for p in parts] if lengths is None else lengths
        return GroupTraffic(**{f: _cat([getattr(p, f) for p in parts], lengths) for f in GroupTraffic._FIELDS})


def _pick(a, n: int, idx) -> np.ndarray:
    """``a`` broadcast to ``n`` entries, at ``idx``; a constant stays one broadcast value."""
    a = np.asarray(a)
    if a.ndim == 0 or a.strides == (0,):
        idx = np.asarray(idx)
        m = int(np.count_nonzero(idx)) if idx.dtype == bool else idx.size
        return np.broadcast_to(a.reshape(-1)[0] if a.ndim == 0 else a[0], (m,))
    return (a if a.shape == (n,) else np.broadcast_to(a, (n,)))[idx]


def _cat(arrays, lengths) -> np.ndarray:
    """Concatenate arrays broadcast to ``lengths``; equal constants stay one broadcast value."""
    arrays = [np.asarray(a) for a in arrays]
    n = sum(lengths)
    if all(a.ndim == 0 or a.strides == (0,) for a in arrays) and len({a.ravel()[0].item() for a in arrays}) == 1:
        return np.broadcast_to(arrays[0].ravel()[0], (n,))  # constant (e.g. no MoE traffic)
    return np.concatenate([a if a.shape == (k,) else np.broadcast_to(a, (k,)) for a, k in zip(arrays, lengths)])


@dataclass(frozen=True)
class StepComm:
    """Per-group traffic of one step for each layout, plus the pieces overlap needs.

    groups: {name: GroupTraffic} for :data:`GROUPS`; dp_grad_s / dp_param_s: DP (dense +
    expert) gradient-reduction and parameter-gather seconds; dp_bucket_s: the last bucket's
    reduction (never hidden); pp_hop_s: one activation transfer between stages (the pipeline fill
    and drain put 2(pp*vp - 1) of them on the critical path); layouts: the LayoutArray.
    """

    groups: dict[str, GroupTraffic]
    dp_grad_s: np.ndarray
    dp_param_s: np.ndarray
    dp_bucket_s: np.ndarray
    pp_hop_s: np.ndarray
    layouts: object

    @property
    def n_micro(self) -> np.ndarray:
        """Micro-batches per step on each data-parallel rank."""
        return _f(self.layouts.n_micro)

    @property
    def seconds(self) -> np.ndarray:
        """Total communication seconds per step, nothing overlapped."""
        return sum(g.seconds for g in self.groups.values())

    @property
    def bytes(self) -> np.ndarray:
        """Total bytes sent per GPU per step."""
        return sum(g.bytes for g in self.groups.values())

    @property
    def nic_bytes(self) -> np.ndarray:
        return sum(g.nic_bytes for g in self.groups.values())

    @property
    def nvlink_bytes(self) -> np.ndarray:
        return sum(g.nvlink_bytes for g in self.groups.values())

    _PATH = ("dp_grad_s", "dp_param_s", "dp_bucket_s", "pp_hop_s")

    def __len__(self) -> int:
        return len(self.layouts)

    def take(self, idx, layouts=None) -> "StepComm":
        """The entries at ``idx`` (index array or boolean mask). ``layouts``: the layouts of the
        result when the caller has them (same parallel sizes as this one's at ``idx``); the group
        placement is then computed from them instead of gathered."""
        n = len(self)
        if layouts is None:
            path = {f: _pick(getattr(self, f), n, idx) for f in self._PATH}
            return StepComm(groups={k: g.take(idx) for k, g in self.groups.items()}, layouts=self.layouts.take(idx),
                            **path)
        return self.gather(lambda a: _pick(a, n, idx), layouts)

    def gather(self, pick, layouts) -> "StepComm":
        """The entries ``pick`` selects (a function: one array of this -> the entries wanted, in
        the order of ``layouts``) of every amount, critical-path time and NVLink domain, for the
        ``layouts`` (same parallel sizes as the entries picked); the group placement is computed
        from them. ``take(idx, layouts)`` is ``gather`` of ``idx``; ``perf`` gathers the rows
        of a ``LayoutGrid``'s traffic."""
        from scaletax.inputs.layout import group_strides

        strides = group_strides(layouts)
        groups = {}
        for k, g in self.groups.items():
            size, stride = strides[_PLACEMENT.get(k, k)]
            amounts = {f: pick(getattr(g, f)) for f in GroupTraffic.AMOUNTS}
            groups[k] = GroupTraffic(size=size, stride=stride, domain=pick(g.domain), **amounts)
        return StepComm(groups=groups, layouts=layouts, **{f: pick(getattr(self, f)) for f in self._PATH})

    def map(self, fn, *others: "StepComm") -> "StepComm":
        """``fn`` applied to every amount (group traffic and critical-path seconds) of this and
        ``others`` (same layouts); placement and layouts of this one."""
        return replace(self, groups={k: g.map(fn, *(o.groups[k] for o in others)) for k, g in self.groups.items()},
                       **{f: fn(getattr(self, f), *(getattr(o, f) for o in others)) for f in self._PATH})

    @staticmethod
    def concat(parts: Sequence["StepComm"]) -> "StepComm":
        """One ``StepComm`` holding every entry of ``parts`` in order."""
        lengths = [len(p) for p in parts]
        return StepComm(groups={k: GroupTraffic.concat([p.groups[k] for p in parts], lengths) for k in parts[0].groups},
                        layouts=type(parts[0].layouts).concat([p.layouts for p in parts]),
                        **{f: _cat([getattr(p, f) for p in parts], lengths) for f in StepComm._PATH})


def _split(op, m, n, n_in, n_out):
    """(NVLink bytes, NIC bytes) per GPU for a placed group; see :func:`link_bytes`."""
    if op == "p2p":
        same = n_in >= 2
        return np.where(same, m, 0.0), np.where(same, 0.0, m)
    if op == "all_to_all":
        return (n_in - 1.0) / n * m, (n - n_in) / n * m
    k = 2.0 if op == "all_reduce" else 1.0
    return k * (n_in - 1.0) / n_in * m, k * (n_out - 1.0) / n_out * m / n_in


def link_bytes(op: str, nbytes, n, stride, domain):
    """(NVLink bytes, NIC bytes) each GPU sends in one ring / direct collective, bytes.

    Hierarchical split of :func:`wire_bytes` (module docstring): for all_reduce
    2(n_in-1)/n_in m on NVLink and 2(n_out-1)/n_out m/n_in on the NIC; reduce_scatter and
    all_gather half of that; all_to_all (n_in-1)/n m and (n-n_in)/n m; p2p m on one link.
    """
    _check_op(op)
    n, n_in, n_out = _placed(n, stride, domain)
    return _split(op, _f(nbytes), n, n_in, n_out)


def _ring_hop(m, n, n_in, lk: _Links):
    """One hop of a ring over a placed group: NVLink when the whole group is in one domain.

    Returns (seconds, nvlink_bytes, nic_bytes) of one hop of ``m`` bytes; a ring runs at the pace
    of its slowest hop, and a ring spanning domains has NIC hops.
    """
    inside = n_in >= n
    t = lk.a0 + np.where(inside, lk.av + m / lk.bv, lk.an + m / lk.bn)
    t = np.where((n > 1) & (m > 0), t, 0.0)
    return t, np.where(inside, m, 0.0), np.where(inside, 0.0, m)


def _model_terms(model, pp):
    """Per-stage layer and parameter counts of the heaviest pipeline stage (arrays over pp)."""
    n_moe = float(model.n_moe_layers)
    layers_stage = np.ceil(model.layers / pp)
    moe_stage = np.minimum(np.ceil(n_moe / pp), layers_stage)
    dense_stage = layers_stage - moe_stage
    moe_nonexpert = (model.attn_params + model.norm_params + model.router_params
                     + model.shared_expert_params)
    emb, out = float(model.embedding_params), float(model.output_params)
    edge = np.where(pp > 1, max(emb, out), emb + out)  # first or last stage holds one of them
    dense_params = dense_stage * model.dense_layer_params + moe_stage * moe_nonexpert + edge
    expert_params = moe_stage * model.moe_experts * model.expert_params
    return layers_stage, dense_stage, moe_stage, dense_params, expert_params


def _traffic(count, nv, nic, secs, size, stride, domain) -> GroupTraffic:
    arrays = [_f(a) for a in (count, nv, nic, secs)]
    shapes = {a.shape for a in arrays}
    shapes.add(np.shape(size))
    if len(shapes) == 1:  # all of one shape already (the common case): nothing to broadcast
        return GroupTraffic(*arrays, size, stride, domain)
    shape = np.broadcast_shapes(*shapes)
    return GroupTraffic(*(a if a.shape == shape else np.broadcast_to(a, shape) for a in arrays), size, stride, domain)


#: Layouts per block in :func:`step_traffic`: numpy temporaries of this size stay in cache,
#: which makes 1e6 layouts ~4x faster than one pass over full-length arrays.
CHUNK = 65_536

_TOPO_ARRAY_FIELDS = ("domain", "nvlink_bw", "nic_bw", "nvls", "ib_sharp", "nvlink_eff", "nvls_eff",
                      "nic_eff", "sharp_eff", "alpha_launch", "alpha_nvlink", "alpha_nic")


def step_traffic(model, layouts, topo: Topology, wire: WireFormat | None = None,
                 algorithm: str = "auto") -> StepComm:
    """Communication per GPU per training step for each layout (the heaviest pipeline stage).

    model: :class:`scaletax.inputs.models.Model`; layouts: :class:`scaletax.inputs.layout.LayoutArray` or
    :class:`~scaletax.inputs.layout.Layout`; topo: :class:`Topology` (fields may be arrays that
    broadcast against the layouts); wire: bytes per element (:class:`WireFormat`, default bf16).

    Per micro-batch of b sequences, each CP rank holds t = s*b/cp tokens. Per layer:
    - tp: 2 all-reduces forward and 2 backward of t*h activations (Shoeybi et al. 2019, Megatron-LM
      Sec. 3); with sequence parallelism each becomes a reduce-scatter + all-gather of the same
      bytes (Korthikanti et al. 2022, Sec. 4.2.2); full recompute repeats the forward ones
      (Korthikanti Table 2); selective recompute adds none. MoE layers keep the attention pair
      (and the shared-expert pair when there are shared experts).
    - ep: per MoE layer a dispatch and a combine all-to-all forward and both again backward, of
      (t/tp)*k*h elements per GPU (tokens are sequence-parallel sharded before dispatch;
      GShard / Megatron-Core alltoall dispatcher; DeepSeek-V3 Sec. 3.2.2), times the expected
      max / mean copies per EP rank (:func:`moe_rank_imbalance`: the slowest rank finishes last).
    - etp: with expert tensor parallelism an all-gather + reduce-scatter of the dispatched tokens
      (etp*(t/tp)*k*h elements) around the experts forward and backward.
    - cp: ring attention passes K and V chunks (t * kv_heads/tp * (d_qk + d_v)) around the cp
      ring, cp-1 hops forward, 2(cp-1) backward (K/V again and dK/dV) (Liu et al. 2023, Ring
      Attention; Megatron-Core context parallelism).
    - pp: per micro-batch each stage sends its output activation forward and its input gradient
      backward, t*h/tp elements each (scatter-gather across TP, Narayanan et al. 2021 Sec. 4.1),
      vp times with interleaving.
    - dp: once per step, reduce-scatter of gradients + all-gather of parameters (distributed
      optimizer / ZeRO-1,2, Rajbhandari et al. 2020) over the dp*cp group, or one all-reduce
      without it (zero_stage 0); ZeRO-3 gathers parameters forward and backward and
      reduce-scatters gradients every micro-batch (Rajbhandari et al. 2020 Sec. 7.2.2). Expert
      parameters do the same over the expert-data-parallel group (edp). Gradients go in buckets
      (:data:`DP_BUCKET_PARAMS`).
    Not counted: vocabulary-parallel loss and embedding collectives, tied-embedding gradient
    all-reduce, MoE router auxiliary statistics (all small).

    Runs in blocks of :data:`CHUNK` layouts when the topology's fields are scalars or arrays of
    the same length as the layouts (other broadcast shapes run in one pass). ``layouts`` may be a
    :class:`scaletax.inputs.layout.LayoutGrid` (scalar topology): every array of the result then has a
    shape that broadcasts to the grid's, each term computed once per base layout and the ZeRO
    stage or recompute mode it depends on (``perf`` gathers the rows it needs).
    """
    from scaletax.inputs.layout import Layout, LayoutArray, LayoutGrid

    if isinstance(layouts, Layout):
        layouts = LayoutArray.from_layouts([layouts])
    n = len(layouts)
    shapes = [np.shape(getattr(topo, f)) for f in _TOPO_ARRAY_FIELDS]
    if isinstance(layouts, LayoutGrid):  # broadcast arrays: each term once per value it depends on
        if not all(sh == () for sh in shapes):
            raise ValueError("step_traffic: a LayoutGrid needs a topology of scalars")
        return _step_traffic(model, layouts, topo, wire, algorithm)
    if n <= CHUNK or not all(sh in ((), (n,)) for sh in shapes):
        return _step_traffic(model, layouts, topo, wire, algorithm)
    parts = []
    for start in range(0, n, CHUNK):
        idx = np.arange(start, min(start + CHUNK, n))
        sub = topo.replace(**{f: getattr(topo, f)[idx] for f, sh in zip(_TOPO_ARRAY_FIELDS, shapes) if sh == (n,)})
        parts.append(_step_traffic(model, layouts[idx], sub, wire, algorithm))
    return replace(StepComm.concat(parts), layouts=layouts)


def _step_traffic(model, layouts, topo: Topology, wire: WireFormat | None = None,
                  algorithm: str = "auto") -> StepComm:
    """One block of :func:`step_traffic`."""
    from scaletax.inputs.layout import Layout, LayoutArray, group_strides

    if isinstance(layouts, Layout):
        layouts = LayoutArray.from_layouts([layouts])
    if algorithm not in ALGORITHMS:
        raise ValueError(f"unknown algorithm {algorithm!r}; valid: {', '.join(ALGORITHMS)}")
    wire = WireFormat() if wire is None else wire
    lk = _Links.of(topo)
    tp, pp, cp, ep, etp, vp = (_f(getattr(layouts, f)) for f in ("tp", "pp", "cp", "ep", "etp", "vp"))
    sp, zero = layouts.sp.astype(bool), layouts.zero_stage
    full = layouts.recompute == 2
    n_micro = _f(layouts.n_micro)
    strides = group_strides(layouts)
    place = {g: _placed(size, stride, lk.domain) + (_f(stride),) for g, (size, stride) in strides.items()}
    layers_stage, dense_stage, moe_stage, dense_params, expert_params = _model_terms(model, pp)
    h = float(model.hidden)
    tokens = model.seq_len * _f(layouts.mbs) / cp  # per CP rank per micro-batch
    groups: dict[str, GroupTraffic] = {}

    def _collectives(name, ops):
        n, n_in, n_out, stride = place[name]
        nv = nic = secs = cnt = 0.0
        for op, count, m in ops:
            secs = secs + count * _time(op, m, n, n_in, n_out, lk, algorithm)
            b_nv, b_nic = _split(op, m, n, n_in, n_out)
            nv, nic = nv + count * b_nv, nic + count * b_nic
            cnt = cnt + np.where(n > 1, count, 0.0)
        return _traffic(cnt, nv, nic, secs, *strides[name], lk.domain)

    def _ring(name, count, m):
        n, n_in, _, stride = place[name]
        t, b_nv, b_nic = _ring_hop(m, n, n_in, lk)
        return _traffic(np.where(n > 1, count, 0.0), count * b_nv, count * b_nic, count * t,
                        *strides[name], lk.domain), t

    # --- tensor parallel: collective pairs (RS+AG, or one AR) per layer and micro-batch --------
    # dense layer: attention + MLP = 2 forward, 2 backward (+2 forward again with full recompute)
    pairs_dense = np.where(full, 6.0, 4.0)
    pairs_moe = pairs_dense / 2 * (1.0 + (model.moe_shared_experts > 0))
    pairs = (dense_stage * pairs_dense + moe_stage * pairs_moe) * n_micro
    m_tp = tokens * h * wire.act
    groups["tp"] = _collectives("tp", [("reduce_scatter", np.where(sp, pairs, 0.0), m_tp),
                                       ("all_gather", np.where(sp, pairs, 0.0), m_tp),
                                       ("all_reduce", np.where(sp, 0.0, pairs), m_tp)])

    # --- expert parallel and expert tensor parallel (MoE layers only) -----------------------
    if model.is_moe:
        # elements the slowest EP rank receives per layer and micro-batch: tokens are sequence-
        # parallel sharded before dispatch (t / tp per GPU), k copies each, times the rank imbalance
        imb = moe_rank_imbalance(model.moe_experts, model.moe_top_k, ep, ep * etp * tokens / tp)
        routed = tokens / tp * model.moe_top_k * h * imb
        fwd_a2a = moe_stage * n_micro * np.where(full, 2.0, 1.0)
        bwd_a2a = moe_stage * n_micro * 2.0
        groups["ep"] = _collectives("ep", [("all_to_all", fwd_a2a, routed * wire.dispatch),
                                           ("all_to_all", fwd_a2a, routed * wire.combine),
                                           ("all_to_all", bwd_a2a, routed * wire.act)])
        m_etp = etp * routed * wire.act
        etp_pairs = moe_stage * n_micro * np.where(full, 3.0, 2.0)
        groups["etp"] = _collectives("etp", [("reduce_scatter", etp_pairs, m_etp),
                                             ("all_gather", etp_pairs, m_etp)])
    else:
        for name in ("ep", "etp"):
            groups[name] = _collectives(name, [])

    # --- context parallel: ring exchange of K/V chunks ------------------------------------------
    kv_width = model.kv_heads * (model.qk_head_dim + model.v_head_dim_eff)
    chunk = tokens * kv_width / tp * wire.act
    hops = layers_stage * n_micro * (cp - 1.0) * np.where(full, 4.0, 3.0)
    groups["cp"], _ = _ring("cp", hops, chunk)

    # --- pipeline parallel: activations forward, gradients backward ---------------------------
    sends = n_micro * vp * 2.0 * (pp > 1)
    groups["pp"], t_pp = _ring("pp", sends, tokens * h / tp * wire.act)

    # --- data parallel (dense over dp*cp ranks, experts over edp) -----------------------------
    dp_parts = {}
    z0, z3 = zero == 0, zero == 3
    for name, key, params in (("dp", "dp_cp", dense_params / tp), ("edp", "edp", expert_params / (ep * etp))):
        n, n_in, n_out, stride = place[key]
        bucket = np.maximum(DP_BUCKET_PARAMS, DP_BUCKET_PARAMS_PER_RANK * n)
        n_buckets = np.where(params > 0, np.maximum(np.ceil(params / bucket), 1.0), 0.0)
        per_bucket = params / np.maximum(n_buckets, 1.0)
        g_msg, p_msg = per_bucket * wire.grad, per_bucket * wire.param
        t_grad = np.where(z0, _time("all_reduce", g_msg, n, n_in, n_out, lk, algorithm),
                          _time("reduce_scatter", g_msg, n, n_in, n_out, lk, algorithm))
        t_ag = _time("all_gather", p_msg, n, n_in, n_out, lk, algorithm)
        nv_g, nic_g = _split("reduce_scatter", g_msg, n, n_in, n_out)
        nv_ag, nic_ag = _split("all_gather", p_msg, n, n_in, n_out)
        reps_rs = np.where(z3, n_micro, 1.0) * n_buckets       # gradient reductions per step
        reps_ag = np.where(z0, 0.0, np.where(z3, 2.0 * n_micro, 1.0) * n_buckets)  # gathers
        k_grad = np.where(z0, 2.0, 1.0)  # an all-reduce moves twice a reduce-scatter's bytes
        grad_s, param_s = t_grad * reps_rs, t_ag * reps_ag
        groups[name] = _traffic(np.where(n > 1, reps_rs + reps_ag, 0.0),
                                k_grad * nv_g * reps_rs + nv_ag * reps_ag,
                                k_grad * nic_g * reps_rs + nic_ag * reps_ag, grad_s + param_s,
                                *strides[key], lk.domain)
        dp_parts[name] = (grad_s, param_s, t_grad)

    return StepComm(
        groups={g: groups[g] for g in GROUPS},
        dp_grad_s=dp_parts["dp"][0] + dp_parts["edp"][0],
        dp_param_s=dp_parts["dp"][1] + dp_parts["edp"][1],
        dp_bucket_s=np.maximum(dp_parts["dp"][2], dp_parts["edp"][2]),
        pp_hop_s=t_pp,
        layouts=layouts,
    )


# =========================================================================================
# Overlap: which communication hides behind which compute
# =========================================================================================
@dataclass(frozen=True)
class Overlap:
    """Fraction of each group's communication that the schedule can run under compute.

    A group hides ``min(fraction * t_comm, window)`` seconds; windows are stated per group in
    :func:`exposed_comm`. Every default is an ASSUMPTION (no measurement in data/ fits it):

    tp = 0.5   TP/SP collectives overlapped with the GEMMs they feed by chunked pipelining
               (Transformer Engine userbuffers, ``tp_comm_overlap``; Wang et al. 2023, ASPLOS,
               "Overlap communication with dependent computation via decomposition"): half.
    etp = 0.5  the same for expert tensor parallelism.
    cp = 1.0   Megatron-Core's ring attention overlaps each K/V hop with the attention of the
               chunk already present; assumed fully hidden when compute is long enough.
    ep = 0.5   MoE all-to-all overlapped with another micro-batch's compute when the schedule
               is not stated (the midpoint of Megatron-Core's two modes); a stated schedule
               sets it instead (:data:`SCHEDULE_EP_OVERLAP`).
    pp = 1.0   p2p sends between stages overlap other micro-batches' compute in 1F1B, except
               the pipeline fill and drain, 2(pp*vp - 1) hops, which stay exposed.
    dp = 1.0   Megatron ``overlap_grad_reduce`` / ``overlap_param_gather``: gradient buckets
               reduce during the last micro-batch's backward, parameters gather during the first
               micro-batch's forward; the last bucket is always exposed.
    fwd_share = 1/3  forward share of a micro-batch's compute (backward = 2x forward FLOPs,
               Narayanan et al. 2021 Sec. 3.5), used to size the DP windows.
    """

    tp: float = 0.5
    etp: float = 0.5
    cp: float = 1.0
    ep: float = 0.5
    pp: float = 1.0
    dp: float = 1.0
    fwd_share: float = 1.0 / 3.0

    def __post_init__(self) -> None:
        for f in ("tp", "etp", "cp", "ep", "pp", "dp", "fwd_share"):
            v = getattr(self, f)
            if not 0.0 <= v <= 1.0:
                raise ValueError(f"Overlap.{f} must be in [0, 1] (got {v!r})")

    @classmethod
    def none(cls) -> "Overlap":
        """Nothing overlapped: exposed communication = all communication."""
        return cls(tp=0.0, etp=0.0, cp=0.0, ep=0.0, pp=0.0, dp=0.0)


@dataclass(frozen=True)
class ExposedComm:
    """Exposed (not hidden) communication seconds per step: per group and total (arrays)."""

    groups: dict[str, np.ndarray]
    hidden: dict[str, np.ndarray]

    @property
    def seconds(self) -> np.ndarray:
        return sum(self.groups.values())


#: Training schedules a row or layout may state (runs column ``schedule``) and the share of the
#: MoE all-to-all each can run under compute (the EP base fraction, before ``overlap_scale``):
#: "1f1b": Megatron-Core's default (1F1B, with or without interleaving): the token dispatcher
#:     runs its all-to-alls on the compute stream, in line (``overlap_moe_expert_parallel_comm``
#:     False in ``TransformerConfig``): nothing hidden.
#: "ep_overlap": Megatron-Core's ``overlap_moe_expert_parallel_comm``: the forward of one
#:     micro-batch and the backward of another are merged layer by layer, so each all-to-all
#:     runs under the other micro-batch's compute (DualPipe's pairing within one stage): all of it
#:     can hide, capped by the compute.
#: "dualpipe": DeepSeek-V3's DualPipe (arXiv 2412.19437 §3.2.1: "both all-to-all and PP
#:     communication can be fully hidden"): all of it can hide, capped by the compute.
#: "unknown": :class:`Overlap`'s default ``ep`` (0.5, ASSUMPTION: the midpoint of the two modes).
SCHEDULE_EP_OVERLAP: dict[str, float] = {"unknown": Overlap.ep, "1f1b": 0.0, "ep_overlap": 1.0, "dualpipe": 1.0}

#: Software stacks a row may state (runs column ``stack``) and the share of the TP/SP collectives
#: each can run under compute (the TP base fraction, before ``overlap_scale``):
#: "megatron": :class:`Overlap`'s default ``tp`` (Transformer Engine userbuffers ``tp_comm_overlap``);
#: "fsdp": PyTorch FSDP2 stacks (TorchTitan, llm-foundry): nothing hidden. TorchTitan 0.3.0
#:     runs TP as DTensor collectives in line with the matmuls unless async TP is enabled, and
#:     ``CompileConfig.enable_async_tensor_parallel: bool = False`` (torchtitan/config/configs.py:295;
#:     it also needs torch.compile, configs.py:304-310). Structural, not fitted: no FSDP-stack row
#:     with a measurement is in data/.
STACK_TP_OVERLAP: dict[str, float] = {"megatron": Overlap.tp, "fsdp": 0.0}


def stack_tp_overlap(stack: str) -> float:
    """The TP base overlap fraction of a software stack (:data:`STACK_TP_OVERLAP`)."""
    try:
        return STACK_TP_OVERLAP[stack]
    except KeyError:
        raise ValueError(f"stack: must be one of {', '.join(STACKS)} (got {stack!r})") from None


def stack_wire(wire: WireFormat, stack: str) -> WireFormat:
    """``wire`` as a software stack sends it: "fsdp" reduce-scatters gradients in fp32 and
    all-gathers parameters in bf16 (``recipes.FSDP_GRAD_BYTES``: TorchTitan's
    ``mixed_precision_reduce`` / ``mixed_precision_param``; TorchTitan 0.3.0 has no FP8
    all-gather option, torchtitan/components/quantization/float8.py); "megatron": unchanged."""
    stack_tp_overlap(stack)
    if stack == "fsdp":
        return replace(wire, grad=recipes.FSDP_GRAD_BYTES, param=recipes.HALF_BYTES)
    return wire


def schedule_ep_overlap(schedule: str) -> float:
    """The EP base overlap fraction of a schedule (:data:`SCHEDULE_EP_OVERLAP`)."""
    try:
        return SCHEDULE_EP_OVERLAP[schedule]
    except KeyError:
        raise ValueError(f"schedule: must be one of {', '.join(SCHEDULES)} (got {schedule!r})") from None


def exposed_comm(step: StepComm, t_compute, overlap: Overlap | None = None,
                 windows: dict | None = None, fractions: dict | None = None) -> ExposedComm:
    """Communication time per step that compute does not hide, seconds per group and in total.

    t_compute: compute seconds per step per GPU (array broadcasting against the layouts; no
    pipeline bubble). ``windows``: optional per-group compute that can hide it, capped at
    t_compute (``perf`` passes the attention time for "cp": a ring hop hides only under the
    attention of the chunk already present, Liu et al. 2023, Ring Attention, arXiv 2310.01889).
    ``fractions``: optional per-group fractions (arrays, clipped to [0, 1]) in place of
    ``overlap``'s for tp, etp, cp, ep (``perf`` passes the EP fraction of each layout's schedule,
    :data:`SCHEDULE_EP_OVERLAP`). For each group g with time t_g and fraction f_g (:class:`Overlap`):
        hidden_g = min(f_g * t_g, window_g),  exposed_g = t_g - hidden_g
    windows: tp, etp, cp, ep: t_compute; pp: t_compute, and the 2(pp*vp-1) fill/drain hops are
    never hidden; dp: the gradient reduction hides in the last micro-batch's backward,
    (1 - fwd_share) * t_compute / n_micro, the parameter gather in the first micro-batch's
    forward, fwd_share * t_compute / n_micro (ZeRO-3: whole t_compute), one bucket never hidden.
    The groups share one compute stream: when the hidden times add up to more than t_compute
    they are scaled down together so that total hidden <= t_compute.
    """
    ov = Overlap() if overlap is None else overlap
    tc = np.maximum(_f(t_compute), 0.0)
    g = step.groups
    win = dict(windows or {})
    hidden: dict[str, np.ndarray] = {}
    frac = dict(fractions or {})
    for name in ("tp", "etp", "cp", "ep"):
        w = np.minimum(np.maximum(_f(win[name]), 0.0), tc) if name in win else tc
        f = np.clip(_f(frac[name]), 0.0, 1.0) if name in frac else getattr(ov, name)
        hidden[name] = np.minimum(f * g[name].seconds, w)
    lay = step.layouts
    fill = 2.0 * np.maximum(_f(lay.pp) * lay.vp - 1.0, 0.0) * step.pp_hop_s
    pp_hideable = np.maximum(g["pp"].seconds - fill, 0.0)
    hidden["pp"] = np.minimum(ov.pp * pp_hideable, tc)
    per_micro = tc / np.maximum(step.n_micro, 1.0)
    z3 = lay.zero_stage == 3
    win_grad = np.where(z3, tc, (1.0 - ov.fwd_share) * per_micro)
    win_param = np.where(z3, tc, ov.fwd_share * per_micro)
    grad_hideable = np.maximum(step.dp_grad_s - step.dp_bucket_s, 0.0)
    dp_hidden = (np.minimum(ov.dp * grad_hideable, win_grad)
                 + np.minimum(ov.dp * step.dp_param_s, win_param))
    dp_total = g["dp"].seconds + g["edp"].seconds
    share_dp = np.divide(g["dp"].seconds, dp_total, out=np.ones_like(dp_total), where=dp_total > 0)
    hidden["dp"] = dp_hidden * share_dp
    hidden["edp"] = dp_hidden * (1.0 - share_dp)
    total_hidden = sum(hidden.values())
    scale = np.divide(tc, total_hidden, out=np.ones_like(total_hidden), where=total_hidden > tc)
    scale = np.minimum(scale, 1.0)
    hidden = {k: v * scale for k, v in hidden.items()}
    exposed = {k: np.maximum(g[k].seconds - hidden[k], 0.0) for k in GROUPS}
    return ExposedComm(groups=exposed, hidden={k: hidden[k] for k in GROUPS})


def exposed_time(model, layouts, topo: Topology, t_compute, overlap: Overlap | None = None,
                 wire: WireFormat | None = None) -> np.ndarray:
    """Exposed communication seconds per step for each layout (the step-time model's input)."""
    return exposed_comm(step_traffic(model, layouts, topo, wire), t_compute, overlap).seconds
