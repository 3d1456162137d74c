"""The name table in docs/operations.md's `## Metrics` section is the registry's: same names,
kinds, labels and Pravega names, row for row, so an operator's dashboard built from the docs
finds every series; and every name follows Prometheus' conventions."""

from __future__ import annotations

import re
from pathlib import Path

from app.metrics.names import DEFINITIONS, Kind
from app.metrics.registry import REGISTRY

DOC = Path(__file__).resolve().parents[2] / "docs" / "operations.md"


def documented_rows() -> list[tuple[str, str, str, str]]:
    text = DOC.read_text(encoding="utf-8")
    section = text.split("\n## Metrics\n", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) == 4 and cells[0].startswith(("`pgcontroller_", "`pravega_")):
            rows.append(tuple(cell.strip("`") for cell in cells))
    return rows  # type: ignore[return-value]


def expected_rows() -> list[tuple[str, str, str, str]]:
    return [(d.exposed, d.kind.value, ", ".join(d.labels), d.pravega or "(ours)") for d in DEFINITIONS]


def test_docs_table_is_the_registry() -> None:
    assert documented_rows() == expected_rows()


def test_registry_holds_exactly_the_table() -> None:
    families = {metric.name: metric.type for metric in REGISTRY.collect()}
    # prometheus-client names a counter's family without `_total`.
    assert families == {d.name: d.kind.value for d in DEFINITIONS}


def test_names_follow_prometheus_conventions() -> None:
    for d in DEFINITIONS:
        assert re.fullmatch(r"(pravega_controller|pgcontroller)_[a-z0-9_]+", d.name), d.name
        assert not d.name.endswith("_total"), d.name
        if d.kind is Kind.HISTOGRAM:
            assert d.name.endswith("_seconds"), d.name
        if d.pravega:
            assert d.pravega.startswith("pravega.controller."), d.pravega
            assert d.name.startswith("pravega_controller_"), d.name
