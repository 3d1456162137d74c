"""`pgcontroller dev seed`: the command line over the history generator (app/dev/seed.py), and
`pgcontroller dev certs DIR`: a throwaway CA and certificates (app/security/certs.py).

Progress goes to stderr at most every two seconds; the summary is the last line of stdout, as
JSON, so scripts can read the counts and the measured rate.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from app.dev.history_gen import ScaleMix, SeedSpec, TxnMix
from app.domain.errors import DomainError, InvalidInput
from app.domain.txns import TxnLimits
from app.embedded_pg import EmbeddedPostgres
from app.settings import add_setting

if TYPE_CHECKING:
    from app.dev import ha as ha_module

_PROGRESS_EVERY_S = 2.0


def _weights(kind: type[ScaleMix] | type[TxnMix]) -> Callable[[str], ScaleMix | TxnMix]:
    """Parses `name=weight,...`; names left out keep their default weight."""
    names = kind.__slots__

    def parse(text: str) -> ScaleMix | TxnMix:
        values: dict[str, float] = {}
        for part in filter(None, (p.strip() for p in text.split(","))):
            name, sep, value = part.partition("=")
            if not sep or name.strip() not in names:
                raise argparse.ArgumentTypeError(f"expected {'=W,'.join(names)}=W, got {part!r}")
            try:
                values[name.strip()] = float(value)
            except ValueError:
                raise argparse.ArgumentTypeError(f"{value!r} is not a number") from None
        return kind(**values)

    return parse


def add_dev_parser(
    commands: argparse._SubParsersAction,  # type: ignore[type-arg]
) -> None:
    dev = commands.add_parser("dev", help="tools for development and benchmarks")
    dev_commands = dev.add_subparsers(dest="dev_command", required=True)
    seed = dev_commands.add_parser(
        "seed",
        help="write a realistic stream history straight into the tables (COPY)",
        description="Writes streams with long histories (splits, merges, rolling transactions, sealed "
        "sizes, retention cuts and truncations with their history, transactions with the details "
        "analysts read: request times, writers, commit order) straight into the tables, as the real "
        "workflows would have left them. Deterministic for a given --seed and names. Each group of "
        "whole streams is one transaction, so an interrupted run leaves complete streams only; "
        "--resume then skips those. The database is migrated to the latest schema first.",
    )
    add_setting(seed, "db_url")
    add_setting(seed, "data_dir")
    what = seed.add_mutually_exclusive_group(required=True)
    what.add_argument("--streams", type=int, help="user streams to write")
    what.add_argument(
        "--one-stream-epochs",
        type=int,
        metavar="N",
        help="instead: one stream with N epoch records (epoch 0 included), grown inside PostgreSQL "
        "at millions of epochs a minute; each epoch replaces one of its two segments by one of the "
        "same range, evenly spaced over the span (no transactions or retention); committed every "
        "--chunk-epochs, and --resume grows an interrupted one on",
    )
    count = seed.add_mutually_exclusive_group()
    count.add_argument(
        "--epochs-per-stream", type=int, help="epoch records a stream, epoch 0 included (default 100)"
    )
    count.add_argument("--total-epochs", type=int, help="epoch records over all streams, spread evenly")
    seed.add_argument("--scopes", type=int, default=1, help="scopes the streams are spread over (default 1)")
    seed.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    seed.add_argument("--scope-prefix", default="seed", help="scope names: PREFIX0... (default seed)")
    seed.add_argument("--stream-prefix", default="stream", help="stream names (default stream)")
    seed.add_argument(
        "--start-ms",
        type=int,
        help="start of the history in ms since the Unix epoch (default: now minus the span)",
    )
    seed.add_argument("--span-hours", type=float, default=720.0, help="length of the history (default 720)")
    seed.add_argument(
        "--mix",
        type=_weights(ScaleMix),
        default=ScaleMix(),
        help="weights of epoch-making events (default split=50,merge=45,rolling=5); "
        "each roll commits 1-3 transactions besides --txns-per-stream",
    )
    seed.add_argument(
        "--txns-per-stream",
        type=int,
        default=20,
        help="transactions a stream, rolled ones aside (default 20)",
    )
    seed.add_argument(
        "--txn-mix",
        type=_weights(TxnMix),
        default=TxnMix(),
        help="weights of transaction end states (default committed=80,aborted=15,open=5)",
    )
    seed.add_argument("--max-segments", type=int, default=8, help="most segments in an epoch (default 8)")
    seed.add_argument(
        "--retention-fraction",
        type=float,
        default=0.25,
        help="share of streams with a TIME retention policy, cuts and truncation (default 0.25)",
    )
    seed.add_argument("--tags", type=int, default=10, help="size of the tag pool (default 10; 0: no tags)")
    # The recorded cuts and the seeded leases follow serve's own settings (and their defaults).
    for name in ("retention_frequency_ms", "txn_min_lease_ms", "txn_max_lease_ms"):
        add_setting(seed, name)
    seed.add_argument("--no-mark-streams", action="store_true", help="no _MARK<stream> streams")
    seed.add_argument(
        "--no-segment-store",
        action="store_true",
        help="skip the embedded segment store's rows (active segments, open transactions' segments)",
    )
    seed.add_argument("--resume", action="store_true", help="skip streams that exist (an earlier run's)")
    seed.add_argument(
        "--batch-epochs",
        type=int,
        default=50_000,
        help="epochs per COPY batch and per transaction; bounds memory (default 50000)",
    )
    seed.add_argument(
        "--chunk-epochs",
        type=int,
        default=1_000_000,
        help="with --one-stream-epochs: epochs per transaction (default 1000000)",
    )
    seed.add_argument("--no-analyze", action="store_true", help="no ANALYZE at the end")
    seed.add_argument("--quiet", action="store_true", help="no progress lines")
    certs = dev_commands.add_parser(
        "certs",
        help="write a throwaway CA and server and client certificates for local use and tests",
        description="Writes ca.pem and ca.key, server.pem and server.key (for localhost, 127.0.0.1, "
        "::1 and every --name), client.pem and client.key into DIR; keys are readable by their owner "
        "only. For local use and tests only: the CA's key is kept next to it.",
    )
    certs.add_argument("directory", metavar="DIR", help="where to write the PEM files (created if missing)")
    certs.add_argument(
        "--name",
        action="append",
        default=[],
        help="another host name or IP address of the server (repeatable)",
    )
    certs.add_argument("--client-name", default="pgcontroller", help="the client certificate's common name")
    certs.add_argument("--days", type=int, default=365, help="validity in days (default 365)")
    ha = dev_commands.add_parser(
        "ha",
        help="a highly available PostgreSQL on this machine: etcd and three nodes under Patroni",
        description="up: starts etcd and three PostgreSQL 15 nodes under Patroni on loopback ports, in "
        "synchronous mode (installing Debian's patroni and etcd-server first when missing and run as "
        "root), makes the service's role and database, and prints the multi-host --db-url for serve; "
        "a cluster already in DIR starts again as it was. status: its members. down: stops it "
        "(--purge: and removes DIR). partition: cuts a node (--node, default the leader) off from "
        "etcd and the other nodes with nftables rules on loopback (as root); it stays reachable "
        "through the printed side URL. heal: removes the rules. For tests and trying failover; "
        "docs/ha.md has the recipe for real machines.",
    )
    ha.add_argument("action", choices=("up", "down", "status", "partition", "heal"))
    ha.add_argument("--node", default=None, help="partition: the node to cut off (default: the leader)")
    ha.add_argument("--dir", default=".pgcontroller/ha", help="its files (default .pgcontroller/ha)")
    ha.add_argument("--purge", action="store_true", help="down: remove the cluster's files too")


def _spec(args: argparse.Namespace, now_ms: int) -> SeedSpec:
    span_ms = int(args.span_hours * 3_600_000)
    epochs_per_stream = args.epochs_per_stream
    if args.one_stream_epochs is not None:
        if epochs_per_stream is not None or args.total_epochs is not None:
            raise InvalidInput("--one-stream-epochs gives the one stream's epochs: no other epoch count")
        epochs_per_stream = 1  # the base the stream grows from (app/dev/long_history.py)
    if epochs_per_stream is None and args.total_epochs is None:
        epochs_per_stream = 100
    return SeedSpec(
        streams=1 if args.streams is None else args.streams,
        epochs_per_stream=epochs_per_stream,
        total_epochs=args.total_epochs,
        scopes=args.scopes,
        seed=args.seed,
        scope_prefix=args.scope_prefix,
        stream_prefix=args.stream_prefix,
        start_ms=now_ms - span_ms if args.start_ms is None else args.start_ms,
        span_ms=span_ms,
        scale_mix=args.mix,
        txns_per_stream=args.txns_per_stream,
        txn_mix=args.txn_mix,
        max_segments=args.max_segments,
        retention_fraction=args.retention_fraction,
        retention_frequency_ms=args.retention_frequency_ms,
        tag_pool=args.tags,
        mark_streams=not args.no_mark_streams,
        segment_store_rows=not args.no_segment_store,
        txn_limits=TxnLimits(min_lease_ms=args.txn_min_lease_ms, max_lease_ms=args.txn_max_lease_ms),
    )


def run_dev(args: argparse.Namespace) -> int:
    if args.dev_command == "certs":
        return _run_certs(args)
    if args.dev_command == "ha":
        return _run_ha(args)
    return _run_seed(args)


def _run_ha(args: argparse.Namespace) -> int:
    from app.dev import ha, partition

    root = Path(args.dir)
    try:
        if args.action == "up":
            state = ha.up(root)
            print(json.dumps({"db_url": state.service_url(), "members": ha.members(state)}))
        elif args.action == "status":
            print(json.dumps({"members": ha.members(ha.HaState.load(root.resolve()))}))
        elif args.action == "partition":
            state = ha.HaState.load(root.resolve())
            node = _ha_node(state, args.node)
            partition.partition(state, node)
            print(json.dumps({"partitioned": node.name, "side_url": state.side_url(node)}))
        elif args.action == "heal":
            partition.heal(ha.HaState.load(root.resolve()))
        else:
            with contextlib.suppress(ha.HaError):  # no cluster there: nothing to heal
                partition.heal(ha.HaState.load(root.resolve()))
            ha.down(root, purge=args.purge)
    except ha.HaError as exc:
        print(f"pgcontroller: {exc}", file=sys.stderr)
        return 1
    return 0


def _ha_node(state: ha_module.HaState, name: str | None) -> ha_module.NodePorts:
    from app.dev import ha

    node = ha.leader(state) if name is None else next((n for n in state.nodes if n.name == name), None)
    if node is None:
        known = ", ".join(n.name for n in state.nodes)
        raise ha.HaError(f"no node {name!r} (the nodes: {known})" if name else "the cluster has no leader")
    return node


def _run_certs(args: argparse.Namespace) -> int:
    from app.security.certs import make_dev_certs

    try:
        files = make_dev_certs(
            Path(args.directory), names=tuple(args.name), client_name=args.client_name, valid_days=args.days
        )
    except (ValueError, OSError) as exc:
        print(f"pgcontroller: {exc}", file=sys.stderr)
        return 2
    print(json.dumps({field: str(getattr(files, field)) for field in files.__dataclass_fields__}))
    return 0


def _run_seed(args: argparse.Namespace) -> int:
    from app.dev.seed import SeedProgress, seed_history

    try:
        spec = _spec(args, int(time.time() * 1000))
        spec.validate()
    except (ValueError, DomainError) as exc:
        print(f"pgcontroller: {exc}", file=sys.stderr)
        return 2
    last = [0.0]

    def progress(p: SeedProgress) -> None:
        now = time.monotonic()
        if args.quiet or (now - last[0] < _PROGRESS_EVERY_S and p.epochs_done < p.epochs_total):
            return
        last[0] = now
        left = (p.epochs_total - p.epochs_done) / p.epochs_per_s if p.epochs_per_s > 0 else 0.0
        print(
            f"seeded {p.streams_done}/{p.streams_total} streams, {p.epochs_done:,}/{p.epochs_total:,} epochs "
            f"({p.epochs_per_s:,.0f} epochs/s, {left:,.0f} s left)",
            file=sys.stderr,
        )

    async def run(url: str) -> int:
        if args.one_stream_epochs is not None:
            from app.dev.long_history import seed_long_stream

            summary = await seed_long_stream(
                url,
                spec,
                args.one_stream_epochs,
                resume=args.resume,
                chunk_epochs=args.chunk_epochs,
                analyze=not args.no_analyze,
                progress=progress,
            )
        else:
            summary = await seed_history(
                url,
                spec,
                resume=args.resume,
                batch_epochs=args.batch_epochs,
                analyze=not args.no_analyze,
                progress=progress,
            )
        print(
            json.dumps(
                {
                    "streams": summary.streams,
                    "skipped": summary.skipped,
                    "epochs": summary.epochs,
                    "seconds": round(summary.seconds, 3),
                    "epochs_per_second": round(summary.epochs_per_s),
                    "rows": summary.rows,
                }
            )
        )
        return 0

    try:
        if args.db_url:
            return asyncio.run(run(args.db_url))
        embedded = EmbeddedPostgres(args.data_dir)
        with embedded.running_for_command():
            return asyncio.run(run(embedded.url()))
    except DomainError as exc:
        print(f"pgcontroller: {exc}", file=sys.stderr)
        return 1
