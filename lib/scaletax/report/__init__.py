"""Scenario schema, papermill runner, book assembly, provenance and CLI.

The only part of scaletax that imports papermill or Jupyter Book; model modules never
import from here.
"""
