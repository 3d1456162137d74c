"""With `--auth-enabled`, a path with a trailing slash and a HEAD request are authorized by the
rule of the canonical GET route they resolve to: the same 401, 403 and filtered listing."""

from __future__ import annotations

import aiohttp

from tests.security.conftest import Secured

READER_ACL = "prn::/,READ;prn::/scope:s1,READ"


async def test_slash_and_head_take_the_get_rule(secured: Secured) -> None:
    await secured.services.scopes.create_scope("s1")
    await secured.services.scopes.create_scope("s2")
    reader = await secured.add_user("reader", "r-pw", READER_ACL)
    async with aiohttp.ClientSession(secured.rest_base) as http:
        for method in ("GET", "HEAD"):
            async with http.request(method, "/v1/scopes/") as response:
                assert response.status == 401, method
            async with http.request(method, "/v1/scopes/s2/", headers={"authorization": reader}) as response:
                assert response.status == 403, method
            async with http.request(method, "/v1/scopes/s1/", headers={"authorization": reader}) as response:
                assert response.status == 200, method
        async with http.get("/v1/scopes/", headers={"authorization": reader}) as response:
            # Only what the reader may READ: s1, not s2 nor `_system`.
            assert [s["scopeName"] for s in (await response.json())["scopes"]] == ["s1"]
        async with http.delete("/v1/scopes/s1/", headers={"authorization": reader}) as response:
            assert response.status == 403
