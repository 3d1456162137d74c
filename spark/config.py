"""What one pipeline run is told: where the database, the lake and the cluster are, and how
hard to push them. Pure data; every other module takes a PipelineConfig."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

# Debian's libpostgresql-jdbc-java puts the driver here (the Makefile installs it when missing).
DEFAULT_JDBC_JAR = "/usr/share/java/postgresql.jar"
MARTS_SCHEMA = "reporting_marts"
# The group role of analysts (migration 0011; app.store.analysts.ANALYST_GROUP, which a test
# holds equal): spark never imports the controller, its only interface is the database.
ANALYST_GROUP = "pgc_analysts"


def default_jdbc_jar() -> str:
    return os.environ.get("PGCONTROLLER_JDBC_JAR") or DEFAULT_JDBC_JAR


def local_cores(master: str) -> int | None:
    """Cores a `local[...]` master uses (None for a cluster master, whose size we do not know)."""
    if master == "local":
        return 1
    if master.startswith("local[") and master.endswith("]"):
        spec = master[len("local[") : -1].split(",")[0].strip()
        if spec == "*":
            return os.cpu_count() or 1
        if spec.isdigit() and int(spec) > 0:
            return int(spec)
        raise ValueError(f"bad local master {master!r}: expected local, local[N] or local[*]")
    return None


def controller_address_ok(address: str) -> bool:
    """The shape of a controller address, checked before Spark starts so a typo is a bad argument
    (the data source, which knows the schemes, checks the rest when it reads)."""
    _, sep, rest = address.partition("://")
    host, colon, port = (rest if sep else address).rpartition(":")
    return bool(colon and host.strip("[]") and port.isdigit())


@dataclass(frozen=True)
class PipelineConfig:
    db_url: str
    out: Path
    master: str = "local[*]"
    jdbc_jar: str = DEFAULT_JDBC_JAR
    driver_memory: str = "4g"
    # JDBC queries (stream-id ranges) per view; None: Spark's default parallelism (local mode:
    # the cores). Each is one pass of PostgreSQL over the view's range, streamed, never held.
    partitions: int | None = None
    fetch_size: int = 10_000
    # A rerun re-reads from the start of the day holding (high-water mark - this), so an event
    # committed late with an earlier timestamp (clock skew between controllers, a long
    # transaction) is still counted when it lands within this margin.
    late_margin_ms: int = 10 * 60_000
    # Per-stream charts are drawn for the most active streams only; the HTML lists the rest.
    chart_streams: int = 5
    full: bool = False
    progress: bool = True
    # Where the Parquet lake lives: any URI Spark can write (hdfs://, s3a://, an absolute path
    # on storage every executor sees). Default: <out>/lake, right for local mode.
    lake_uri: str | None = None
    # Roles given SELECT on the marts besides ANALYST_GROUP, which always is when it exists.
    grant_to: tuple[str, ...] = ()
    # Where the `reporting` views are read (a hot standby, so the pipeline's long scans load no
    # primary); None: db_url. The marts and the run records are always written through db_url,
    # since a standby refuses writes.
    read_url: str | None = None
    # A Pravega controller (this project's `serve` or Pravega's) whose streams' events the run
    # reads through the `pravega` data source, for the chart streams' event throughput; None:
    # no event is read and no throughput chart drawn.
    controller: str | None = None

    def __post_init__(self) -> None:
        if not self.db_url.startswith(("postgresql://", "postgres://")):
            raise ValueError("--db-url must be a postgresql:// URL")
        if self.read_url is not None and not self.read_url.startswith(("postgresql://", "postgres://")):
            raise ValueError("--read-url must be a postgresql:// URL")
        if self.controller is not None and not controller_address_ok(self.controller):
            raise ValueError("--controller is HOST:PORT (or tcp://HOST:PORT, tls://HOST:PORT)")
        local_cores(self.master)  # validates local[...] shapes early
        if self.fetch_size <= 0 or (self.partitions is not None and self.partitions <= 0):
            raise ValueError("partitions and fetch size must be positive")
        if self.late_margin_ms < 0 or self.chart_streams < 0:
            raise ValueError("late margin and chart streams cannot be negative")

    @property
    def source_url(self) -> str:
        """The URL the views are read through."""
        return self.read_url or self.db_url

    @property
    def lake(self) -> str:
        if self.lake_uri:
            return self.lake_uri.rstrip("/") if "://" in self.lake_uri else str(Path(self.lake_uri).resolve())
        return str((self.out / "lake").resolve())

    @property
    def charts_dir(self) -> Path:
        return self.out / "charts"

    @property
    def summary_html(self) -> Path:
        return self.out / "summary.html"
