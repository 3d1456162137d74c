"""`python -m app.cli`: the subprocesses the supervisor, the tests and the benches start."""

from app.cli import run

run()
