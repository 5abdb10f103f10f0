"""Java-properties config files (RocketMQ's `key=value` conf files) loaded into pydantic models.

Shared by the daemons: a bad file must exit with one line naming the key, so errors here are
ConfigError with that line ready to print.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

M = TypeVar("M", bound=BaseModel)


class ConfigError(ValueError):
    """A configuration problem, with a message that names the key or file at fault."""


def parse_properties(text: str) -> dict[str, str]:
    """Parse Java .properties text: `key=value` or `key: value`, `#`/`!` comments, `\\` continuations."""
    out: dict[str, str] = {}
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i].strip()
        i += 1
        if not line or line[0] in "#!":
            continue
        while line.endswith("\\") and i < len(lines):
            line = line[:-1] + lines[i].strip()
            i += 1
        sep = min((p for p in (line.find("="), line.find(":")) if p >= 0), default=-1)
        if sep < 0:
            key, value = line, ""
        else:
            key, value = line[:sep].strip(), line[sep + 1 :].strip()
        out[key] = value
    return out


def load_properties_file(path: str | Path) -> dict[str, str]:
    p = Path(path)
    try:
        return parse_properties(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {p}") from None
    except OSError as e:
        raise ConfigError(f"cannot read config file {p}: {e.strerror}") from None


def build_config(model: type[M], values: dict[str, Any], *, source: str = "config") -> M:
    """Validate values into model; unknown keys and bad values raise ConfigError naming the key."""
    fields = model.model_fields
    known = set(fields) | {f.alias for f in fields.values() if f.alias}
    unknown = sorted(k for k in values if k not in known)
    if unknown:
        raise ConfigError(f"{source}: unknown configuration key '{unknown[0]}'")
    try:
        return model.model_validate(values)
    except ValidationError as e:
        err = e.errors()[0]
        if not err["loc"]:  # a check across keys: its message names them
            raise ConfigError(f"{source}: {err['msg'].removeprefix('Value error, ')}") from None
        key = ".".join(str(x) for x in err["loc"])
        raw = values.get(key, "")
        raise ConfigError(f"{source}: bad value {raw!r} for key '{key}': {err['msg']}") from None


def dump_properties(model: BaseModel) -> str:
    """The effective config as properties text (`-p` output)."""
    lines = []
    for k, v in model.model_dump(by_alias=True).items():
        if isinstance(v, bool):
            v = "true" if v else "false"
        lines.append(f"{k}={'' if v is None else v}")
    return "\n".join(lines) + "\n"
