"""Scenario schema, papermill runner, book assembly, provenance and CLI.

The only part of scaletax that imports papermill or Jupyter Book; the inputs, model and fit layers never
import from here.
"""
