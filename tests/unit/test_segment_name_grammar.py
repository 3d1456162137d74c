"""app/domain/segment_names.py: Pravega's segment-name grammar (NameUtils), and that it is the
only place in app/ and workers/ that spells the name delimiters."""

from __future__ import annotations

import re
import uuid
from pathlib import Path

import pytest

from app.domain import segment_names as sn
from app.domain.autoscale import parse_stream_segment_name as autoscale_parse
from app.domain.containers import segment_base_name
from app.domain.ids import qualified_segment_name, segment_id, transaction_segment_name
from app.domain.kvtables import table_segment_name

_ROOT = Path(__file__).resolve().parents[2]
_HEX32 = "0123456789abcdef0123456789abcdef"
_ID32 = "01234567890123456789012345678901"  # NameUtilsTest's id: digits, 32 of them


# region building


def test_stream_segment_name_carries_the_epoch_even_zero() -> None:
    assert sn.stream_segment_name("sc", "st", 3, 0) == "sc/st/3.#epoch.0"
    assert sn.stream_segment_name("sc", "st", 7, 12) == "sc/st/7.#epoch.12"
    assert qualified_segment_name("sc", "st", segment_id(7, 12)) == "sc/st/7.#epoch.12"
    assert qualified_segment_name("sc", "st", segment_id(2**32 - 1, 2**31 - 1)) == (
        f"sc/st/{2**32 - 1}.#epoch.{2**31 - 1}"
    )


def test_table_segment_name_lives_under_the_kvtable_pseudo_stream() -> None:
    assert sn.kvt_stream_name("t") == "t_kvtable"
    assert sn.table_segment_name("sc", "t", 4, 0) == "sc/t_kvtable/4.#epoch.0"
    assert table_segment_name("sc", "t", segment_id(4, 1)) == "sc/t_kvtable/4.#epoch.1"


def test_transaction_segment_name_is_getTransactionNameFromId() -> None:
    txn = uuid.UUID("00000001-0000-0002-8000-00000000000f")
    high, low = txn.int >> 64, txn.int & (2**64 - 1)
    name = sn.transaction_segment_name("sc/st/1.#epoch.0", high, low)
    assert name == f"sc/st/1.#epoch.0#transaction.{txn.hex}"
    # Java's longs are signed: a negative half prints as its two's complement, 16 digits.
    assert sn.transaction_segment_name("p", -1, 1) == "p#transaction.ffffffffffffffff0000000000000001"
    assert transaction_segment_name is sn.transaction_segment_name  # ids re-exports the one


def test_transient_segment_name() -> None:
    writer = uuid.UUID("12345678-9abc-def0-1234-56789abcdef0")
    name = sn.transient_segment_name("sc/st/0.#epoch.0", writer.int, _HEX32)
    assert name == f"sc/st/0.#epoch.0#transient.{writer.hex}.{_HEX32}"
    assert sn.transient_segment_name("p", 1, "x") == "p#transient." + "0" * 31 + "1.x"


# endregion

# region reading


def test_nameutils_examples_transient_and_transaction() -> None:
    # NameUtilsTest#testIsTransientSegment and #testTransientAndTransactionConflicts.
    assert not sn.is_transient_segment("")
    assert sn.is_transient_segment(f"scope/stream/transactionSegment#transient.{_ID32}")
    assert not sn.is_transient_segment("scope/stream/transientSegment")
    assert sn.is_transient_segment(f"#transient.{_ID32}")
    assert not sn.is_transient_segment("#transient")
    txn = f"scope/stream/transactionSegment#transaction.{_ID32}"
    transient = f"scope/stream/transactionSegment#transient.{_ID32}"
    assert sn.is_transaction_segment(txn) and not sn.is_transient_segment(txn)
    assert sn.is_transient_segment(transient) and not sn.is_transaction_segment(transient)


def test_is_checks_the_id_length_in_utf16_units_has_does_not() -> None:
    short = "p#transaction." + "a" * 31
    assert not sn.is_transaction_segment(short) and sn.has_transaction_delimiter(short)
    assert sn.parent_segment_name(short) is None
    # 30 characters, one astral (two UTF-16 units): 31 units, still short; two astral: 32 units.
    assert not sn.is_transaction_segment("p#transaction." + "\U0001f600" + "a" * 29)
    assert sn.is_transaction_segment("p#transaction." + "\U0001f600" * 2 + "a" * 28)
    assert not sn.has_transaction_delimiter("p#transient." + _HEX32)
    assert sn.has_transient_delimiter("a#transient.b")
    assert not sn.has_transient_delimiter("a#transaction." + _HEX32)


