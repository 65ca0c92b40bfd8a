"""Rendering: the Altair chart theme and HTML + PNG renderer (`charts`), book tables (`tables`).

Imported by the chapter notebooks and `report`; imports only the model and inputs layers."""
