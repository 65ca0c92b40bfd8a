"""Model: physics and arithmetic in SI units, vectorized numpy.

Memory per GPU (``memory``), the network (``topology``), collectives (``comm``), the calibrated
efficiency parameters (``efficiency``) and the step time (``perf``), the one layout search
(``search``), days and cost (``cost``), runs-table rows as model inputs (``runplan``), and the
quantizers of the precision experiment (``precision``, ``precision_kernels``, ``lowp_training``).
Imports only the inputs layer and the top-level utilities (``tests/test_architecture.py``).
"""
