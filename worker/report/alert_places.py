"""Alerts in `evidence-worker report`: where each alert line belongs, and the input hashes
alerts name with the commands that open them.

An alert line names no group: it is placed through the record in the same file carrying its
input hash (the hash covers the contract version; the record names the group). A
contract_drift alert whose hash has no record here still names its contract version: it counts
for that version, under no group. An alert placed by neither is counted in the headline only.
"""

from __future__ import annotations

import shlex
from collections import Counter, defaultdict
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Final, Protocol

from pydantic import BaseModel, ConfigDict

from contracts.messages import as_utc
from contracts.record_models import CONTRACT_DRIFT, NONDETERMINISM, AlertKind

MAX_ALERT_HASHES_SHOWN = 50
KIND_OF_EVENT: Final[dict[str, AlertKind]] = {
    NONDETERMINISM: "nondeterminism",
    CONTRACT_DRIFT: "contract_drift",
}

Place = tuple[str | None, str | None]  # (contract_version, policy_group)
# An alert, its contract version and its (version, group) place; None where it has none.
Located = tuple["AlertLine", str | None, Place | None]


class PlacingRecord(Protocol):
    """What placing an alert reads of a record."""

    @property
    def input_hash(self) -> str | None: ...
    @property
    def contract_version(self) -> str | None: ...
    @property
    def policy_group(self) -> str | None: ...


@dataclass(frozen=True)
class AlertLine:
    """What places an alert line: its kind, the input hash it names, and the contract version
    when the line itself carries one (a contract_drift alert does; a nondeterminism one not);
    its `raised_at` (None when absent or unreadable) puts it on a day."""

    kind: AlertKind
    input_hash: str | None
    contract_version: str | None
    raised_at: datetime | None = None

    @classmethod
    def of(cls, kind: AlertKind, data: Mapping[str, object]) -> AlertLine:
        """The alert line `data` of `kind`; a field that is absent or of the wrong type is None
        (it only places the alert)."""
        return cls(
            kind,
            _text(data, "input_hash"),
            _text(data, "contract_version"),
            _moment(data.get("raised_at")),
        )


def _text(data: Mapping[str, object], key: str) -> str | None:
    value = data.get(key)
    return value if isinstance(value, str) else None


def _moment(value: object) -> datetime | None:
    """An ISO 8601 time in UTC; None when absent or unreadable."""
    if not isinstance(value, str):
        return None
    try:
        return as_utc(datetime.fromisoformat(value))
    except ValueError:
        return None


class AlertHash(BaseModel):
    """An input hash named by alerts of one kind: what `show` and `explain` look up."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: AlertKind
    input_hash: str
    contract_version: str | None
    alerts: int
    first_raised_at: datetime | None


def locate_alerts(records: Sequence[PlacingRecord], alerts: Iterable[AlertLine]) -> list[Located]:
    """Each alert with its contract version and (version, group) place, None where unplaced."""
    places = PlaceTally()
    for record in records:
        places.add(record)
    return places.locate(alerts)


class PlaceTally:
    """What placing alerts needs of the records, filled a record at a time: the contract
    versions seen, and the place of each input hash's first record; of the hashes in `wanted`
    only, when the alerts are known before the records (a store's), so that it does not grow
    with the records."""

    def __init__(self, wanted: Collection[str] | None = None) -> None:
        self.wanted = wanted
        self.versions: set[str | None] = set()
        self.place_of_hash: dict[str, Place] = {}

    def add(self, record: PlacingRecord) -> None:
        self.versions.add(record.contract_version)
        input_hash = record.input_hash
        if input_hash is not None and (self.wanted is None or input_hash in self.wanted):
            place = (record.contract_version, record.policy_group)
            self.place_of_hash.setdefault(input_hash, place)

    def locate(self, alerts: Iterable[AlertLine]) -> list[Located]:
        """Each alert with its contract version and (version, group) place, None where
        unplaced."""
        located: list[Located] = []
        for alert in alerts:
            if alert.input_hash is not None and (place := self.place_of_hash.get(alert.input_hash)):
                located.append((alert, place[0], place))
            elif alert.contract_version is not None and alert.contract_version in self.versions:
                located.append((alert, alert.contract_version, None))
            else:
                located.append((alert, None, None))
        return located


def place_alerts(
    located: Iterable[Located],
) -> tuple[Counter[tuple[Place, AlertKind]], Counter[tuple[str | None, AlertKind]]]:
    """Alert counts per (group, kind) and per (contract version, kind)."""
    by_group: Counter[tuple[Place, AlertKind]] = Counter()
    by_version: Counter[tuple[str | None, AlertKind]] = Counter()
    for alert, version, place in located:
        if place is not None:
            by_group[place, alert.kind] += 1
        if version is not None:
            by_version[version, alert.kind] += 1
    return by_group, by_version


def alert_hashes(located: Iterable[Located]) -> list[AlertHash]:
    """The hashes alerts name, once per kind, first raised first (alerts with no time last),
    then by hash: what a reviewer opens with `show` and `explain`."""
    found: defaultdict[tuple[AlertKind, str], list[tuple[AlertLine, str | None]]]
    found = defaultdict(list)
    for alert, version, _ in located:
        if alert.input_hash is not None:
            found[alert.kind, alert.input_hash].append((alert, version))
    listed = []
    for (kind, hash_), named in found.items():
        times = [alert.raised_at for alert, _ in named if alert.raised_at is not None]
        listed.append(
            AlertHash(
                kind=kind,
                input_hash=hash_,
                contract_version=next((v for _, v in named if v is not None), None),
                alerts=len(named),
                first_raised_at=min(times, default=None),
            )
        )
    timed = sorted(
        (a for a in listed if a.first_raised_at is not None),
        key=lambda a: (a.first_raised_at, a.input_hash, a.kind),
    )
    return timed + sorted(
        (a for a in listed if a.first_raised_at is None), key=lambda a: (a.input_hash, a.kind)
    )


def inspect_commands(input_hash: str, store: str | None = None) -> list[str]:
    """The commands that open the rows behind an alert's hash; in the store the report read,
    when it read one (pasted without it, they would read the default store)."""
    where = "" if store is None else f" --store {shlex.quote(store)}"
    return [
        f"evidence-worker show {input_hash}{where}",
        f"evidence-worker explain {input_hash}{where}",
    ]


def alert_hash_lines(
    hashes: Sequence[AlertHash], not_shown: int, store: str | None = None
) -> list[str]:
    """Each hash named by alerts, with how to open it."""
    missing = "not in this file" if store is None else "not in this store"
    out = [
        f"alert {a.kind} x{a.alerts}: {a.input_hash} "
        f"(contract version {a.contract_version or missing}): "
        + "; ".join(inspect_commands(a.input_hash, store))
        for a in hashes
    ]
    if not_shown:
        out.append(f"alert hashes not shown: {not_shown}")
    return out
