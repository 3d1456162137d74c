"""A network partition of one node of the `dev ha` cluster, on one machine: nftables rules that
drop the loopback packets between the node and everyone else, while whatever reaches the node
through its side address (`NodePorts.side`, `HaState.side_url`) stays on its side.

Cut: the node's Patroni to etcd (it reaches etcd through its side address only), everyone's
connections to the node's PostgreSQL on the shared address (the standbys' replication, other
clients), and the node's Patroni REST API. Not cut: connections the node's own processes open to
the others (all leave from the shared address); while cut off from etcd the node cannot learn of
a new leader, so it opens none that matter. Rules are dropped packets, not refusals: established
connections hang, as across a real partition.

Needs root and nftables (installed from Debian on first use, as `ensure_installed` does Patroni).
"""

from __future__ import annotations

import os
import shutil
import subprocess

from app.dev.ha import HOST, HaError, HaState, NodePorts


def _table(state: HaState) -> str:
    # One table per cluster (its etcd port is its own), so two clusters' rules never meet.
    return f"pgcontroller_ha_{state.etcd_client}"


def _nft_command() -> str | None:
    return shutil.which("nft") or next(
        (p for p in ("/usr/sbin/nft", "/sbin/nft") if os.access(p, os.X_OK)), None
    )


def ensure_nft() -> str:
    """The nft command, installed from Debian when missing (as root)."""
    found = _nft_command()
    if found is not None:
        return found
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise HaError("a partition needs nftables and root: `apt-get install nftables`")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for argv in (["apt-get", "update"], ["apt-get", "install", "-y", "--no-install-recommends", "nftables"]):
        done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise HaError(f"{' '.join(argv)} failed: {done.stderr.strip()[-2000:]}")
    return ensure_nft()


def _nft(script: str) -> None:
    done = subprocess.run(
        [ensure_nft(), "-f", "-"], input=script, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise HaError(f"nft refused the rules: {done.stderr.strip()}")


def partition(state: HaState, node: NodePorts) -> None:
    """Cuts `node` off from etcd, the other nodes and every client on the shared address."""
    rules = [
        f"ip daddr {node.side} tcp dport {state.etcd_client} drop",
        f"ip saddr {node.side} tcp sport {state.etcd_client} drop",
        f"ip daddr {HOST} tcp dport {node.postgres} drop",
        f"ip saddr {HOST} tcp sport {node.postgres} drop",
        f"tcp dport {node.rest} drop",
        f"tcp sport {node.rest} drop",
    ]
    table = _table(state)
    body = "\n".join(f"    {rule}" for rule in rules)
    _nft(
        f"table ip {table} {{\n  chain out {{\n    type filter hook output priority 0; policy accept;\n"
        f"{body}\n  }}\n}}\n"
    )


def heal(state: HaState) -> None:
    """Removes the cluster's partition rules (none there, or no nftables: nothing to do)."""
    nft = _nft_command()
    if nft is None:
        return
    listed = subprocess.run([nft, "list", "tables"], capture_output=True, text=True, check=False)
    if f"table ip {_table(state)}" in listed.stdout.splitlines():
        _nft(f"delete table ip {_table(state)}\n")
