"""The store's named SQL blocks, one file per store module; read by app.store.queries."""
