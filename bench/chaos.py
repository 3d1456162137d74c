"""Chaos: a mixed workload for a bounded time while controllers, segment stores and PostgreSQL are
killed and restarted at random; then the checks. Prints figures and exits non-zero when a check fails.

    .venv/bin/python bench/chaos.py [--minutes 10] [--seed N] [--writers 2] [--txn-workers 1]
        [--streams 2] [--rate 100] [--fault-gap-s 15,30] [--down-s 0.5,3] [--work DIR]
        [--faults controller,segment-store,postgres|all] [--pause-s 2,14] [--processes 2]

The cluster is its own: an embedded PostgreSQL with its durability on (never a shared one), two
controllers on one database (different ports) and two `pgcontroller segment-store` processes. The
first controller is one `serve --no-embedded-segment-store` process; the second is `serve
--processes N` (`--processes`, default 2, the default shape of `serve` on this machine): a
supervisor and N children sharing its ports, each child a controller and a member of the embedded
segment store behind them (1: one process without a store, as the first). The workload: the
real `pravega` Python client (0.3.8) writing events with unique ids (`--writers`, `--rate` events/s
each, flushed every 20) and running transactions (`--txn-workers`: five events each, every third
aborted), and a reader group of two readers per stream reading throughout, each client bound to one
controller; and through gRPC, in a fixed rotation over the streams, manual scales (split or merge,
waited to the end), configuration updates, truncations at the stream's head, reader groups created
and deleted.
Faults, in a fixed order (SIGKILL a controller, SIGKILL a segment store, crash PostgreSQL by
immediate shutdown), victims alternating, at seeded random times `--fault-gap-s` apart, each
victim restarted on its own ports after `--down-s`; none in the last 15 s. `--faults` names the
kinds and their order; beyond the three above (the default), `pause-controller` and `pause-store`
freeze a process with SIGSTOP for `--pause-s` (past the 5 s member TTL and the 10 s store expiry,
so the cluster moves its buckets or containers while the frozen process still holds its sockets and
sessions) and then thaw it, `controller+store` kills one of each at once, and `child` SIGKILLs one
child of the second controller, which its supervisor restarts; `all` is all seven. A fault on the
whole second controller reaches its supervisor and every child.

Checks, after the workload and bounded settle waits: every acknowledged event read exactly once
(a writer's events up to its last returned flush), none read twice; every acknowledged transaction
in its final state (committed ones' events all read, aborted ones' none, the others all or none);
no stream in a transient state, no transaction committing or aborting, no request left (pending or
parked); every bucket held by exactly one live controller, and no bucket reported by two at once
during the run (a sample each second, confirmed by a second sample). Recovery per fault kind:
seconds from the fault until every writer had an acknowledgement again, until the first
acknowledgement of any kind (the survivors carry on), and until the victim served again.
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.chaos import ALL_FAULT_KINDS, FAULT_KINDS, ChaosOptions, run_chaos


def pair(text: str) -> tuple[float, float]:
    low, _, high = text.partition(",")
    values = (float(low), float(high or low))
    if not 0 <= values[0] <= values[1]:
        raise argparse.ArgumentTypeError(f"want LOW,HIGH with 0 <= LOW <= HIGH, got {text!r}")
    return values


def kinds(text: str) -> tuple[str, ...]:
    if text == "all":
        return ALL_FAULT_KINDS
    chosen = tuple(k.strip() for k in text.split(",") if k.strip())
    unknown = [k for k in chosen if k not in ALL_FAULT_KINDS]
    if unknown or not chosen:
        raise argparse.ArgumentTypeError(
            f"unknown fault kinds {unknown}; known: {', '.join(ALL_FAULT_KINDS)}"
        )
    return chosen


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=10.0, help="workload duration (default 10)")
    parser.add_argument("--seed", type=int, default=None, help="fault timing seed (default: random, printed)")
    parser.add_argument("--writers", type=int, default=2)
    parser.add_argument("--txn-workers", type=int, default=1)
    parser.add_argument("--streams", type=int, default=2)
    parser.add_argument("--rate", type=float, default=100.0, help="events/s per writer")
    parser.add_argument("--fault-gap-s", type=pair, default=(15.0, 30.0))
    parser.add_argument("--down-s", type=pair, default=(0.5, 3.0))
    parser.add_argument("--settle-s", type=float, default=180.0)
    parser.add_argument(
        "--faults",
        type=kinds,
        default=FAULT_KINDS,
        help=f"comma-separated, of {', '.join(ALL_FAULT_KINDS)}; or all",
    )
    parser.add_argument("--pause-s", type=pair, default=(2.0, 14.0), help="how long a pause fault freezes")
    parser.add_argument(
        "--processes", type=int, default=2, help="processes of the second controller (default 2)"
    )
    parser.add_argument(
        "--work",
        type=Path,
        default=None,
        help="logs go here (default: a temporary dir, removed when every check passes)",
    )
    args = parser.parse_args(argv)
    if args.minutes <= 0 or args.writers < 1 or args.streams < 1 or args.rate <= 0:
        parser.error("--minutes, --rate must be positive; --writers and --streams at least 1")
    if args.processes < 1 or ("child" in args.faults and args.processes < 2):
        parser.error("--processes must be at least 1, and at least 2 for the child fault")
    return args


async def main(argv: list[str]) -> int:
    args = parse(argv)
    seed = args.seed if args.seed is not None else secrets.randbelow(2**31)
    work = args.work or Path(tempfile.mkdtemp(prefix="chaos-"))
    work.mkdir(parents=True, exist_ok=True)
    options = ChaosOptions(
        seconds=args.minutes * 60, seed=seed, work=work, streams=args.streams, writers=args.writers,
        txn_workers=args.txn_workers, writer_rate=args.rate, fault_gap_s=args.fault_gap_s,
        down_s=args.down_s, settle_s=args.settle_s, fault_kinds=args.faults, pause_s=args.pause_s,
        processes=args.processes,
    )  # fmt: skip
    try:
        report = await run_chaos(options)
    except BaseException:
        print(f"the chaos run itself failed (seed {seed}); logs kept in {work}", file=sys.stderr)
        raise
    for line in report.lines():
        print(line)
    failures = report.failures()
    print("verdict: " + ("PASS" if not failures else "FAIL: " + " | ".join(failures)))
    if failures:
        print(f"logs kept in {work}")
    elif args.work is None:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1:])))
