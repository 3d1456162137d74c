"""The embedded store's dispatch table (connection.ROUTES): one route per declared wire command,
every request a client sends routed to what serves it, and every refusal able to echo its
request's id."""

from __future__ import annotations

import dataclasses

from app.segmentstore.server.connection import ROUTES, Connection
from app.segmentstore.wire import commands as wc
from tests.segmentstore.segment_commands import build, name_count


def _fields(cls: type[wc.Command]) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]


def _not_a_request(cls: type[wc.Command]) -> bool:
    route = ROUTES[cls]
    return route.serve is Connection._request and route.answer is ROUTES[wc.SegmentCreated].answer


def test_every_declared_command_has_exactly_one_route() -> None:
    assert set(ROUTES) == set(wc.COMMANDS.values())


def test_every_command_carrying_a_token_is_served_not_refused_as_a_reply() -> None:
    # A client's request carries a delegation token (replies never do): a request declared
    # without a route would be taken for a reply and close the connection.
    requests = [cls for cls in ROUTES if "delegation_token" in _fields(cls)]
    assert wc.CreateSegment in requests and wc.LocateOffset in requests
    assert [cls.__name__ for cls in requests if _not_a_request(cls)] == []


def test_the_append_path_and_the_handshake_are_routed_too() -> None:
    served: list[type[wc.Command]] = [
        wc.Hello,
        wc.KeepAlive,
        wc.AppendBlock,
        wc.AppendBlockEnd,
        wc.ConditionalBlockEnd,
    ]
    refused: list[type[wc.Command]] = [wc.SegmentCreated, wc.DataAppended, wc.Padding, wc.Event]
    assert [cls.__name__ for cls in served if _not_a_request(cls)] == []
    assert [cls.__name__ for cls in refused if not _not_a_request(cls)] == []


def test_every_command_that_can_be_refused_echoes_its_request_id() -> None:
    # WrongHost and AuthTokenCheckFailed answer commands naming a segment or carrying a token.
    checked = [cls for cls in ROUTES if wc.SEGMENT_FIELDS[cls] or "delegation_token" in _fields(cls)]
    assert checked
    for request_id, cls in enumerate(checked, start=7):
        cmd = build(cls, ["sc/st/0.#epoch.0"] * name_count(cls), "token", request_id)
        assert ROUTES[cls].echo(cmd).request_id == request_id, cls.__name__


def test_refusals_of_reads_appends_and_table_updates_report_their_offsets() -> None:
    read = wc.ReadSegment("s", 40, 10, "", 3)
    assert ROUTES[wc.ReadSegment].echo(read).offset == 40
    block_end = wc.AppendBlockEnd(9, 0, b"", 1, 12, 4)
    echoed = ROUTES[wc.AppendBlockEnd].echo(block_end)
    assert (echoed.request_id, echoed.writer_id, echoed.event_number) == (4, 9, 12)
    update = wc.UpdateTableEntries(5, "t", "", (), 77)
    assert ROUTES[wc.UpdateTableEntries].echo(update).offset == 77


def test_requests_are_tagged_with_their_wire_id_and_the_append_path_is_not() -> None:
    # A tagged route's request id becomes the log context's while it is served: it must have one.
    tagged = {cls for cls, route in ROUTES.items() if route.tagged}
    assert [cls.__name__ for cls in tagged if "request_id" not in _fields(cls)] == []
    assert {wc.SetupAppend, wc.ReadSegment, wc.CreateSegment, wc.SealSegment} <= tagged
    per_event = {wc.AppendBlock, wc.AppendBlockEnd, wc.ConditionalBlockEnd, wc.ConditionalAppend}
    assert not per_event & tagged
