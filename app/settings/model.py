"""`Settings`: every setting of `pgcontroller serve`, each declared once with its default, unit
(in its name: `_ms`, `_s`, `_hours`, or a count), help and check.

Invariant: a `Settings` that exists passed every declared check, so no component re-validates
start-up values. Defaults are Pravega's (gRPC 9090, REST 9091, 4 containers, a segment store on
localhost:12345) except that we bind to loopback unless told otherwise.
"""

from __future__ import annotations

import logging
import os
import socket
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from app.domain.cluster import DEFAULT_COUNTS, MAX_BUCKETS, BucketCounts
from app.domain.hosts import HostAddress
from app.domain.retention import DEFAULT_RETENTION_FREQUENCY_MS
from app.domain.txns import DEFAULT_TXN_LIMITS, TxnLimits
from app.settings.declaration import (
    TLS_VERSIONS,
    SettingError,
    StoreGroup,
    at_least,
    declared,
    handler_specs,
    hosts,
    not_empty,
    not_negative,
    port,
    positive,
    setting,
    store_group,
    text,
    tls_versions,
    within,
)

MS_PER_HOUR = 3_600_000
_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def default_instance_id() -> str:
    return f"{socket.gethostname()}-{uuid.uuid4().hex[:8]}"


def default_processes() -> int:
    """One controller process per core this process may run on (its affinity mask)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def _log_level(value: str) -> str | None:
    return None if value.upper() in logging.getLevelNamesMapping() else f"must be one of {', '.join(_LEVELS)}"


def _log_format(value: str) -> str | None:
    return None if value in ("text", "json") else "must be one of text, json"


def _some_hosts(value: tuple[HostAddress, ...]) -> str | None:
    return None if value else "must name at least one HOST:PORT"


def _tail_wait(value: float) -> str | None:
    return None if 0 < value < 30 else "must be above 0 and below 30 (the clients' request timeout)"


TIER_KINDS = ("none", "filesystem", "s3")


def _tier_kind(value: str) -> str | None:
    return None if value in TIER_KINDS else f"must be one of {', '.join(TIER_KINDS)}"


def _time_scale(value: float) -> str | None:
    return None if 0 < value <= 1 else "must be above 0 and at most 1"


_buckets = within(1, MAX_BUCKETS)
_FIXED_BUCKETS = (
    "; applied by the first process while the cluster holds no stream, fixed afterwards "
    "(a process asking for other counts then refuses to start)"
)


@dataclass(frozen=True, kw_only=True)
class Settings:
    # Where the state lives (also flags of the `db` and `dev` commands).
    db_url: str | None = setting(
        None,
        parse=text,
        metavar="URL",
        help="PostgreSQL to use; without it an embedded PostgreSQL is started (and stopped on exit)",
    )
    # `setting` returns a dataclasses.field, which RUF009 cannot tell from a shared default.
    data_dir: Path = setting(Path(".pgcontroller"), metavar="DIR", help="embedded database and state")  # noqa: RUF009
    embedded_db_restart_attempts: int = setting(
        5,
        check=positive,
        help="restarts in a row (0.5 s backoff, doubling to 8 s) of an embedded PostgreSQL that died before "
        "serve gives up on it: liveness turns false and serve exits 1 (with --processes N, the "
        "supervisor, which runs the database, stops every child and exits 1)",
    )

    # Listeners and identity.
    grpc_host: str = setting("127.0.0.1", metavar="HOST", help="gRPC listener address")
    grpc_port: int = setting(9090, metavar="PORT", check=port, help="gRPC listener port (0: any free port)")
    grpc_max_connections: int = setting(
        1000,
        check=positive,
        help="most connections the gRPC port holds; one more is told GOAWAY ENHANCE_YOUR_CALM and closed "
        "at once, logged once per 10 s with a count (Pravega 0.13's controller, on grpc-java, sets no "
        "limit; idle connections are held until the client closes them)",
    )
    grpc_max_concurrent_streams: int = setting(
        100,
        check=positive,
        help="gRPC calls one HTTP/2 connection may run at once, advertised as "
        "SETTINGS_MAX_CONCURRENT_STREAMS (h2's default); a call the client cancelled counts until its "
        "handler has ended, and one past the limit is refused with REFUSED_STREAM (grpc-go's "
        "rapid-reset fix, CVE-2023-44487)",
    )
    grpc_max_calls_before_first_reply: int = setting(
        4,
        check=positive,
        help="gRPC calls one HTTP/2 connection may run at once until one of its replies has been taken "
        "whole; its further calls wait their turn (a client advertising a zero window would otherwise "
        "have the server build and hold its whole first burst of replies)",
    )
    grpc_max_replies_building_before_first_reply: int = setting(
        16,
        check=positive,
        help="gRPC calls building a reply at once over all connections that have not yet taken one; "
        "further such calls wait their turn (each reply being built costs several times its bytes, "
        "and many connections could otherwise each have their first calls built)",
    )
    grpc_max_resets_per_window: int = setting(
        200,
        check=positive,
        help="RST_STREAM frames a gRPC connection may send, plus its streams refused, per "
        "--grpc-frame-window-s; past it: GOAWAY ENHANCE_YOUR_CALM and the connection is closed "
        "(Netty's Http2MaxRstFrameDecoder default: 200 per 30 s; rapid reset, CVE-2023-44487)",
    )
    grpc_max_pings_per_window: int = setting(
        100,
        check=positive,
        help="PING frames a gRPC connection may send per --grpc-frame-window-s while the server sends it "
        "no call data (keepalive and BDP pings never come near); past it: GOAWAY ENHANCE_YOUR_CALM (a "
        "PING flood costs an ACK each)",
    )
    grpc_max_settings_per_window: int = setting(
        100,
        check=positive,
        help="SETTINGS frames a gRPC connection may send per --grpc-frame-window-s; past it: GOAWAY "
        "ENHANCE_YOUR_CALM (a SETTINGS flood costs an ACK each)",
    )
    grpc_frame_window_s: float = setting(
        30.0,
        check=positive,
        help="the window the gRPC connection's reset, PING and SETTINGS budgets count in (Netty's 30 s)",
    )
    grpc_max_header_list_bytes: int = setting(
        8 * 1024,
        check=positive,
        help="largest decoded header list a gRPC request may carry, advertised as "
        "SETTINGS_MAX_HEADER_LIST_SIZE (grpc-java's default maxInboundMetadataSize, which Pravega's "
        "controller keeps); a larger one (an HPACK bomb) or an encoded header block still arriving past "
        "it and a quarter (a CONTINUATION flood, Netty's rule): GOAWAY ENHANCE_YOUR_CALM",
    )
    grpc_max_unsent_bytes_per_connection: int = setting(
        4 * 1024 * 1024,
        check=positive,
        help="reply bytes one gRPC connection may leave untaken (its HTTP/2 window closed or its socket "
        "unread: zero-window stalls, CVE-2019-9517); past it: GOAWAY ENHANCE_YOUR_CALM and the "
        "connection is closed",
    )
    grpc_max_unsent_bytes: int = setting(
        8 * 1024 * 1024,
        check=positive,
        help="reply bytes all gRPC connections together may leave untaken; past it the connections that "
        "have gone longest without taking any are cut off (GOAWAY ENHANCE_YOUR_CALM) until the rest "
        "fit (a held reply costs the process several times its bytes)",
    )
    grpc_send_stall_s: float = setting(
        20.0,
        check=positive,
        help="a gRPC call whose reply could send nothing for this long (the client's window closed) is "
        "reset with RST_STREAM CANCEL, and a connection whose socket took nothing for this long is "
        "closed (Tomcat's streamWriteTimeout)",
    )
    rest_host: str = setting("127.0.0.1", metavar="HOST", help="REST listener address")
    rest_port: int = setting(9091, metavar="PORT", check=port, help="REST listener port (0: any free port)")
    rest_idle_timeout_s: float = setting(
        30.0,
        check=positive,
        help="an HTTP connection (REST, and a segment store's metrics port) that has not sent a complete "
        "request's headers this long after opening or after its last response is closed: idle "
        "keep-alive connections and requests trickling in (slowloris) cannot hold a connection for "
        "ever (Pravega's REST server, on Grizzly, closes idle ones after 30 s)",
    )
    rest_body_timeout_s: float = setting(
        30.0,
        check=positive,
        help="an HTTP request (REST, a segment store's metrics port) whose body has not all arrived this "
        "long after its headers is answered 408 and its connection closed: a body sent a byte at a time, "
        "or never finished, cannot hold a handler for ever (the idle timeout stops once the headers are in)",
    )
    rest_max_connections: int = setting(
        1000,
        check=positive,
        help="most connections one HTTP port (REST, a segment store's metrics port) holds; one more is "
        "answered 503 and closed at once, logged once per 10 s with a count",
    )
    fd_reserve: int = setting(
        128,
        check=at_least(32, "the database pool, the lock and listener sessions, logs and files need some"),
        help="file descriptors below the soft RLIMIT_NOFILE that no client connection (gRPC, REST, the "
        "segment store's port) may take, so a flood of connections leaves the database pool, the lock "
        "session and the listener room to (re)connect (leadership and readiness kept); such a connection "
        "is closed at once (REST: 503; gRPC: GOAWAY ENHANCE_YOUR_CALM)",
    )
    advertise_host: str | None = setting(
        None,
        parse=text,
        metavar="HOST",
        shown_default="the gRPC bind host",
        help="host other controllers and clients reach this one at (getControllerServerList); "
        "this machine's name when the gRPC listener binds all interfaces",
    )
    instance_id: str = setting(
        factory=default_instance_id,
        metavar="ID",
        check=not_empty,
        shown_default="`<hostname>-<8 hex>`",
        help="this process's member id in the cluster; must be unique among running controllers",
    )
    processes: int = setting(
        factory=default_processes,
        check=positive,
        shown_default="one per core (the CPU affinity mask)",
        help="controller processes sharing the gRPC, REST and segment-store ports (SO_REUSEPORT), each "
        "a cluster member of its own (`<instance-id>-<i>`), under one supervisor that restarts a child "
        "that dies, every child running the embedded segment store behind the shared port; 1: a single "
        "process, no supervisor",
    )
    reuse_port: bool = setting(
        False,
        help="bind the gRPC, REST and embedded segment-store ports with SO_REUSEPORT, so several "
        "processes on this host share them (the supervisor of --processes sets it for its children)",
    )
    ready_file: Path | None = setting(  # noqa: RUF009
        None, parse=Path, metavar="PATH", help="written (JSON: ports, pid) once both servers listen"
    )
    log_level: str = setting(
        "INFO",
        metavar="LEVEL",
        check=_log_level,
        scope="global",
        help="logging threshold; before or after the command (`pgcontroller serve --log-level DEBUG`)",
    )
    log_format: str = setting(
        "text",
        metavar="FORMAT",
        check=_log_format,
        scope="global",
        help="log line format: `text`, or `json` (one object per line: time, level, logger, message, "
        "request_id, scope, stream, exception); given before the command",
    )
    no_access_log: bool = setting(
        False,
        help="do not write the access log (one INFO line per REST request and gRPC call, on the "
        "`pgcontroller.access` logger)",
    )
    access_log_alike_per_second: int = setting(
        10,
        metavar="N",
        check=not_negative,
        help="alike access-log lines (same method, path, status and client host) written per second; "
        "the rest are counted in one line a second, so a client retrying in a loop cannot flood the "
        "log; 0 writes every line",
    )

    # Segment containers and stores.
    container_count: int = setting(4, check=positive, help="segment containers; fixed for the cluster's life")
    segment_store_hosts: tuple[HostAddress, ...] = setting(
        (HostAddress("127.0.0.1", 12345),),
        parse=hosts,
        metavar="H:P,...",
        check=_some_hosts,
        help="hosts getURI answers with while no segment store has registered "
        "(`POST /v1/cluster/segment-stores`); host i of n owns containers i, i+n, ...; "
        "with the embedded segment store, its own address replaces this list",
    )
    no_metrics: bool = setting(
        False,
        help="do not publish metrics: `/prometheus` and `/metrics` answer 404 and calls are not timed "
        "(`pgcontroller segment-store`: no metrics listener at all)",
    )
    auth_enabled: bool = setting(
        False,
        help="require authentication (gRPC `authorization` metadata, REST `Authorization` header) and "
        "authorize every call by the caller's ACL; delegation tokens are then signed and checked",
    )
    auth_handlers: tuple[str, ...] = setting(
        (),
        parse=handler_specs,
        metavar="MODULE:ATTR,...",
        shown_default="none",
        help="auth handler plugins for methods other than Basic (Pravega's AuthHandler plugins): "
        "factories called with the settings, each answering a handler of one method; the entry "
        "points of group pgcontroller.auth_handlers are loaded too (app/security/plugins.py)",
    )
    auth_token_ttl_s: int = setting(
        600,
        check=positive,
        help="how long a delegation token the controller signs is valid (Pravega's "
        "controller.security.auth.delegationToken.ttl.seconds); clients fetch a new one before it expires",
    )
    auth_token_signing_key_file: Path | None = setting(  # noqa: RUF009
        None,
        parse=Path,
        metavar="PATH",
        help="file holding the key delegation tokens are signed and checked with (Pravega's "
        "controller.security.auth.delegationToken.signingKey.basis; or the variable "
        "PGCONTROLLER_AUTH_TOKEN_SIGNING_KEY, never a flag); every segment store needs the same key; "
        "with neither, serve makes one for itself and its embedded store",
    )
    # The key itself, resolved at start from the file or the variable (app/security/signing_key.py);
    # not a flag (it would show in `ps`), never printed.
    token_signing_key: bytes | None = field(default=None, repr=False, compare=False)
    # Password guessing (app/security/guessing.py): an Argon2id check costs ~0.1 s of a core and
    # 64 MiB; past these limits a call needing one is refused at once (RESOURCE_EXHAUSTED, 429).
    auth_check_concurrency: int = setting(
        2,
        check=positive,
        help="password checks (Argon2id: ~0.1 s of CPU and 64 MiB each) run at once, at most one per "
        "address, so one address's guesses leave the others a slot; credentials already verified are "
        "served from a cache and never wait for one",
    )
    auth_check_queue: int = setting(
        8,
        check=not_negative,
        help="password checks that may wait for a slot; past it a login needing one is refused at once "
        "(gRPC RESOURCE_EXHAUSTED, REST 429, which clients retry) rather than queued",
    )
    auth_checks_per_source: int = setting(
        2,
        check=positive,
        help="password checks one address (an IPv6 /64) may have running or waiting; more are refused "
        "at once, so one client's flood of guesses cannot fill the queue",
    )
    auth_failures_per_source_per_s: float = setting(
        0.2,
        check=positive,
        help="failed logins (wrong password or unknown name) one address may make each second, on "
        "average, past its burst; beyond, a login from it that needs a password check is refused at "
        "once (a success costs nothing), and while it has failed of late its checks run at a low CPU "
        "priority",
    )
    auth_failure_burst_per_source: int = setting(
        20,
        check=positive,
        help="failed logins one address may make in a row before --auth-failures-per-source-per-s applies",
    )
    auth_failures_per_s: float = setting(
        5.0,
        check=positive,
        help="failed logins the process accepts each second from all addresses together, on average "
        "past its burst (about half a core of password checks), however many addresses guess",
    )
    auth_failure_burst: int = setting(
        40,
        check=positive,
        help="failed logins from all addresses in a row before --auth-failures-per-s applies",
    )
    # TLS on the service's own ports (Pravega's controller.security.tls.* settings).
    tls_enabled: bool = setting(
        False,
        help="serve gRPC, REST and the embedded segment store's port over TLS only (plain connections "
        "are refused), and reach segment stores over TLS (Pravega's controller.security.tls.enable); "
        "needs --tls-cert-file and --tls-key-file",
    )
    tls_cert_file: Path | None = setting(  # noqa: RUF009
        None,
        parse=Path,
        metavar="PATH",
        help="PEM certificate chain the TLS listeners present, server certificate first "
        "(Pravega's controller.security.tls.server.certificate.location)",
    )
    tls_key_file: Path | None = setting(  # noqa: RUF009
        None,
        parse=Path,
        metavar="PATH",
        help="PEM private key of --tls-cert-file, unencrypted, best readable by the service's user only "
        "(Pravega's controller.security.tls.server.privateKey.location)",
    )
    tls_trust_file: Path | None = setting(  # noqa: RUF009
        None,
        parse=Path,
        metavar="PATH",
        shown_default="the system's CAs",
        help="PEM CA certificates the controller trusts when it connects to segment stores over TLS; "
        "clients are given the same file (Pravega's controller.security.tls.trustStore.location)",
    )
    tls_protocol_version: tuple[str, ...] = setting(
        TLS_VERSIONS,
        parse=tls_versions,
        metavar="V,...",
        check=not_empty,
        help="TLS versions the listeners and the segment-store client accept, of TLSv1.2 and TLSv1.3 "
        "(Pravega's controller.security.tls.protocolVersion)",
    )
    no_embedded_segment_store: bool = setting(
        False,
        help="do not start the embedded segment store; segment stores of their own "
        "(`--segment-store-hosts`, or registered) serve the data",
    )
    segment_store_host: str = setting(
        "127.0.0.1",
        metavar="HOST",
        help="the embedded segment store's listener address; getURI names it as given (a host "
        "name is not resolved: a TLS certificate may name no IP address), or the advertised host "
        "when it binds all interfaces",
    )
    segment_store_port: int = setting(
        12345, metavar="PORT", check=port, help="the embedded segment store's port (0: any free port)"
    )
    segment_store_group: StoreGroup | None = setting(  # noqa: RUF009
        None,
        parse=store_group,
        metavar="I:N:DIR",
        help="this embedded segment store is store I of the N behind one port (SO_REUSEPORT), which "
        "wake each other's tail reads and send their traffic to store 0 through sockets in DIR (the "
        "supervisor of --processes sets it for its children)",
    )
    segment_store_metrics_port: int = setting(
        6061,
        metavar="PORT",
        check=port,
        scope="segment-store",
        help="`pgcontroller segment-store` only: port of its HTTP listener for `/prometheus`, "
        "`/metrics` and `/v1/health` probes, on --segment-store-host (0: any free port; Pravega's "
        "segment-store REST port, rest.listener.port); --no-metrics opens none",
    )
    segment_store_tail_wait_s: float = setting(
        20.0,
        check=_tail_wait,
        help="longest a read at a segment's tail waits for data before an empty answer (below the "
        "clients' 30 s request timeout, or they drop the connection)",
    )
    segment_store_tail_linger_s: float = setting(
        0.002,
        check=not_negative,
        help="how long a read answering with a segment's newest bytes waits, after the append that "
        "brought them, for the writer's next append to arrive (and then to commit), so that events "
        "a writer sent one ack apart reach a tail reader in one reply; a lone event reaches its "
        "reader this much later (0: answer at once)",
    )
    segment_store_heartbeat_s: float = setting(
        2.0,
        check=positive,
        help="how often a segment store (`pgcontroller segment-store`, or the embedded one) heartbeats "
        "its registration; below --segment-store-expiry-s",
    )
    segment_store_expiry_s: float = setting(
        10.0,
        check=positive,
        help="a segment store without a heartbeat for this long is removed by the leader and its "
        "containers move (Pravega's segment-store ZooKeeper session timeout); a store that could not "
        "heartbeat for this long stops serving",
    )
    segment_store_db_wait_s: float = setting(
        3.0,
        check=not_negative,
        help="how long a segment store's request waits for a database connection to open before it "
        "fails (its client's connection closed for a retry): a PostgreSQL failover or switchover then "
        "costs a writer the outage, not the client's growing back-off after it (docs/ha.md); only "
        "opening a connection is waited out, so nothing is written twice; 0: fail at once",
    )
    segment_store_timeout_s: float = setting(
        30.0,
        check=positive,
        help="the controller's bound on one segment-store request (connect, send, reply); a request "
        "that runs out is retried by its workflow",
    )
    segment_store_max_connections: int = setting(
        1000,
        check=positive,
        help="most connections the segment store's port holds; one more is closed at once, logged once "
        "per 10 s with a count (a flood of idle connections cannot take every file descriptor)",
    )
    segment_store_hello_timeout_s: float = setting(
        10.0,
        check=positive,
        help="a segment-store connection that has not said Hello this long after opening is closed "
        "(every Pravega client says it first)",
    )
    segment_store_idle_timeout_s: float = setting(
        120.0,
        check=positive,
        help="a segment-store connection with no writer set up, nothing pending and no frame for this "
        "long is closed (well above the 20 s between Pravega clients' KeepAlives)",
    )
    segment_store_frame_deadline_s: float = setting(
        30.0,
        check=positive,
        help="a frame (an AppendBlock with its end) on the segment-store port must arrive this long after "
        "its header, or the connection is closed: a stalled frame holds no memory for ever",
    )
    segment_store_untrusted_frame_bytes: int = setting(
        1024 * 1024,
        check=at_least(64 * 1024, "a Hello, a SetupAppend or a read request must fit"),
        help="largest frame the segment store reads before the connection said Hello (with "
        "--auth-enabled: before it presented a valid delegation token; a larger request is read on "
        "only when its token, at the start of its payload, is valid), against Pravega's 16 MiB "
        "MAX_WIRECOMMAND_SIZE for the others",
    )
    segment_store_frame_budget_bytes: int = setting(
        64 * 1024 * 1024,
        check=at_least(16 * 1024 * 1024, "one frame of Pravega's 16 MiB MAX_WIRECOMMAND_SIZE must fit"),
        help="bytes of unfinished frames over 64 KiB (appends of up to Pravega's 8 MiB events, table "
        "updates of up to 16 MiB) the segment-store port holds for all its connections together; the "
        "connection whose frame does not fit is closed (its client reconnects and sends it again)",
    )
    segment_store_reply_budget_bytes: int = setting(
        32 * 1024 * 1024,
        check=at_least(4 * 1024 * 1024, "a connection may queue one 2 MiB read reply and then some"),
        help="bytes of segment-store replies being read out of the database or queued for clients that "
        "are not reading them, for all connections together (each is bounded to about 2.5 MB); past "
        "it, the connections whose replies have waited longest are closed",
    )
    segment_store_reads_at_once: int = setting(
        8,
        check=positive,
        help="segment reads (up to 2 MiB each, Pravega's READ_MAX_SIZE) fetching their bytes at once on "
        "the segment-store port; the others wait their turn: a burst of large reads can neither take "
        "the whole database pool nor allocate a burst of replies (keep it below --pool-max-size)",
    )
    segment_store_read_index_bytes: int = setting(
        64 * 1024 * 1024,
        check=not_negative,
        help="bytes of segments' most recent appends the segment store keeps in memory for all segments "
        "together (its read index; the least recently used segments' go first): reads at and near a "
        "segment's tail, parked ones woken by an append too, are answered without a database read; "
        "0 keeps none",
    )
    segment_store_read_index_segment_bytes: int = setting(
        1024 * 1024,
        check=not_negative,
        at_most="segment_store_read_index_bytes",
        help="bytes of one segment's most recent appends the read index keeps (its oldest go first)",
    )
    segment_store_read_ahead_bytes: int = setting(
        16 * 1024 * 1024,
        check=not_negative,
        help="bytes the segment store may have read from the database ahead of readers catching up, "
        "for all segments together (after a read whose next range of the same size is committed, "
        "that range is read at once, so the reader's next read does not wait for the database); "
        "0 reads nothing ahead",
    )

    # The long-term storage tier (docs/operations.md, "Long-term storage").
    tier: str = setting(
        "none",
        check=_tier_kind,
        metavar="KIND",
        help="where the segment store moves stream bytes once a segment holds --tier-chunk-bytes of them "
        "in PostgreSQL (or is sealed, or has held them --tier-flush-age-s): none (they stay in PostgreSQL), "
        "filesystem (--tier-directory) or s3 (--tier-s3-*); PostgreSQL keeps the index and the tail "
        "either way",
    )
    tier_directory: Path = setting(  # noqa: RUF009
        Path(""),
        metavar="DIR",
        shown_default="DATA_DIR/chunks",
        help="--tier filesystem: the directory of the chunk files (created if missing; every chunk "
        "fsync'd before PostgreSQL forgets its bytes)",
    )
    tier_s3_bucket: str = setting("", metavar="BUCKET", help="--tier s3: the bucket (it must exist)")
    tier_s3_prefix: str = setting(
        "pgcontroller", metavar="PREFIX", help="--tier s3: the key prefix of the objects"
    )
    tier_s3_endpoint: str = setting(
        "",
        metavar="URL",
        help="--tier s3: an S3-compatible endpoint (http://host:port for MinIO, S3Proxy, ...); empty: "
        "AWS, or AWS_ENDPOINT_URL",
    )
    tier_s3_region: str = setting(
        "", metavar="REGION", help="--tier s3: the region; empty: AWS_REGION, or us-east-1"
    )
    tier_s3_access_key_id: str = setting(
        "",
        metavar="ID",
        help="--tier s3: the access key id; empty: the standard AWS environment (AWS_ACCESS_KEY_ID, "
        "AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, web identity, instance profile)",
    )
    tier_s3_secret_access_key: str = setting(
        "",
        metavar="SECRET",
        shown_default="(none)",
        help="--tier s3: the secret access key for --tier-s3-access-key-id (prefer the environment "
        "variable to the flag: a flag shows in the process list)",
    )
    tier_chunk_bytes: int = setting(
        64 * 1024 * 1024,
        check=positive,
        help="bytes of one chunk object: a segment's bytes move out of PostgreSQL a chunk at a time "
        "once it holds this many (all of them once it is sealed)",
    )
    tier_flush_interval_s: float = setting(
        1.0,
        check=positive,
        help="how often the storage writer looks for segments with a chunk's worth of bytes",
    )
    tier_flush_age_s: float = setting(
        300.0,
        check=positive,
        help="the longest a stream segment's bytes stay in PostgreSQL under a chunk's worth: after this "
        "(counted from when the storage writer first saw them), they move as one smaller chunk, so a "
        "segment written slowly, or no more, keeps no tail there",
    )
    tier_throttle_bytes: int = setting(
        1024 * 1024 * 1024,
        check=positive,
        help="bytes due to move out of PostgreSQL (a chunk's worth of a segment, or a sealed segment's rest) "
        "one container may hold before its appends wait for the storage writer (the chunk store is down or "
        "slower than the writers): each append then waits until the backlog falls under this, at most "
        "--tier-throttle-max-delay-s",
    )
    tier_throttle_max_delay_s: float = setting(
        1.0,
        check=positive,
        help="the longest one append waits for the storage writer when its container is over "
        "--tier-throttle-bytes (delayed, never refused)",
    )
    tier_gc_grace_s: float = setting(
        60.0,
        check=positive,
        help="how long an object released by a truncation or deletion (or written and never recorded) "
        "stays before it is deleted: reads that found it just before keep it that long",
    )

    # Buckets and membership.
    request_buckets: int = setting(
        DEFAULT_COUNTS.requests, check=_buckets, help="request bucket count" + _FIXED_BUCKETS
    )
    retention_buckets: int = setting(
        DEFAULT_COUNTS.retention, check=_buckets, help="retention bucket count" + _FIXED_BUCKETS
    )
    watermark_buckets: int = setting(
        DEFAULT_COUNTS.watermarks, check=_buckets, help="watermark bucket count" + _FIXED_BUCKETS
    )
    member_ttl_s: float = setting(
        5.0,
        check=positive,
        old_flags=("--member-ttl",),
        help="a controller without a heartbeat for this long is removed "
        "(one whose lock session closed is removed at once)",
    )
    rebalance_delay_s: float = setting(
        2.0,
        check=not_negative,
        old_flags=("--rebalance-delay",),
        help="membership must be stable this long before buckets move between live controllers "
        "(a dead one's buckets move at once)",
    )
    container_rebalance_delay_s: float = setting(
        10.0,
        check=not_negative,
        old_flags=("--container-rebalance-delay",),
        help="the segment-store host set must be stable this long before the leader moves containers "
        "(Pravega's rebalance.interval.seconds.min)",
    )
    cluster_interval_s: float = setting(
        0.5,
        check=positive,
        help="period of the cluster round: heartbeat, leadership and bucket claims "
        "(a cluster notification starts one at once)",
    )

    # Requests and the workflows they run.
    request_concurrency: int = setting(
        64,
        check=positive,
        help="streams whose requests run at once (each stream's requests always run one at a time, in order)",
    )
    request_poll_s: float = setting(
        1.0, check=positive, help="how often dispatchers read the request queue besides being woken by NOTIFY"
    )
    request_max_failures: int = setting(
        50,
        check=positive,
        help="a request failing this many times with an unexpected error is parked "
        "(its stream's state restored) instead of retried for ever; lost races, an unreachable "
        "database and waits for a state transition never count",
    )
    completion_timeout_s: float = setting(
        120.0,
        check=positive,
        old_flags=("--completion-timeout",),
        old_envs=("PGCONTROLLER_COMPLETION_TIMEOUT",),
        help="update, truncate, seal and delete wait this long for their workflow before "
        "DEADLINE_EXCEEDED (the workflow carries on; Pravega's bound)",
    )
    seal_busy_first_s: float = setting(
        0.1,
        check=positive,
        help="first wait before sealing retries a stream that is busy (scaling, updating, ...); "
        "each retry waits twice as long",
    )
    create_takeover_s: float = setting(
        5.0,
        check=positive,
        help="a stream still CREATING this long after its createStream began (the call was cut off) "
        "is finished by the controller itself",
    )

    # Transactions.
    txn_min_lease_ms: int = setting(
        DEFAULT_TXN_LIMITS.min_lease_ms,
        check=positive,
        at_most="txn_max_lease_ms",
        old_flags=("--txn-min-lease",),
        help="smallest transaction lease createTransaction accepts",
    )
    txn_max_lease_ms: int = setting(
        DEFAULT_TXN_LIMITS.max_lease_ms,
        check=positive,
        old_flags=("--txn-max-lease",),
        help="largest transaction lease (createTransaction refuses more; a ping above it says "
        "LEASE_TOO_LARGE)",
    )
    txn_max_execution_bound_ms: int = setting(
        DEFAULT_TXN_LIMITS.max_execution_bound_ms,
        check=positive,
        help="longest a transaction may stay open, however often it is pinged "
        "(each transaction gets the smaller of this and 1000 leases)",
    )
    txn_ttl_hours: int = setting(
        DEFAULT_TXN_LIMITS.completed_ttl_ms // MS_PER_HOUR,
        check=positive,
        help="completed-transaction records are kept between one and two TTLs, then a transaction "
        "reads UNKNOWN",
    )
    txn_timeout_grace_ms: int = setting(
        DEFAULT_TXN_LIMITS.timeout_grace_ms,
        check=not_negative,
        help="an expired transaction is aborted this long after its lease ends, so a client's ping "
        "right at expiry still lands",
    )

    # Periodic work.
    retention_frequency_ms: int = setting(
        DEFAULT_RETENTION_FREQUENCY_MS,
        check=positive,
        help="how often a stream with a retention policy records a stream cut and is considered for "
        "truncation (the minimum gap between recorded cuts; Pravega's 30 minutes)",
    )
    watermark_period_ms: int = setting(
        10_000,
        check=positive,
        help="how often watermarks are computed for the streams of the watermark buckets this process owns",
    )

    # The segment store's auto-scaler (Pravega's autoScale.* settings of a segment store).
    autoscale_cooldown_s: float = setting(
        600.0,
        check=not_negative,
        help="a new segment sends no scale report for this long (Pravega's autoScale.cooldown.time.seconds)",
    )
    autoscale_mute_s: float = setting(
        600.0,
        check=not_negative,
        help="after a scale report a segment sends no other in the same direction for this long "
        "(an UP mutes both; Pravega's autoScale.mute.time.seconds)",
    )
    autoscale_cache_expiry_s: float = setting(
        1200.0,
        check=positive,
        help="a segment without appends for this long is forgotten, with a silent DOWN report if it "
        "was created by this store or reported on (Pravega's autoScale.cache.expiry.seconds)",
    )
    autoscale_cache_cleanup_s: float = setting(
        300.0,
        check=positive,
        help="how often idle segments are looked for (Pravega's autoScale.cache.cleanUp.interval.seconds)",
    )
    autoscale_time_scale: float = setting(
        1.0,
        check=_time_scale,
        help="multiplies the durations Pravega fixes: the 5 s tick, the 2/5/10/20-minute averages and "
        "the 2-minute reporting interval; below 1 only to see auto-scaling within a test",
    )

    # The process's resources.
    shutdown_timeout_s: float = setting(
        5.0,
        check=positive,
        help="bound on an ordered shutdown's waits for the listeners, background loops and the pool; a "
        "shutdown still running after the drain plus twice this exits with code 3 and its stacks logged",
    )
    shutdown_drain_s: float = setting(
        5.0,
        check=not_negative,
        help="on SIGTERM, readiness turns false first; gRPC calls in flight then get up to this long "
        "to finish before the listeners close (0: close at once)",
    )
    pool_max_size: int = setting(
        20,
        check=at_least(2, "the pool keeps two connections open"),
        help="most connections in the PostgreSQL pool",
    )

    def __post_init__(self) -> None:
        for item in DECLARATIONS:
            value = getattr(self, item.name)
            refused = item.refusal(item.flag, value)
            if refused:
                raise refused
            if item.at_most and value > getattr(self, item.at_most):
                bound = "--" + item.at_most.replace("_", "-")
                raise SettingError(
                    item.flag, f"must not exceed {bound} ({getattr(self, item.at_most)}), got {value}"
                )
        # Built once here so that a value the declarations let through fails at start-up, not in a worker.
        self.bucket_counts  # noqa: B018
        self.txn_limits  # noqa: B018

    @property
    def bucket_counts(self) -> BucketCounts:
        return BucketCounts(self.request_buckets, self.retention_buckets, self.watermark_buckets)

    @property
    def txn_limits(self) -> TxnLimits:
        return TxnLimits(
            min_lease_ms=self.txn_min_lease_ms,
            max_lease_ms=self.txn_max_lease_ms,
            max_execution_bound_ms=self.txn_max_execution_bound_ms,
            completed_ttl_ms=self.txn_ttl_hours * MS_PER_HOUR,
            timeout_grace_ms=self.txn_timeout_grace_ms,
        )

    def advertised_host(self) -> str:
        if self.advertise_host:
            return self.advertise_host
        if self.grpc_host in ("", "0.0.0.0", "::"):
            return socket.gethostname()
        return self.grpc_host


DECLARATIONS = tuple(declared(Settings))
BY_NAME = {item.name: item for item in DECLARATIONS}
