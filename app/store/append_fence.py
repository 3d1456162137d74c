"""Which store may append: the container map's row of the segment's container, read and
share-locked by each append statement itself (sql/queries/segment_data.sql `append`).

Invariant: an append commits only while the map names this store for its segment's container, or
names nobody for it (the static hosts' rule, which the store applies itself before appending).
The row stays share-locked until the append's transaction ends, so the leader's move of the
container waits for the appends in flight, and an append after the move sees the new owner (a
locking read sees the latest committed row). A store frozen past its expiry and thawed therefore
cannot commit, after the new owner told a writer its last event number, an append the writer
then resends there.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.domain.containers import container_for_segment
from app.ports import HostAddress


@dataclass
class AppendFence:
    container_count: int
    # Known once the store listens (its port may be chosen then); no append is served before.
    me: HostAddress | None = None

    def arguments(self, segment: str) -> tuple[int | None, str | None, int | None]:
        """The statement's container, host and port: all None for an unfenced append."""
        if self.me is None:
            return None, None, None
        return container_for_segment(segment, self.container_count), self.me.host, self.me.port
