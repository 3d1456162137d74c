"""Data generation for the `pgcontroller dev` commands, the benches and the tests: generated
stream histories (`history_gen.py`), written straight into the tables (`seed.py`,
`long_history.py`). Never imported by the serving path (an import-linter contract holds this)."""
