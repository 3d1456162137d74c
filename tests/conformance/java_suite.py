"""Runs the Java conformance suite (`java/`) against a controller and, when given, against
Pravega (the oracle), as the tests and an operator do: `python -m tests.conformance.java_suite
--controller tcp://host:9090 [--oracle tcp://...]` builds the suite and passes every option on."""

from __future__ import annotations

import asyncio
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from tests.conformance.maven import SUITE, classpath

REPOSITORY = SUITE.parents[2]
COMPATIBILITY = REPOSITORY / "docs" / "compatibility.md"
SUMMARY = re.compile(
    r"^java conformance: \d+ passed, \d+ failed, \d+ differ from Pravega \(listed\)$", re.MULTILINE
)
# Where each run's summary line goes, for the suite's closing summary (tests/conftest.py).
SUMMARIES = SUITE / "target" / "summaries"


@dataclass(frozen=True)
class SuiteRun:
    returncode: int
    output: str

    @property
    def summary(self) -> str:
        found = SUMMARY.findall(self.output)
        return found[-1] if found else "java conformance: no summary line (the runner did not finish)"

    def failures(self) -> str:
        """The lines of the checks that failed, with the details the runner printed under each."""
        kept: list[str] = []
        keeping = False
        for line in self.output.splitlines():
            if not line.startswith(" "):
                keeping = line.startswith("FAIL")
            if keeping:
                kept.append(line)
        return "\n".join(kept)


async def run_suite(*options: str, report: Path, timeout_s: float) -> SuiteRun:
    """The runner's exit code and output; `options` as Main's (--controller, --oracle, --profile, ...)."""
    suite_classpath = await asyncio.to_thread(classpath, SUITE, package=True)
    command = [
        "java",
        "-Xmx768m",
        "-Dorg.slf4j.simpleLogger.defaultLogLevel=error",
        "-cp",
        suite_classpath,
        "io.pgcontroller.conformance.Main",
        *options,
        "--listed",
        str(COMPATIBILITY),
        "--report",
        str(report),
    ]
    process = await asyncio.create_subprocess_exec(
        *command, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    try:
        stdout, _ = await asyncio.wait_for(process.communicate(), timeout=timeout_s)
    except TimeoutError:
        process.kill()
        stdout, _ = await process.communicate()
        return SuiteRun(-1, stdout.decode(errors="replace") + f"\n(killed after {timeout_s:.0f} s)")
    return SuiteRun(process.returncode or 0, stdout.decode(errors="replace"))


def record_summary(name: str, run: SuiteRun) -> None:
    SUMMARIES.mkdir(parents=True, exist_ok=True)
    (SUMMARIES / f"{name}.txt").write_text(f"{run.summary} [{name}]\n")


def main(argv: list[str]) -> int:
    if not argv or "--help" in argv:
        print(__doc__)
        return 0
    report = Path("conformance-report.jsonl").resolve()
    run = asyncio.run(run_suite(*argv, report=report, timeout_s=3600))
    print(run.output)
    print(f"one JSON line per check: {report}")
    return run.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