def test_parent_of_transaction_and_transient_segments() -> None:
    parent = "sc/st/3.#epoch.2"
    assert sn.parent_segment_name(sn.transaction_segment_name(parent, 5, 6)) == parent
    assert sn.parent_segment_name(sn.transient_segment_name(parent, 5, _HEX32)) == parent
    assert sn.parent_segment_name(parent) is None
    # The last delimiter counts: a parent that itself holds '#' stays whole.
    odd = "sc/st#x/3.#epoch.2#transaction.zz"
    assert sn.parent_segment_name(sn.transaction_segment_name(odd, 1, 2)) == odd
    # A transaction's suffix is tried before a transient's, as Java does.
    both = f"p#transient.{_HEX32}.{_HEX32}#transaction.{_HEX32}"
    assert sn.parent_segment_name(both) == f"p#transient.{_HEX32}.{_HEX32}"


def test_primary_segment_name_strips_recursively_then_the_epoch() -> None:
    txn = sn.transaction_segment_name("sc/st/3.#epoch.2", 1, 2)
    assert sn.primary_segment_name(txn) == "sc/st/3"
    nested = sn.transaction_segment_name(sn.transient_segment_name("sc/st/3.#epoch.2", 9, _HEX32), 1, 2)
    assert sn.primary_segment_name(nested) == "sc/st/3"
    assert sn.primary_segment_name("sc/_tables") == "sc/_tables"
    assert sn.primary_segment_name("sc/st/3") == "sc/st/3"
    # A suffix without a full id stays, so only the epoch suffix goes (the last one found).
    assert sn.primary_segment_name("sc/st/3.#epoch.2#transaction.short") == "sc/st/3"


@pytest.mark.parametrize(
    ("name", "parsed"),
    [
        ("sc/st/3.#epoch.2", ("sc", "st", 3, 2)),
        ("sc/st/0.#epoch.0", ("sc", "st", 0, 0)),
        (f"sc/st/{2**32 - 1}.#epoch.{2**31 - 1}", ("sc", "st", 2**32 - 1, 2**31 - 1)),
        ("sc/st/007.#epoch.01", ("sc", "st", 7, 1)),
        (f"sc/st/{2**32}.#epoch.0", None),  # the number is a 32-bit unsigned
        (f"sc/st/0.#epoch.{2**31}", None),  # the epoch a Java int
        ("sc/st/3", None),  # no epoch
        ("sc/st/3.#epoch.", None),
        ("sc/st/-3.#epoch.2", None),
        ("sc/st/3.#epoch.-2", None),
        ("sc/st/\u0663.#epoch.2", None),  # ASCII digits only
        ("sc/st/3.#epoch.2 ", None),
        ("/st/3.#epoch.2", None),
        ("sc//3.#epoch.2", None),
        ("st/3.#epoch.2", None),
        ("a/sc/st/3.#epoch.2", None),
        ("sc/st/3.#epoch.2#transaction." + _HEX32, None),
        ("sc/st/3.#epoch.2#transaction.x", None),  # any transaction delimiter refuses
        ("sc/st/3.#epoch.2#transient." + _HEX32 + "." + _HEX32, None),
        ("sc/_tables/x", None),
        ("sc/t_kvtable/1.#epoch.0", ("sc", "t_kvtable", 1, 0)),
    ],
)
def test_parse_stream_segment_name(name: str, parsed: tuple[str, str, int, int] | None) -> None:
    assert sn.parse_stream_segment_name(name) == parsed
    expected = None if parsed is None else (parsed[0], parsed[1], segment_id(parsed[2], parsed[3]))
    assert autoscale_parse(name) == expected


@pytest.mark.parametrize("number", [0, 1, 9, 10, 12345, 2**31, 2**32 - 1])
@pytest.mark.parametrize("epoch", [0, 1, 10, 2**31 - 1])
def test_round_trip(number: int, epoch: int) -> None:
    name = qualified_segment_name("scope", "stream", segment_id(number, epoch))
    assert sn.parse_stream_segment_name(name) == ("scope", "stream", number, epoch)
    txn = sn.transaction_segment_name(name, number, epoch)
    assert sn.is_transaction_segment(txn) and sn.parent_segment_name(txn) == name
    transient = sn.transient_segment_name(name, number, _HEX32)
    assert sn.is_transient_segment(transient) and sn.parent_segment_name(transient) == name
    assert sn.primary_segment_name(txn) == sn.primary_segment_name(transient) == f"scope/stream/{number}"


# endregion

