"""Inputs: the facts and choices the model runs on, read and checked once.

The GPU catalog (``hardware``), architectures (``models``), number formats (``formats``) and
training-precision recipes (``recipes``), parallel layouts (``layout``) and the named run options
beside them (``options``), the runs-table schema and its IO (``runs``), and the published values
the book quotes (``references``). Imports nothing from the model, fit, chapters, render or
report layers (``tests/test_architecture.py``).
"""
