"""Who is calling a shared ``planexec serve --http``, and which runs they may touch.

With ``--tokens FILE`` every bearer token names a *principal*. A run belongs to the
principal whose request started it (``execute_plan``, ``ask``), recorded with the run in
the store (`planexec.store.RunStore.set_owner`). ``get_run``, ``approve_step``,
``reject_step``, ``resume_run`` and ``cancel_run`` of another principal's run get the
same error as an unknown id: other runs' existence is not revealed. An *admin* principal (the file's
``admins``, or ``--admin NAME``) may read and decide every run of the store.

Without principals (stdio, or one ``--token``) the server keeps its older rule: the runs
it made itself (and every run with ``--all-runs``).

The tokens file is JSON or TOML::

    {"tokens": {"alice": "…", "bob": "…", "ops": "…"}, "admins": ["ops"]}
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from planexec.errors import ConfigError

__all__ = ["PRINCIPAL_KEY", "Principals", "load_principals", "principal_of"]

PRINCIPAL_KEY = "planexec.principal"
"""The ASGI scope key `planexec.mcp.server.bearer_auth` puts the caller's principal under."""


@dataclass(frozen=True)
class Principals:
    """The principals of a server: their tokens and which of them are admins."""

    tokens: Mapping[str, str]
    """Bearer token by principal name."""
    admins: frozenset[str] = frozenset()
    """Principals that may read and decide every run."""

    def __post_init__(self) -> None:
        if not self.tokens:
            raise ConfigError("the tokens file names no principal")
        for name, token in self.tokens.items():
            if not name or not isinstance(token, str) or len(token) < 8:
                raise ConfigError(
                    f"principal {name!r}: its token must be a string of 8 characters or more"
                )
        if len(set(self.tokens.values())) != len(self.tokens):
            raise ConfigError("two principals share a token: each needs its own")
        unknown = sorted(self.admins - set(self.tokens))
        if unknown:
            raise ConfigError(f"admin {', '.join(map(repr, unknown))} has no token")


def load_principals(path: str | Path, admins: Iterable[str] = ()) -> Principals:
    """Read a tokens file (JSON or TOML); ``admins`` adds admin principals.

    Raises:
        ConfigError: the file cannot be read, or is not ``{"tokens": {name: token}}``
            (with optional ``"admins": [name, ...]``).
    """
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
        data: Any = tomllib.loads(text) if p.suffix == ".toml" else json.loads(text)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read the tokens file {p}: {exc}") from exc
    if not isinstance(data, dict) or not isinstance(data.get("tokens"), dict):
        raise ConfigError(f"{p}: expected {{\"tokens\": {{name: token}}, \"admins\": [...]}}")
    extra = set(data) - {"tokens", "admins"}
    if extra:
        raise ConfigError(f"{p}: unknown key(s) {sorted(extra)}; it takes tokens, admins")
    named = data.get("admins") or []
    if not isinstance(named, list) or not all(isinstance(a, str) for a in named):
        raise ConfigError(f"{p}: admins must be a list of principal names")
    return Principals(
        {str(k): v for k, v in data["tokens"].items()}, frozenset([*named, *admins])
    )


def principal_of(ctx: Any) -> str | None:
    """The principal of the request a tool call came in (None: no principals, or stdio)."""
    try:
        request = ctx.request_context.request
    except (AttributeError, LookupError, ValueError):
        return None
    scope = getattr(request, "scope", None)
    if not isinstance(scope, Mapping):
        return None
    name = scope.get(PRINCIPAL_KEY)
    return name if isinstance(name, str) else None