# region the old spellings, kept as they were: the names are wire facts


def _old_qualified(scope: str, stream: str, segment: int) -> str:
    return f"{scope}/{stream}/{segment & 0xFFFFFFFF}.#epoch.{segment >> 32}"


def _old_txn(parent: str, high: int, low: int) -> str:
    return f"{parent}#transaction.{high & 0xFFFFFFFFFFFFFFFF:016x}{low & 0xFFFFFFFFFFFFFFFF:016x}"


def _old_base_name(name: str) -> str:
    def position(text: str, delimiter: str) -> int:
        pos = text.rfind(delimiter)
        if pos < 0:
            return -1
        tail = text[pos + len(delimiter) :]
        if len(tail) < 32 and len(tail.encode("utf-16-le", "surrogatepass")) // 2 < 32:
            return -1
        return pos

    while "#t" in name:
        pos = position(name, "#transaction.")
        if pos < 0:
            pos = position(name, "#transient.")
            if pos < 0:
                break
        name = name[:pos]
    pos = name.rfind(".#epoch.")
    return name if pos < 0 else name[:pos]


_OLD_PART = re.compile(r"(\d+)\.#epoch\.(\d+)", re.ASCII)


def _old_parse(name: str) -> tuple[str, str, int] | None:
    if "#transaction." in name:
        return None
    parts = name.split("/")
    if len(parts) != 3 or not parts[0] or not parts[1]:
        return None
    match = _OLD_PART.fullmatch(parts[2])
    if match is None or int(match[1]) >= 2**32 or int(match[2]) >= 2**31:
        return None
    return parts[0], parts[1], segment_id(int(match[1]), int(match[2]))


_NAMES = [
    "",
    "#",
    "#t",
    "sc/st/3.#epoch.2",
    "sc/st/3",
    "sc/_tables",
    "_system/containers/metadata_3",
    "sc/t_kvtable/0.#epoch.0",
    "sc/st/3.#epoch.2#transaction." + _HEX32,
    "sc/st/3.#epoch.2#transaction." + "a" * 31,
    "sc/st/3.#epoch.2#transaction." + "\U0001f600" * 16,
    "sc/st/3.#epoch.2#transaction." + "\U0001f600" * 15 + "a",
    "sc/st/3.#epoch.2#transaction." + "\ud800" * 32,
    f"sc/st/3.#epoch.2#transient.{_HEX32}.{_HEX32}",
    f"sc/st/3.#epoch.2#transient.{_HEX32}",
    f"sc/st/3.#epoch.2#transient.{_HEX32}#transaction.{_HEX32}",
    f"sc/st/3.#epoch.2#transaction.{_HEX32}#transient.{_HEX32}.{_HEX32}",
    "sc/st/3.#epoch.2.#epoch.5",
    "sc/st#transaction.x/3.#epoch.2",
    f"a#b/c#d/1.#epoch.1#transaction.{_HEX32}",
    "sc/st/3.#epoch.2#tag",
]


@pytest.mark.parametrize("name", _NAMES)
def test_reading_is_what_it_was(name: str) -> None:
    assert segment_base_name(name) == _old_base_name(name)
    assert autoscale_parse(name) == _old_parse(name)
    assert sn.has_transaction_delimiter(name) == ("#transaction." in name)
    assert sn.has_transient_delimiter(name) == ("#transient." in name)


@pytest.mark.parametrize("segment", [0, 1, segment_id(3, 2), segment_id(2**32 - 1, 2**31 - 1), 2**63 - 1])
@pytest.mark.parametrize(("high", "low"), [(0, 0), (1, 2), (-1, -(2**63)), (2**64 - 1, 2**63)])
def test_building_is_what_it_was(segment: int, high: int, low: int) -> None:
    name = qualified_segment_name("sc", "st", segment)
    assert name == _old_qualified("sc", "st", segment)
    assert transaction_segment_name(name, high, low) == _old_txn(name, high, low)
    assert table_segment_name("sc", "t", segment) == _old_qualified("sc", "t_kvtable", segment)


# endregion


def test_only_segment_names_spells_the_delimiters() -> None:
    """Every other module of app/ and workers/ goes through app/domain/segment_names.py."""
    literal = re.compile(r"#epoch\.|#transaction\.|#transient\.")
    owner = _ROOT / "app" / "domain" / "segment_names.py"
    found = [
        f"{path.relative_to(_ROOT)}:{number}"
        for folder in ("app", "workers")
        for path in sorted((_ROOT / folder).rglob("*.py"))
        if path != owner
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if literal.search(line)
    ]
    assert found == []
