"""`python -m app.cli`: the subprocesses the supervisor, the tests and the benches start."""

import sys

from app.cli import main

sys.exit(main())
