"""REST views of a stream's transactions (our extension; Pravega's REST API has none): the
active ones, and what is known of one id. Read-only: writers open and end transactions over
gRPC, operators look at them here."""

from __future__ import annotations

from aiohttp import web

from app.api.rest.keys import TRANSACTIONS
from app.api.rest.models import txn_record_json, txn_state_json
from app.domain.txns import TxnId


def _stream_path(request: web.Request) -> tuple[str, str]:
    return request.match_info["scopeName"], request.match_info["streamName"]


async def list_transactions(request: web.Request) -> web.Response:
    """Every active transaction (OPEN, COMMITTING, ABORTING); a missing stream is 404."""
    scope, name = _stream_path(request)
    active = await request.app[TRANSACTIONS].list_open(scope, name)
    return web.json_response({"transactions": [txn_record_json(v.value) for v in active]})


async def get_transaction(request: web.Request) -> web.Response:
    """A malformed id is 400 (InvalidInput), a missing stream 404; an id the stream never had,
    or whose completed record was collected, is 200 with status UNKNOWN, as gRPC answers."""
    scope, name = _stream_path(request)
    txn = TxnId.parse(request.match_info["txnId"])
    lookup = await request.app[TRANSACTIONS].get(scope, name, txn)
    return web.json_response(txn_state_json(txn, lookup))


TRANSACTIONS_PATH = "/v1/scopes/{scopeName}/streams/{streamName}/transactions"

ROUTES = [
    web.get(TRANSACTIONS_PATH, list_transactions, allow_head=False),
    web.get(TRANSACTIONS_PATH + "/{txnId}", get_transaction, allow_head=False),
]
