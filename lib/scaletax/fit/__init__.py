"""Fit: the model's free parameters fitted to published runs (``calibrate``, which writes
``data/efficiency.yaml``) and its accuracy measured on them (``validate``, which only compares).
Imports the model and inputs layers and the top-level utilities (``tests/test_architecture.py``).
"""
