"""Maven builds and class paths the conformance tests share: the Java suite, Pravega 0.13
standalone (the oracle) and Schema Registry. A project is built once per content of its pom and
sources, under a file lock, so the suite's parallel workers build it once between them; Maven
caches its downloads in ~/.m2, so only a machine's first run downloads."""

from __future__ import annotations

import fcntl
import hashlib
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

CONFORMANCE = Path(__file__).parent
SUITE = CONFORMANCE / "java"
ORACLE = CONFORMANCE / "oracle"

# A first run downloads a few hundred MiB from Maven Central; later ones take seconds.
BUILD_TIMEOUT_S = 1200.0


def ensure_java_and_maven() -> None:
    """Java 17 and Maven from Debian's packages when missing (CI runs as root on a clean machine)."""
    missing = [
        package
        for command, package in (
            ("java", "openjdk-17-jdk-headless"),
            ("javac", "openjdk-17-jdk-headless"),
            ("mvn", "maven"),
        )
        if shutil.which(command) is None
    ]
    if not missing:
        return
    subprocess.run(["apt-get", "update", "-qq"], check=True, capture_output=True, timeout=BUILD_TIMEOUT_S)
    subprocess.run(
        ["apt-get", "install", "-y", "-qq", *sorted(set(missing))],
        check=True,
        capture_output=True,
        timeout=BUILD_TIMEOUT_S,
    )


@contextmanager
def _locked(project: Path) -> Iterator[None]:
    (project / "target").mkdir(exist_ok=True)
    with open(project / "target" / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _content_digest(project: Path) -> str:
    digest = hashlib.sha256()
    sources = [
        project / "pom.xml",
        *sorted((project / "src").rglob("*") if (project / "src").exists() else []),
    ]
    for path in sources:
        if path.is_file():
            digest.update(path.relative_to(project).as_posix().encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


def classpath(project: Path, *, package: bool) -> str:
    """The class path of `project`'s dependencies, led by its own jar when `package` (the jar is
    `target/<finalName>.jar`), building the project first when its pom or sources changed."""
    ensure_java_and_maven()
    target = project / "target"
    with _locked(project):
        stamp = target / "build.stamp"
        digest = _content_digest(project)
        if not stamp.exists() or stamp.read_text() != digest:
            goals = ["package"] if package else []
            command = [
                "mvn",
                "-q",
                "-B",
                "-f",
                str(project / "pom.xml"),
                *goals,
                "dependency:build-classpath",
            ]
            command.append(f"-Dmdep.outputFile={target / 'classpath.txt'}")
            result = subprocess.run(command, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
            if result.returncode != 0:
                raise RuntimeError(
                    f"{' '.join(command)} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}"
                )
            stamp.write_text(digest)
        dependencies = (target / "classpath.txt").read_text().strip()
    if not package:
        return dependencies
    jars = sorted(target.glob("*.jar"))
    if len(jars) != 1:
        raise RuntimeError(f"expected one jar in {target}, found {jars}")
    return f"{jars[0]}:{dependencies}"
