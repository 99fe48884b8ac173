"""One stage record: how every stage says what it made, and that it is finished.

Every stage (MD, a training run, sampling, refinement, a sweep's run) writes its settings record
first and its completion marker last, so a marker on disk means a finished output made with the
recorded settings. A new request is compared with the record by `changed`: the names of the
settings whose values differ, leaving out those that do not change the result, with the data file
compared by content (its fingerprint) where both records have one, else by path.

A stage directory holds `settings.json`, optionally a log `metrics.jsonl` (one JSON object a line)
and `complete.json` (`Stage`). A stage whose output is one file written atomically at its end
(an HDF5 trajectory that carries its own settings record) needs no marker: the file is the marker,
and `changed` compares its record with the request.

A leaf: it imports only `bgp4.errors`, `bgp4._io` and the standard library.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from bgp4._io import append_record, atomic_write, file_fingerprint, read_records
from bgp4.errors import InputError

__all__ = [
    "COMPLETE",
    "DATA",
    "FINGERPRINT",
    "METRICS",
    "SETTINGS",
    "Stage",
    "changed",
    "refuse_changes",
    "same_data",
    "with_fingerprint",
]

#: File names of a stage directory: the settings record, the log, the completion marker.
SETTINGS, METRICS, COMPLETE = "settings.json", "metrics.jsonl", "complete.json"
#: The record's key of the data file's path, and of that file's content fingerprint.
DATA, FINGERPRINT = "data", "data_fingerprint"


def with_fingerprint(record: Mapping[str, Any], key: str = DATA) -> dict[str, Any]:
    """A copy of `record` with the fingerprint of the data file its `key` names (None when there
    is no such file): a moved or copied data file then still counts as the same data."""
    path = record.get(key)
    fingerprint = file_fingerprint(path) if path and Path(path).is_file() else None
    return {**record, FINGERPRINT: fingerprint}


def same_data(previous: Mapping[str, Any], current: Mapping[str, Any]) -> bool:
    """Whether two records name the same data: by fingerprint where both have one, else by path."""
    old, new = previous.get(FINGERPRINT), current.get(FINGERPRINT)
    return old == new if (old and new) else previous.get(DATA) == current.get(DATA)


def changed(
    previous: Mapping[str, Any],
    current: Mapping[str, Any],
    *,
    keys: Iterable[str] | None = None,
    neutral: Iterable[str] = (),
    defaults: Mapping[str, Any] | None = None,
) -> list[str]:
    """Names of the settings whose values differ between a stored record and a new request.

    keys: the settings to compare, in this order (default: every key of either record, sorted);
    neutral: settings that do not change the result (left out); defaults: the value of a setting
    a record lacks (a record of an older version). The data file is compared by `same_data` and,
    when it differs, named first as "data".
    """
    defaults = defaults or {}
    skip = set(neutral) | {DATA, FINGERPRINT}
    names = list(keys) if keys is not None else sorted(set(previous) | set(current))
    differ = [k for k in names if k not in skip and previous.get(k, defaults.get(k)) != current.get(k, defaults.get(k))]
    if not same_data(previous, current):
        differ.insert(0, DATA)
    return differ


def refuse_changes(what: str, differ: Sequence[str], remedy: str) -> None:
    """Raise InputError "<what> with other settings (<differ>); <remedy>" when `differ` names any."""
    if differ:
        raise InputError(f"{what} with other settings ({', '.join(differ)}); {remedy}")


class Stage:
    """A stage's directory: its settings record (written first), a log, its completion marker
    (written last, so that its presence means the stage is finished)."""

    def __init__(self, path: str | os.PathLike, settings: str = SETTINGS, complete: str = COMPLETE):
        self.path = Path(path)
        self.settings_name, self.complete_name = settings, complete

    def file(self, name: str) -> Path:
        return self.path / name

    @property
    def complete(self) -> bool:
        return self.file(self.complete_name).exists()

    def recorded(self) -> dict[str, Any] | None:
        """The settings record, or None when none was written."""
        path = self.file(self.settings_name)
        return json.loads(path.read_text()) if path.exists() else None

    def changes(self, request: Mapping[str, Any], **rules: Any) -> list[str] | None:
        """`changed(recorded, request, **rules)`, or None when no settings were recorded."""
        previous = self.recorded()
        return None if previous is None else changed(previous, request, **rules)

    def write_json(self, name: str, payload: Mapping[str, Any]) -> None:
        atomic_write(self.file(name), json.dumps(payload, indent=1, sort_keys=True))

    def record(self, settings: Mapping[str, Any]) -> None:
        """Write the settings record (before any output)."""
        self.write_json(self.settings_name, settings)

    def finish(self, summary: Mapping[str, Any]) -> None:
        """Write the completion marker (after every output): the stage is finished."""
        self.write_json(self.complete_name, summary)

    def completion(self) -> dict[str, Any]:
        """What the completion marker holds; {} while the stage is not finished."""
        return json.loads(self.file(self.complete_name).read_text()) if self.complete else {}

    def log(self, record: Mapping[str, Any]) -> None:
        """Append one record to the log."""
        append_record(self.file(METRICS), record)

    def records(self) -> Iterator[dict[str, Any]]:
        """The log's records in order; a line cut off by a kill is left out."""
        yield from read_records(self.file(METRICS))

    def last_step(self, key: str = "global_step") -> int:
        """`key` of the log's last record (0 when there is none, or it has no such key)."""
        for line in reversed(self._log_lines()):  # read from the end: the log is read while it grows
            try:
                return int(json.loads(line).get(key, 0))
            except ValueError:  # a line cut off by a kill
                continue
        return 0

    def _log_lines(self) -> list[str]:
        path = self.file(METRICS)
        return [line for line in path.read_text().splitlines() if line.strip()] if path.exists() else []
