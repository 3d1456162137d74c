"""Pravega's REST `readergroups` paths (Controller.yaml): list a scope's reader groups, show one
group's properties, delete one group.

The controller does not read a group's state stream, so `onlineReaderIds` (which Java takes
from the readers' shared state) is always empty, and `streamList` is the group's configured
streams rather than the streams its readers currently hold segments of.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aiohttp import web

from app.domain.errors import NotFound
from app.domain.readergroups import ReaderGroupRecord
from app.services.readergroups import DeleteStatus, ReaderGroupService

READER_GROUPS = web.AppKey("reader_groups", ReaderGroupService)
READER_GROUPS_PATH = "/v1/scopes/{scopeName}/readergroups"
READER_GROUP_PATH = READER_GROUPS_PATH + "/{readerGroupName}"


def reader_group_json(group: ReaderGroupRecord) -> dict[str, Any]:
    """ReaderGroupProperty."""
    return {
        "scopeName": group.scope,
        "readerGroupName": group.name,
        "streamList": [str(s) for s in group.config.streams],
        "onlineReaderIds": [],
    }


async def list_reader_groups(request: web.Request) -> web.Response:
    """ReaderGroupsList; a missing scope is 404."""
    names = await request.app[READER_GROUPS].list_reader_groups(request.match_info["scopeName"])
    return web.json_response({"readerGroups": [{"readerGroupName": n} for n in names]})


async def _group(request: web.Request) -> ReaderGroupRecord:
    scope, name = request.match_info["scopeName"], request.match_info["readerGroupName"]
    group = await request.app[READER_GROUPS].get_reader_group(scope, name)
    if group is None:
        raise NotFound(f"reader group {scope}/{name} not found")
    return group


async def get_reader_group(request: web.Request) -> web.Response:
    return web.json_response(reader_group_json(await _group(request)))


async def delete_reader_group(request: web.Request) -> web.Response:
    """As Java's resource does through the client: the stored id is the one deleted. 204 once
    the group is gone; 404 when there is none (or it was replaced meanwhile)."""
    group = await _group(request)
    status = await request.app[READER_GROUPS].delete_reader_group(group.scope, group.name, str(group.id))
    if status is DeleteStatus.RG_NOT_FOUND:
        raise NotFound(f"reader group {group.scope}/{group.name} not found")
    if status is not DeleteStatus.SUCCESS:
        raise web.HTTPInternalServerError(text=f"deleting reader group {group.scope}/{group.name} failed")
    return web.Response(status=204)


def extension(reader_groups: ReaderGroupService) -> Callable[[web.Application], None]:
    def extend(app: web.Application) -> None:
        app[READER_GROUPS] = reader_groups
        app.add_routes(
            [
                web.get(READER_GROUPS_PATH, list_reader_groups, allow_head=False),
                web.get(READER_GROUP_PATH, get_reader_group, allow_head=False),
                web.delete(READER_GROUP_PATH, delete_reader_group),
            ]
        )

    return extend
