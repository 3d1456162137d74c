"""The SQL the package runs, shipped as package data: `sql.queries` (the store's named blocks)
and `sql.reporting` (the analysts' views). Code reads it through importlib.resources."""
