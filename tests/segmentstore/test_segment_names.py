"""The one declaration of which wire-command fields name a segment (`Names.SEGMENT` in
app/segmentstore/wire/commands.py): every text field of every command is declared a segment name
or not, the declared ones are Pravega's, and a command's segments name it in the controller's
messages."""

from __future__ import annotations

from app.segmentstore.client.replies import describe
from app.segmentstore.wire import commands as wc
from app.segmentstore.wire.commands import Wire
from tests.segmentstore.segment_commands import annotations

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


def test_a_reply_is_described_by_the_first_segment_its_command_names() -> None:
    assert describe(wc.MergeSegmentsBatch(1, "t", ("s",), "")) == "MergeSegmentsBatch(t)"
    assert describe(wc.CreateTransientSegment(1, 2, "p", "")) == "CreateTransientSegment(p)"
    assert describe(wc.GetStreamSegmentInfo(1, "g", "")) == "GetStreamSegmentInfo(g)"
    assert describe(wc.KeepAlive()) == "KeepAlive"
