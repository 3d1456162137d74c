"""A writer that sets up again (a new connection after its old one broke, to this store or to
another store of the same containers) is told the last event number that will ever be stored for
it before its resend: appends still on their way when it asks, here or in another store's open
transaction, are waited for. A smaller answer makes the client resend events in a block whose
last number is new, and that block is stored whole, the events already stored included.

Found by the chaos run (tests/e2e/test_chaos_pauses.py): a `serve --processes 2` child killed
while committing, the writer set up on its sibling before that commit ended, and one event was
read twice."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import asyncpg
from asyncpg.transaction import Transaction

from app.segmentstore.server.acks import MAX_APPENDS_IN_FLIGHT
from app.segmentstore.wire import commands as wc
from app.segmentstore.wire.codec import encode
from app.store import queries
from app.store.segment_data import attribute_uuid
from tests.segmentstore.server_harness import Client, event, rid, wid

SEG = "resume/s/0.#epoch.0"
OTHER = "resume/s/1.#epoch.0"
HELD_S = 0.6


def _event(n: int) -> bytes:
    return event(n.to_bytes(4, "big") * 4)


async def _events_of(client: Client, segment: str) -> list[bytes]:
    data = await client.read(segment, 0)
    assert isinstance(data, wc.SegmentRead), data
    size = len(_event(0))
    return [data.data[i : i + size] for i in range(0, len(data.data), size)]


async def test_setup_waits_for_another_store_s_open_append_and_answers_what_it_committed(
    client: Client, db_url: str
) -> None:
    await client.create(SEG)
    writer = wid()
    await client.setup(SEG, writer)
    for n in range(1, 6):
        assert isinstance(await client.append(writer, _event(n), n), wc.DataAppended)
    other_store = await asyncpg.connect(db_url)
    try:
        # Event 6 as another store appends it: its transaction open, its commit on its way.
        committing = other_store.transaction()
        await committing.start()
        sql = queries.load("segment_data")["append"]
        await other_store.fetchrow(
            sql, SEG, attribute_uuid(writer), _event(6), 6, None, 0, None, None, None, None
        )
        again = await Client.connect(client.writer.get_extra_info("peername"))
        try:
            await again.send(wc.SetupAppend(rid(), writer, SEG, ""))
            await again.nothing_within(HELD_S)
            await committing.commit()
            answer = await again.recv()
            assert isinstance(answer, wc.AppendSetup) and answer.last_event_number == 6, answer
            # The client resends what follows the answer, in one block.
            block = _event(7) + _event(8)
            reply = await again.append(writer, block, 8, num_event=2)
            assert isinstance(reply, wc.DataAppended), reply
        finally:
            await again.close()
    finally:
        await other_store.close()
    assert await _events_of(client, SEG) == [_event(n) for n in range(1, 9)]


@asynccontextmanager
async def _segment_held(db_url: str, name: str) -> AsyncIterator[Transaction]:
    """`name`'s row locked by another session until the transaction yielded ends: appends to it
    wait, and with them the group commit they are in."""
    holder = await asyncpg.connect(db_url)
    try:
        held = holder.transaction()
        await held.start()
        await holder.execute("SELECT 1 FROM embedded_segments WHERE name = $1 FOR UPDATE", name)
        yield held
    finally:
        await holder.close()


async def _set_up_again_once_released(again: Client, writer: int, held: Transaction) -> None:
    """The writer sets up on `again`: no answer while its earlier block waits behind the held
    segment; once released, that block's number; then its resend of what follows is stored."""
    await again.send(wc.SetupAppend(rid(), writer, SEG, ""))
    await again.nothing_within(HELD_S)
    await held.rollback()
    answer = await again.recv()
    assert isinstance(answer, wc.AppendSetup) and answer.last_event_number == 1, answer
    assert isinstance(await again.append(writer, _event(2) + _event(3), 3, num_event=2), wc.DataAppended)


async def test_setup_waits_for_this_store_s_appends_queued_behind_a_commit(
    client: Client, db_url: str
) -> None:
    await client.create(SEG)
    await client.create(OTHER)
    address = client.writer.get_extra_info("peername")
    blocked_writer, writer = wid(), wid()
    first = await Client.connect(address)
    second = await Client.connect(address)
    again = await Client.connect(address)
    try:
        await second.setup(SEG, writer)
        await first.setup(OTHER, blocked_writer)
        async with _segment_held(db_url, OTHER) as held:
            # A group commit waits on the held segment; the writer's append queues behind it.
            await first.send(wc.AppendBlockEnd(blocked_writer, 0, _event(1), 1, 1, rid()))
            await second.send(wc.AppendBlockEnd(writer, 0, _event(1), 1, 1, rid()))
            await second.nothing_within(HELD_S)
            # The writer's connection broke (as its client sees it); it sets up on another one.
            await _set_up_again_once_released(again, writer, held)
    finally:
        for each in (first, second, again):
            await each.close()
    assert await _events_of(client, SEG) == [_event(n) for n in range(1, 4)]


async def test_setup_waits_for_the_writer_s_blocks_another_connection_holds_for_want_of_room(
    client: Client, db_url: str
) -> None:
    """The old connection's pipeline is full: its writer's next block waits there, not yet
    handed to storage, when the writer sets up again elsewhere."""
    await client.create(SEG)
    await client.create(OTHER)
    address = client.writer.get_extra_info("peername")
    filler, writer = wid(), wid()
    old, again = await Client.connect(address), await Client.connect(address)
    try:
        await old.setup(OTHER, filler)
        await old.setup(SEG, writer)
        async with _segment_held(db_url, OTHER) as held:
            frames = b"".join(
                encode(wc.AppendBlockEnd(filler, 0, _event(n), 1, n, rid()))
                for n in range(1, MAX_APPENDS_IN_FLIGHT + 1)
            )
            await old.send_raw(frames + encode(wc.AppendBlockEnd(writer, 0, _event(1), 1, 1, rid())))
            await old.nothing_within(HELD_S)
            await _set_up_again_once_released(again, writer, held)
    finally:
        for each in (old, again):
            await each.close()
    assert await _events_of(client, SEG) == [_event(n) for n in range(1, 4)]
