"""Chapter builders: one module per notebook in `notebooks/`.

Rows, headline numbers and the few sentences that branch on data. The only package that knows
specific GPU ids or writes English; it imports the model, never `report`."""
