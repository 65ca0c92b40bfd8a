"""Saturating RNE in float32 arithmetic against the saturating table, on all 2^32 float32 inputs.

``scaletax.model.precision`` rounds to the 8-bit-or-narrower element types with saturation by float32
arithmetic (``precision_kernels._rne_saturate``); the table (``precision._rne_table``: ml_dtypes'
cast after the clip, tabulated) stays the reference, and the test suite checks the two on every
class the table tells apart. This script checks every bit pattern, format by format (about a
minute each on one core):

    .venv/bin/python benchmarks/rne_exhaustive.py [format ...]

It prints the number of inputs whose bits differ (0 expected) and exits 1 if any do.
"""
from __future__ import annotations

import sys
import time

import numpy as np

from scaletax.model import precision as P

CHUNK = 1 << 24


def mismatches(fmt: str) -> int:
    table, shift = P._RNE_TABLES[fmt, True]
    low = np.uint32((1 << shift) - 1)
    bad = 0
    for start in range(0, 1 << 32, CHUNK):
        b = np.arange(start, start + CHUNK, dtype=np.uint64).astype(np.uint32)
        ref = table[((b >> np.uint32(shift)) << np.uint32(1)) | ((b & low) != 0)]
        got = P.quantize(b.view(np.float32), fmt)
        bad += int(np.count_nonzero(got.view(np.uint32) != ref.view(np.uint32)))
    return bad


def main(formats: list[str]) -> int:
    failed = False
    for fmt in formats:
        t = time.perf_counter()
        n = mismatches(fmt)
        failed |= n > 0
        print(f"{fmt}: {n} of 2^32 inputs differ ({time.perf_counter() - t:.0f} s)", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:] or ["fp8_e4m3", "fp8_e5m2", "fp6_e3m2", "fp6_e2m3", "fp4_e2m1"]))
