"""Two-level network topology: an NVLink domain of D GPUs and a rail-optimized scale-out fabric.

Every GPU has ``nvlink_bw`` bytes/s (one direction) into its NVLink domain (an NVSwitch node of 8
or an NVL72 rack) and ``nic_bw`` bytes/s (one direction) through its own NIC into the scale-out
fabric. "Rail-optimized" means GPU i of every domain sits on the same leaf switch (rail i), so the
inter-domain phase of a hierarchical collective runs on every GPU's own NIC in parallel.

A :class:`Topology` may hold numpy arrays in any field (e.g. ``domain=np.array([8, 72])``); the
collective formulas in :mod:`scaletax.model.comm` broadcast over them.

Placement (:func:`placement`) follows the layout's rank order: a group of ``n`` GPUs whose
members are ``stride`` ranks apart (stride = product of the sizes of the inner parallel
dimensions) has ``n_in`` members in each NVLink domain and spans ``n_out`` domains.

Efficiencies and latencies below are module constants, each marked as CALIBRATED (fitted to a
row of ``data/collectives.csv`` by :func:`scaletax.model.comm.fit_calibration` and written into
``data/efficiency.yaml`` by :mod:`scaletax.fit.calibrate`, read from there; a test checks the file
against the fit) or ASSUMPTION (a stated modelling choice with no fitted measurement).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from scaletax.inputs import hardware
from scaletax.inputs.layout import members_per_domain

# --- achieved-bandwidth efficiencies (fraction of the per-direction link rate) -------------
#: The CALIBRATED efficiencies live in ``data/efficiency.yaml`` (section ``collectives``), written by
#: ``scaletax.fit.calibrate`` from ``comm.fit_calibration`` on ``data/collectives.csv``; read once here.
def _calibrated_collectives() -> dict[str, float]:
    import yaml

    from scaletax import DATA_DIR

    path = DATA_DIR / "efficiency.yaml"
    try:
        sec = (yaml.safe_load(path.read_text(encoding="utf-8")) or {}).get("collectives") or {}
        return {k: float(sec[k]["value"]) for k in ("nvlink_eff", "nvls_eff", "nic_eff")}
    except (OSError, KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ValueError(f"{path.name}: section 'collectives' (nvlink_eff, nvls_eff, nic_eff) missing or bad "
                         f"({exc!r}); regenerate with: python -m scaletax.fit.calibrate") from None


_COLL = _calibrated_collectives()
#: CALIBRATED: ring collectives over NVLink (row h100_nvlink_allreduce_ring: NCCL all-reduce busbw
#: ~370 of 450 GB/s on 8x H100).
NVLINK_EFF = _COLL["nvlink_eff"]
#: CALIBRATED: NVLS (NVLink SHARP) all-reduce charged m / (nvlink_bw * NVLS_EFF)
#: (row h100_nvlink_allreduce_nvls: ~480 GB/s busbw on 8x H100 with NVLS; unverified row).
NVLS_EFF = _COLL["nvls_eff"]
#: CALIBRATED: collectives over the scale-out NIC (row ndr_ib_allreduce_internode: 40-46 GB/s per
#: 400 Gb/s NDR NIC, midpoint 43).
NIC_EFF = _COLL["nic_eff"]
#: ASSUMPTION: in-network reduction on the scale-out fabric (InfiniBand SHARP) sustains the same
#: fraction of the NIC rate as ring traffic; no published measurement is in data/collectives.csv.
SHARP_EFF = NIC_EFF

# --- latencies (alpha terms), seconds ---------------------------------------------------------
#: ASSUMPTION: fixed cost of launching one collective (kernel launch + NCCL setup), 8 us: the
#: order of NCCL's own cost-model base latencies (src/graph/tuning.cc, baseLat ~6.6-8.4 us;
#: recalled, not re-read). Not fitted: no cited small-message measurement is in the data.
ALPHA_LAUNCH = 8e-6
#: ASSUMPTION: per algorithm step over NVLink, 1 us (NCCL tuning.cc hwLat for NVLink is
#: ~0.6-3.4 us per step depending on protocol; recalled, not re-read).
ALPHA_NVLINK = 1e-6
#: ASSUMPTION: per algorithm step over the scale-out fabric, 10 us (NCCL tuning.cc hwLat for
#: the network is ~2.7-14 us per step depending on protocol; recalled, not re-read).
ALPHA_NIC = 10e-6

#: ASSUMPTION: which GPU families have NVLink SHARP (NVLS) in their NVSwitch: third-generation
#: NVSwitch (Hopper) and later do; A100's NVSwitch does not.
NVLS_FAMILIES = frozenset({"hopper", "blackwell", "blackwell_ultra", "rubin"})
#: ASSUMPTION: scale-out in-network reduction (IB SHARP) is off by default: many training fabrics
#: are RoCE or do not enable it (the Llama 3 cluster was RoCE, arXiv 2407.21783 Sec. 3.3).
IB_SHARP_DEFAULT = False


@dataclass(frozen=True)
class Topology:
    """A two-level system. Units: bytes/s (decimal, one direction, per GPU) and seconds.

    Any field may be a numpy array; formulas broadcast over them.

    domain        GPUs per NVLink domain (8 for HGX/DGX, 72 for NVL72)
    nvlink_bw     NVLink link rate per GPU, one direction, B/s
    nic_bw        scale-out NIC rate per GPU, one direction, B/s
    nvls          NVLink SHARP (in-switch reduction) available in the domain
    ib_sharp      in-network reduction available on the scale-out fabric
    *_eff         achieved fraction of the link rate at large messages
    alpha_*       latency: per collective (launch) and per algorithm step (nvlink, nic)
    """

    domain: Any
    nvlink_bw: Any
    nic_bw: Any
    nvls: Any = False
    ib_sharp: Any = IB_SHARP_DEFAULT
    nvlink_eff: Any = NVLINK_EFF
    nvls_eff: Any = NVLS_EFF
    nic_eff: Any = NIC_EFF
    sharp_eff: Any = SHARP_EFF
    alpha_launch: Any = ALPHA_LAUNCH
    alpha_nvlink: Any = ALPHA_NVLINK
    alpha_nic: Any = ALPHA_NIC
    name: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        for f in ("domain", "nvlink_bw", "nic_bw", "nvlink_eff", "nvls_eff", "nic_eff", "sharp_eff"):
            if np.any(np.asarray(getattr(self, f), dtype=float) <= 0):
                raise ValueError(f"Topology.{f} must be > 0 (got {getattr(self, f)!r})")
        for f in ("alpha_launch", "alpha_nvlink", "alpha_nic"):
            if np.any(np.asarray(getattr(self, f), dtype=float) < 0):
                raise ValueError(f"Topology.{f} must be >= 0 (got {getattr(self, f)!r})")
        for f in ("nvlink_eff", "nvls_eff", "nic_eff", "sharp_eff"):
            if np.any(np.asarray(getattr(self, f), dtype=float) > 1.5):
                raise ValueError(f"Topology.{f} is a fraction of the link rate (got {getattr(self, f)!r})")

    @classmethod
    def from_gpu(cls, gpu, *, domain=None, nvls=None, ib_sharp=IB_SHARP_DEFAULT, **overrides) -> "Topology":
        """Build from a :class:`scaletax.inputs.hardware.GPU`.

        ``domain`` overrides the catalog NVLink domain (e.g. to sweep 8..144 at fixed GPU count);
        ``nvls`` defaults to whether the GPU family has NVLink SHARP (:data:`NVLS_FAMILIES`).
        Other keyword arguments override any field (efficiencies, latencies).
        """
        hardware.check(gpu)
        return cls(
            domain=gpu.nvlink_domain if domain is None else domain,
            nvlink_bw=gpu.nvlink_bw,
            nic_bw=gpu.nic_bw,
            nvls=(gpu.family in NVLS_FAMILIES) if nvls is None else nvls,
            ib_sharp=ib_sharp,
            name=gpu.id,
            **overrides,
        )

    def replace(self, **changes) -> "Topology":
        """A copy with some fields changed (``dataclasses.replace``)."""
        return replace(self, **changes)

    # effective (achieved, large-message) bandwidths, B/s
    @property
    def nvlink_eff_bw(self):
        """Achieved NVLink bandwidth per GPU per direction for ring/direct traffic, B/s."""
        return np.asarray(self.nvlink_bw, dtype=float) * self.nvlink_eff

    @property
    def nic_eff_bw(self):
        """Achieved NIC bandwidth per GPU per direction, B/s."""
        return np.asarray(self.nic_bw, dtype=float) * self.nic_eff


def placement(n, stride, domain):
    """GPUs of a group per NVLink domain and domains spanned, as integer arrays.

    A group of ``n`` GPUs whose members are ``stride`` ranks apart (stride = product of the sizes
    of the parallel dimensions inside it in the rank order) packs
    ``n_in = clamp(domain // stride, 1, n)`` members into each domain when ``stride < domain``
    (else 1) and spans ``n_out = ceil(n / n_in)`` domains. Assumes groups are aligned to domain
    boundaries (the launcher pads the rank order so that no inner group straddles two domains).
    """
    n = np.asarray(n, dtype=np.int64)
    stride = np.asarray(stride, dtype=np.int64)
    domain = np.asarray(domain, dtype=np.int64)
    if (n < 1).any() or (stride < 1).any() or (domain < 1).any():
        raise ValueError("placement: n, stride and domain must be >= 1")
    n_in = np.maximum(members_per_domain(n, stride, domain), 1).astype(np.int64)
    n_out = -(-n // n_in)
    return n_in, n_out
