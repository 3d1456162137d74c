"""The process's one metric registry, built from the name table (names.py), and its exposition.

Invariant: each metric object exists once, made from its table row, so a name never drifts from
the docs; gauges that read the database are filled by async refreshers just before a scrape, so a
scrape never blocks the loop on I/O inside prometheus-client's synchronous collect."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from app.metrics.names import DEFINITIONS, Kind, MetricDef

__all__ = ["CONTENT_TYPE", "REGISTRY", "Refresher", "counter", "gauge", "histogram", "render"]

Refresher = Callable[[], Awaitable[None]]
Metric = Counter | Gauge | Histogram

# The classic text format every Prometheus reads (2.x too); our names are all legacy-valid, so
# the body is the same as the 1.0.0 format's that newer prometheus-client versions announce.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
REGISTRY = CollectorRegistry(auto_describe=True)
# Latencies of calls that mostly take 1-50 ms on this design (one or two database round trips);
# the tail up to 10 s shows a stalled database or lock wait.
_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


def _make(definition: MetricDef) -> Metric:
    # prometheus-client adds `_total` to a counter's name itself.
    args = (definition.name, definition.help, definition.labels)
    if definition.kind is Kind.COUNTER:
        return Counter(*args, registry=REGISTRY)
    if definition.kind is Kind.GAUGE:
        return Gauge(*args, registry=REGISTRY)
    return Histogram(*args, registry=REGISTRY, buckets=_BUCKETS)


_METRICS: dict[str, Metric] = {d.name: _make(d) for d in DEFINITIONS}


T = TypeVar("T")


def _typed(name: str, kind: type[T]) -> T:
    metric = _METRICS[name]
    if not isinstance(metric, kind):
        raise TypeError(f"{name} is not a {kind.__name__}")
    return metric


def counter(name: str) -> Counter:
    return _typed(name, Counter)


def gauge(name: str) -> Gauge:
    return _typed(name, Gauge)


def histogram(name: str) -> Histogram:
    return _typed(name, Histogram)


def render() -> bytes:
    """The text exposition of every metric (Prometheus' format 0.0.4)."""
    return generate_latest(REGISTRY)
