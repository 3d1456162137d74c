"""The log output: JSON lines that parse and carry the request's context, the text format as it
was plus the request id, bucket lists as ranges, Alembic quiet unless DEBUG."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest

from app.observability.context import bound, given_or_new
from app.observability.logs import configure, number_ranges


@pytest.fixture
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    alembic_level = logging.getLogger("alembic").level
    yield
    for handler in list(root.handlers):
        root.removeHandler(handler)
    for handler in handlers:
        root.addHandler(handler)
    root.setLevel(level)
    logging.getLogger("alembic").setLevel(alembic_level)


def test_json_lines_parse_and_carry_time_level_logger_message_and_context(restore_logging: None) -> None:
    out = io.StringIO()
    configure("INFO", "json", stream=out, force=True)
    log = logging.getLogger("pgcontroller.test")
    log.info("outside %s", "any call")
    with bound(request="4242", scope_name="sc", stream_name="s"):
        log.warning("inside\na call")
        try:
            raise RuntimeError("boom")
        except RuntimeError:
            log.exception("it failed")
    log.debug("below the threshold")
    lines = out.getvalue().splitlines()
    assert len(lines) == 3  # one line per record: the message's and traceback's newlines escaped
    first, second, third = (json.loads(line) for line in lines)
    assert first["message"] == "outside any call" and "request_id" not in first
    assert first["level"] == "INFO" and first["logger"] == "pgcontroller.test"
    assert first["time"].endswith("Z") and first["time"][10] == "T"
    assert second["message"] == "inside\na call" and second["level"] == "WARNING"
    assert (second["request_id"], second["scope"], second["stream"]) == ("4242", "sc", "s")
    assert third["level"] == "ERROR" and "RuntimeError: boom" in third["exception"]
    assert third["request_id"] == "4242"


def test_text_format_is_unchanged_but_names_the_request(restore_logging: None) -> None:
    out = io.StringIO()
    configure("INFO", "text", stream=out, force=True)
    log = logging.getLogger("pgcontroller.test")
    log.info("plain")
    with bound(request="77"):
        log.info("traced")
    plain, traced = out.getvalue().splitlines()
    assert plain.endswith(" INFO pgcontroller.test: plain")
    assert traced.endswith(" INFO pgcontroller.test: traced request_id=77")


def test_context_is_restored_after_the_block() -> None:
    from app.observability import context

    with bound(request="1", scope_name="a"):
        with bound(request="2"):
            assert (context.request_id.get(), context.scope.get()) == ("2", "a")
        assert context.request_id.get() == "1"
    assert (context.request_id.get(), context.scope.get()) == (None, None)


def test_alembic_is_quiet_unless_debug(restore_logging: None) -> None:
    configure("INFO", "text", stream=io.StringIO(), force=True)
    assert not logging.getLogger("alembic.runtime.migration").isEnabledFor(logging.INFO)
    assert logging.getLogger("pgcontroller").isEnabledFor(logging.INFO)
    configure("DEBUG", "text", stream=io.StringIO(), force=True)
    assert logging.getLogger("alembic.runtime.migration").isEnabledFor(logging.INFO)


def test_the_pools_reconnect_failures_are_one_line_each(restore_logging: None) -> None:
    # asyncpg's pool logs each failed reconnect of a database outage with a traceback, once a
    # second; the exception's one line says what happened.
    out = io.StringIO()
    configure("INFO", "text", stream=out, force=True)
    configure("INFO", "text", stream=out, force=True)  # configured twice: still one filter
    try:
        raise ConnectionRefusedError(111, "Connect call failed ('127.0.0.1', 5432)")
    except ConnectionRefusedError:
        logging.getLogger("asyncpg.pool").warning(
            "Failed to restore the pool connection floor; retrying", exc_info=True
        )
        logging.getLogger("pgcontroller.other").warning("kept whole", exc_info=True)
    lines = out.getvalue().splitlines()
    pool = [line for line in lines if "asyncpg.pool" in line]
    assert len(pool) == 1
    assert pool[0].endswith(
        "Failed to restore the pool connection floor; retrying: "
        "ConnectionRefusedError(111, \"Connect call failed ('127.0.0.1', 5432)\")"
    ), pool
    assert lines.count("Traceback (most recent call last):") == 1, lines


def test_unknown_format_is_refused() -> None:
    with pytest.raises(ValueError, match="text, json"):
        configure("INFO", "xml", stream=io.StringIO(), force=True)


def test_bucket_lists_read_as_ranges() -> None:
    assert number_ranges(range(100)) == "0-99"
    assert number_ranges([*range(50), *range(60, 100)]) == "0-49,60-99"
    assert number_ranges([7, 3, 4, 5, 9]) == "3-5,7,9"
    assert number_ranges([]) == ""
    # Two controllers share the buckets alternately: one line, not fifty numbers.
    assert number_ranges(range(0, 100, 2)) == "0-98 step 2"
    assert number_ranges(range(1, 100, 2)) == "1-99 step 2"
    assert number_ranges([*range(0, 30, 3), 50, 51, 52]) == "0-27 step 3,50-52"
    assert number_ranges([1, 2, 10, 20]) == "1-2,10,20"
    scattered = [n * n for n in range(1, 21)]
    assert number_ranges(scattered) == "1,4,9,16,25,36,49,64,81,100,121,144,... (8 more)"


def test_a_given_request_id_is_kept_only_when_printable_and_short() -> None:
    assert given_or_new("12345") == "12345"
    for bad in (None, "", "   ", "a\nb", "x" * 65):
        made = given_or_new(bad)
        assert made.isdigit() and made != bad
