"""The one declaration of which wire-command fields name a segment (`Names.SEGMENT` in
app/segmentstore/wire/commands.py), and the checks that read it: every text field of every
command is declared a segment name or not, and the declared ones are Pravega's; every segment
every command names is checked against the request's delegation token and for this store's
ownership of its container, whatever the field is called; a command's segments name it in the
controller's messages. Over TCP, a store owning none of the containers answers WrongHost to each
command naming a segment, and one owning a merge's target but not its source answers WrongHost to
the merge (the token check over TCP, driven the same way: test_tokens_wire.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from app.domain.containers import container_for_segment
from app.ports import HostAddress
from app.security.tokens import Outcome, Permission, TokenSigner, TokenVerifier, stream_resource
from app.segmentstore.client.replies import describe
from app.segmentstore.server import SegmentStoreServer
from app.segmentstore.server.ownership import TABLE_REQUESTS, ContainerOwnership, requested_segments
from app.segmentstore.server.tokens import TokenGate
from app.segmentstore.wire import commands as wc
from app.segmentstore.wire.commands import Wire
from app.store.segment_data import PgSegmentStorage
from tests.segmentstore.segment_commands import NAMING_SEGMENTS, annotations, build, name_count
from tests.segmentstore.server_harness import Client, rid

# The fields of Pravega's WireCommands (0.13, shared/protocol/.../WireCommands.java) that hold a
# segment's qualified name, under our field names; LocateOffset and OffsetLocated are version 17.
PRAVEGA_SEGMENT_FIELDS: dict[str, tuple[str, ...]] = {
    # requests
    "SetupAppend": ("segment",),
    "ReadSegment": ("segment",),
    "GetStreamSegmentInfo": ("segment_name",),
    "CreateSegment": ("segment",),
    "CreateTransientSegment": ("parent_segment",),
    "SealSegment": ("segment",),
    "DeleteSegment": ("segment",),
    "UpdateSegmentPolicy": ("segment",),
    "GetSegmentAttribute": ("segment_name",),
    "UpdateSegmentAttribute": ("segment_name",),
    "TruncateSegment": ("segment",),
    "LocateOffset": ("segment",),
    "MergeSegments": ("target", "source"),
    "MergeSegmentsBatch": ("target", "sources"),  # targetSegmentId, sourceSegmentIds
    "GetTableSegmentInfo": ("segment_name",),
    "CreateTableSegment": ("segment",),
    "DeleteTableSegment": ("segment",),
    "UpdateTableEntries": ("segment",),
    "RemoveTableKeys": ("segment",),
    "ReadTable": ("segment",),
    "ReadTableKeys": ("segment",),
    "ReadTableEntries": ("segment",),
    "ReadTableEntriesDelta": ("segment",),
    "ListStorageChunks": ("segment",),
    # replies
    "AppendSetup": ("segment",),
    "SegmentRead": ("segment",),
    "StreamSegmentInfo": ("segment_name",),
    "SegmentCreated": ("segment",),
    "SegmentSealed": ("segment",),
    "SegmentDeleted": ("segment",),
    "SegmentPolicyUpdated": ("segment",),
    "SegmentTruncated": ("segment",),
    "OffsetLocated": ("segment",),
    "SegmentsMerged": ("target", "source"),
    "SegmentsBatchMerged": ("target", "sources"),
    "WrongHost": ("segment",),
    "SegmentIsSealed": ("segment",),
    "SegmentAlreadyExists": ("segment",),
    "NoSuchSegment": ("segment",),
    "SegmentIsTruncated": ("segment",),
    "ErrorMessage": ("segment",),
    "TableSegmentInfo": ("segment_name",),
    "TableKeysRemoved": ("segment",),
    "TableRead": ("segment",),
    "TableSegmentNotEmpty": ("segment",),
    "TableKeyDoesNotExist": ("segment",),
    "TableKeyBadVersion": ("segment",),
    "TableKeysRead": ("segment",),
    "TableEntriesRead": ("segment",),
    "TableEntriesDeltaRead": ("segment",),
}
# The string fields that hold something else. A new string field must be marked Names.SEGMENT
# or be listed here: nothing holding a segment's name goes unmarked by accident.
NOT_SEGMENT_NAMES = {"delegation_token", "server_stack_trace", "correct_host", "message", "operation_name"}
_TEXT_KINDS = {Wire.STR, Wire.STRS, Wire.MERGED_SOURCES}

KEY = b"the cluster's delegation-token signing key, shared by the controller and every store"
T0 = 1_700_000_000.0
FOREIGN = "sc/other/0.#epoch.0"

ids = [cls.__name__ for cls in NAMING_SEGMENTS]


def test_every_text_field_of_every_command_is_declared_a_segment_name_or_not() -> None:
    unclassified = []
    for cls in wc.COMMANDS.values():
        for field, meta in annotations(cls).items():
            if wc.Names.SEGMENT in meta:
                assert _TEXT_KINDS & set(meta), f"{cls.__name__}.{field} is marked but holds no text"
            elif _TEXT_KINDS & set(meta) and field not in NOT_SEGMENT_NAMES:
                unclassified.append(f"{cls.__name__}.{field}")
    assert not unclassified, f"mark them Names.SEGMENT or list them in NOT_SEGMENT_NAMES: {unclassified}"


def test_the_declared_segment_fields_are_pravegas() -> None:
    declared = {cls.__name__: fields for cls, fields in wc.SEGMENT_FIELDS.items() if fields}
    assert declared == PRAVEGA_SEGMENT_FIELDS


def test_segments_named_lists_every_name_in_wire_order() -> None:
    batch = wc.MergeSegmentsBatch(1, "t", ("s1", "s2"), "tok")
    assert wc.segments_named(batch) == ("t", "s1", "s2")
    assert wc.segments_named(wc.MergeSegments(1, "t", "s", "tok")) == ("t", "s")
    assert wc.segments_named(wc.AppendBlockEnd(1, 0, b"", 0, 0)) == ()
    assert wc.segments_named(wc.KeepAlive()) == ()


def names_for(cls: type[wc.Command]) -> list[str]:
    return [f"sc/st/{n}.#epoch.0" for n in range(name_count(cls))]


@pytest.mark.parametrize("cls", NAMING_SEGMENTS, ids=ids)
def test_every_segment_a_command_names_is_checked_for_ownership(cls: type[wc.Command]) -> None:
    names = names_for(cls)
    expected = () if cls in TABLE_REQUESTS else tuple(names)  # any store serves table segments
    assert requested_segments(build(cls, names)) == expected


@pytest.mark.parametrize("cls", NAMING_SEGMENTS, ids=ids)
def test_every_segment_a_command_names_is_checked_against_its_token(cls: type[wc.Command]) -> None:
    gate = TokenGate(TokenVerifier(KEY, now=lambda: T0))
    good = TokenSigner(KEY, now=lambda: T0).issue(stream_resource("sc", "st"), Permission.READ_UPDATE)
    carries_token = "delegation_token" in annotations(cls)
    names = names_for(cls)
    verdict = gate.check(build(cls, names, good))
    # A command naming a segment without carrying a token (a reply) is refused all the same.
    assert verdict is not None and verdict.ok == carries_token
    for i in range(len(names)):
        one_foreign = [FOREIGN if j == i else name for j, name in enumerate(names)]
        verdict = gate.check(build(cls, one_foreign, good))
        assert verdict is not None and not verdict.ok, (cls.__name__, one_foreign)
        assert verdict.outcome is (Outcome.INSUFFICIENT if carries_token else Outcome.INVALID)
    verdict = gate.check(build(cls, names, ""))
    assert verdict is not None and not verdict.ok


def test_a_reply_is_described_by_the_first_segment_its_command_names() -> None:
    assert describe(wc.MergeSegmentsBatch(1, "t", ("s",), "")) == "MergeSegmentsBatch(t)"
    assert describe(wc.CreateTransientSegment(1, 2, "p", "")) == "CreateTransientSegment(p)"
    assert describe(wc.GetStreamSegmentInfo(1, "g", "")) == "GetStreamSegmentInfo(g)"
    assert describe(wc.KeepAlive()) == "KeepAlive"


# --- over TCP: a store that owns no container ------------------------------------------------

ME = HostAddress("127.0.0.1", 1)
ELSEWHERE = HostAddress("127.0.0.2", 2)
CONTAINERS = 4


@pytest.fixture
def ownership() -> ContainerOwnership:
    owned = ContainerOwnership(ME, CONTAINERS, [ME])
    owned.update({c: ELSEWHERE for c in range(CONTAINERS)})
    return owned


@pytest.fixture
async def owning_server(
    storage: PgSegmentStorage, ownership: ContainerOwnership
) -> AsyncIterator[SegmentStoreServer]:
    started = await SegmentStoreServer.start(storage, "127.0.0.1", 0, tail_wait_s=0.5, ownership=ownership)
    try:
        yield started
    finally:
        await started.close()


async def test_a_store_answers_wrong_host_to_every_command_naming_a_segment_it_does_not_own(
    owning_server: SegmentStoreServer,
) -> None:
    c = await Client.connect(owning_server.address)
    for cls in NAMING_SEGMENTS:
        if cls in TABLE_REQUESTS:
            continue  # served by any store (module docstring of ownership.py)
        names = names_for(cls)
        request_id = rid()
        reply = await c.call(build(cls, names, request_id=request_id))
        assert reply == wc.WrongHost(request_id, names[0], "", ""), cls.__name__
    await c.close()


def in_container(container: int) -> str:
    return next(
        name
        for n in range(1000)
        if container_for_segment(name := f"sc/st/{n}.#epoch.0", CONTAINERS) == container
    )


async def test_a_merge_whose_source_is_in_a_container_not_owned_is_wrong_host(
    owning_server: SegmentStoreServer, ownership: ContainerOwnership
) -> None:
    # Java routes a merge by its source and finds the target in the same container; a source of
    # another container (never made by Pravega's names) is not served by the target's owner.
    ownership.update({0: ME, **{c: ELSEWHERE for c in range(1, CONTAINERS)}})
    target, source = in_container(0), in_container(1)
    c = await Client.connect(owning_server.address)
    request_id = rid()
    reply = await c.call(wc.MergeSegments(request_id, target, source, ""))
    assert reply == wc.WrongHost(request_id, source, "", "")
    request_id = rid()
    transaction = f"{target}#transaction.{'0' * 32}"  # hashes with its parent, the target
    assert ownership.owns(transaction)
    reply = await c.call(wc.MergeSegmentsBatch(request_id, target, (transaction, source), ""))
    assert reply == wc.WrongHost(request_id, source, "", "")
    # The owned target itself is served (it does not exist: NoSuchSegment, not WrongHost).
    request_id = rid()
    assert isinstance(await c.call(wc.SealSegment(request_id, target, "")), wc.NoSuchSegment)
    await c.close()
