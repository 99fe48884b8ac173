"""Config files: TOML or YAML files whose keys match the command-line options.

Precedence: built-in defaults < config file < flags given on the command line.
Keys may be written with dashes or underscores (`energy-steps` or `energy_steps`).
`merge_settings` builds any settings dataclass of `bgp4.settings` from the three layers.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Any, TypeVar

from bgp4.errors import InputError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

__all__ = ["read_config_file", "merge_settings"]

T = TypeVar("T")


def read_config_file(path: str | Path) -> dict[str, Any]:
    """Settings from a .toml, .yaml or .yml file as a flat dict with underscore keys."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"config file not found: {path}")
    text = path.read_text()
    try:
        if path.suffix == ".toml":
            raw = tomllib.loads(text)
        elif path.suffix in (".yaml", ".yml"):
            try:
                import yaml
            except ImportError:
                raise InputError("YAML config files need PyYAML (pip install pyyaml); or use TOML") from None
            raw = yaml.safe_load(text) or {}
        else:
            raise InputError(f"config file must end in .toml, .yaml or .yml: {path}")
    except InputError:
        raise
    except Exception as exc:  # noqa: BLE001 - any parser error is a bad file
        raise InputError(f"cannot parse {path}: {exc}".splitlines()[0]) from None
    if not isinstance(raw, dict):
        raise InputError(f"{path} must hold a table of settings")
    return {str(k).replace("-", "_"): v for k, v in raw.items()}


def merge_settings(cls: type[T], file_values: dict[str, Any], flag_values: dict[str, Any]) -> T:
    """Build dataclass `cls` from defaults, then file values, then flags that are not None."""
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(file_values) - set(fields))
    if unknown:
        raise InputError(f"unknown setting(s) in config file: {', '.join(unknown)}")
    values: dict[str, Any] = {}
    for name, value in file_values.items():
        values[name] = _coerce(name, value, fields[name].type)
    values.update({k: v for k, v in flag_values.items() if v is not None})
    return cls(**values)


def _coerce(name: str, value: Any, annotation: Any) -> Any:
    kind = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", "")
    try:
        if kind.startswith(("int", "float")) and isinstance(value, bool):
            raise ValueError  # `steps = true` is a mistake, not 1
        if kind.startswith("int"):
            if float(value) != int(float(value)):
                raise ValueError
            return int(float(value))
        if kind.startswith("float"):
            return float(value)
        if kind.startswith("bool"):
            if isinstance(value, bool):
                return value
            raise ValueError
        if kind.startswith("str"):
            return str(value)
    except (TypeError, ValueError, OverflowError):
        raise InputError(f"setting {name!r} has a bad value {value!r} (expected {kind})") from None
    return value
