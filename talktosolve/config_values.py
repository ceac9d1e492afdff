"""A config's values from plain data: JSON-like dicts (a preset, config.json) and `--set` text made into typed
dataclasses.

Every key must be a field (an unknown one is named with the closest valid key), and every value must have its
field's type (a preset's `"lr": "abc"` fails here, not deep in a run). The dataclasses themselves, what each field
means and which keys it is part of, are `talktosolve.config`'s; this module knows only the rules for turning data
into them.
"""

from __future__ import annotations

import dataclasses
import difflib
from typing import Any

from talktosolve.arms import comparison_arms


class ConfigError(ValueError):
    """A configuration a run cannot use; the message says which key and what to do."""


def closest(key: str, valid: list[str]) -> str:
    """The hint an unknown key's error ends with: the closest valid key, or all of them."""
    match = difflib.get_close_matches(key, valid, n=1, cutoff=0.5)
    return f" Did you mean `{match[0]}`?" if match else f" Valid keys: {', '.join(valid)}."


def build(cls, values: dict[str, Any], where: str):
    """Build dataclass `cls` from `values`, recursing into nested dataclasses; unknown keys fail."""
    if not isinstance(values, dict):
        raise ConfigError(f"`{where or 'config'}` must be an object, got {type(values).__name__}.")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    kwargs = {}
    for key, value in values.items():
        if key not in fields:
            raise ConfigError(f"Unknown config key `{where}{key}`.{closest(key, list(fields))}")
        default = getattr(cls(), key)
        if dataclasses.is_dataclass(default):
            kwargs[key] = build(type(default), value, f"{where}{key}.")
        elif isinstance(default, tuple):
            items = value if isinstance(value, (list, tuple)) else (value,)
            kind = kind_of(fields[key], default)
            kwargs[key] = tuple(typed(v, kind, f"each item of `{where}{key}`") for v in items)
        else:
            kwargs[key] = typed(value, kind_of(fields[key], default), f"`{where}{key}`",
                                optional="None" in fields[key].type)
    return cls(**kwargs)


_KIND_NAMES = {bool: "true or false", int: "a whole number", float: "a number", str: "a string"}


def kind_of(f: dataclasses.Field, default: Any) -> type:
    """The type a field's values must have: its default's (its items' for a tuple; a None default's from its
    annotation, e.g. `str | None`)."""
    if isinstance(default, tuple):
        return type(default[0]) if default else int if "int" in str(f.type) else str
    if default is None:
        return {"int": int, "float": float, "bool": bool}.get(f.type.split("|")[0].strip(), str)
    return type(default)


def typed(value: Any, kind: type, where: str, optional: bool = False) -> Any:
    """`value` checked against the field's type: a preset's `"lr": "abc"` must fail here, not deep in a run."""
    if value is None and optional:
        return None
    if kind is tuple:  # a comparison: its name `X-Y`, or the pair itself
        pair = comparison_arms(value) if isinstance(value, str) else value
        if isinstance(pair, (list, tuple)) and all(isinstance(arm, str) for arm in pair):
            return tuple(pair)
        raise ConfigError(f"{where} must be a comparison such as chat-cut, got {value!r}.")
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        raise ConfigError(f"{where} must be {_KIND_NAMES.get(kind, kind.__name__)}, got {value!r}.")
    return value


def merge_overrides(base: dict, over: dict) -> dict:
    """`base` with `over` laid on top, section by section (nested dicts merge; other values replace)."""
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge_overrides(out[key], value)
        else:
            out[key] = value
    return out


def coerce(text: str, default: Any, spec: dataclasses.Field) -> Any:
    """Parse a `--set` value to the type of the field's default (of its items for a tuple: `kind_of`, the rule a
    preset's values are checked by)."""
    if isinstance(default, bool):
        if text.lower() in ("1", "true", "yes", "on"):
            return True
        if text.lower() in ("0", "false", "no", "off"):
            return False
        raise ConfigError(f"expected true or false, got `{text}`.")
    if text.lower() in ("none", "null") and not isinstance(default, (int, float)):
        return None
    if isinstance(default, tuple):
        return tuple(_parse(t.strip(), kind_of(spec, default)) for t in text.split(",") if t.strip())
    if isinstance(default, (int, float)):
        return _parse(text, type(default))
    return text


def _parse(text: str, kind: type) -> Any:
    if kind is tuple:  # a comparison, `X-Y`
        return comparison_arms(text)
    try:
        return kind(text)
    except ValueError:
        raise ConfigError(f"expected {_KIND_NAMES.get(kind, kind.__name__)}, got `{text}`.") from None
