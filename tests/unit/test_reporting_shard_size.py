"""reporting.segments finds a segment's sealed size in the shard of its creation epoch, a divisor
written into the view's SQL; the controller shards by SEALED_SIZE_SHARD_EPOCHS. Were the two ever
to differ, the view would silently answer NULL sizes, so the text is held to the constant."""

from __future__ import annotations

import re
from pathlib import Path

from app.domain.records import SEALED_SIZE_SHARD_EPOCHS

VIEW = Path(__file__).resolve().parents[2] / "sql" / "reporting" / "20_scaling.sql"


def test_the_segments_view_divides_creation_epochs_by_the_controllers_shard_size() -> None:
    sql = "\n".join(line.split("--", 1)[0] for line in VIEW.read_text().splitlines())
    divisors = re.findall(r"creation_epoch\s*/\s*(\d+)", sql)
    assert divisors, "reporting.segments no longer looks sizes up by creation epoch: update this test"
    assert {int(d) for d in divisors} == {SEALED_SIZE_SHARD_EPOCHS}
