"""Client and admin API keys (``Authorization: Bearer <key>``).

Sources (:class:`router.config.tree.AuthConfig`): keys inline in the YAML, a file (a Kubernetes
Secret mounted as a volume: one key per line, blank lines and ``#`` lines ignored) and an
environment variable (a Secret exposed with ``secretKeyRef``: keys separated by commas or
newlines). The sources of one key set add up.

Only SHA-256 digests of the keys are kept. A presented key is hashed and compared with *every*
stored digest with :func:`hmac.compare_digest` (constant time, no early exit), so the time taken
reveals neither a key nor which one matched. Keys never reach logs, metrics or error messages:
the error bodies are fixed strings.

Rules: client routes (``/v1/*``) need a client key when client auth is configured, else they
are open. Admin routes (``/admin/*``) need an admin key: none or an unknown key -> 401
``invalid_api_key``; a valid *client* key -> 403 ``permission_denied``; no admin key configured
-> 403 (the admin API is off).
"""

from __future__ import annotations

import hashlib
import hmac
import os
from collections.abc import Iterable, Mapping
from pathlib import Path

from router.config.server import PriorityConfig, PriorityGrant
from router.config.tree import AuthConfig, ConfigError
from router.errors import AuthenticationError, PermissionDenied

__all__ = ["Auth", "KeyRing", "bearer_token", "load_auth", "load_engine_key"]


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode("utf-8")).digest()


class KeyRing:
    """A set of keys held as SHA-256 digests.

    Args:
        keys: the keys (plain strings); empty strings are ignored.
    """

    __slots__ = ("_digests",)

    def __init__(self, keys: Iterable[str]) -> None:
        self._digests = tuple({_digest(k) for k in keys if k})

    def __len__(self) -> int:
        return len(self._digests)

    def __repr__(self) -> str:
        return f"KeyRing({len(self._digests)} keys)"

    def matches(self, presented: str) -> bool:
        """True when ``presented`` is one of the keys (constant time over all of them)."""
        given = _digest(presented)
        found = False
        for digest in self._digests:
            found |= hmac.compare_digest(given, digest)
        return found


def bearer_token(header: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header, or None."""
    if not header:
        return None
    scheme, _, token = header.strip().partition(" ")
    if scheme.lower() != "bearer":
        return None
    token = token.strip()
    return token or None


class Auth:
    """The resolved key sets of one config.

    Args:
        client: client keys; None turns client authentication off.
        admin: admin keys; None turns the admin API off.
    """

    def __init__(self, client: KeyRing | None, admin: KeyRing | None,
                 speculation: Mapping[str, str] | None = None,
                 priority: PriorityConfig | None = None,
                 engine_fields: Mapping[str, tuple[str, ...]] | None = None) -> None:
        self.client = client
        self.admin = admin
        self._speculation = {bytes.fromhex(k): v for k, v in (speculation or {}).items()}
        priority = priority or PriorityConfig()
        self._grants = {bytes.fromhex(k): v for k, v in priority.keys.items()}
        #: The ``priority`` sent for requests whose key has no grant (None: none).
        self.priority_default = priority.default
        self._engine_fields = {bytes.fromhex(k): frozenset(v) for k, v in (engine_fields or {}).items()}

    def priority_grant(self, authorization: str | None) -> PriorityGrant | None:
        """The request's key's grant to set ``priority`` (``auth.priority.keys``), or None
        (the key may not set it). Call after :meth:`check_client`."""
        if not self._grants:
            return None
        token = bearer_token(authorization)
        return None if token is None else self._grants.get(_digest(token))

    def engine_fields(self, authorization: str | None) -> frozenset[str]:
        """The engine-internal fields the request's key may send (``auth.engine_fields.keys``;
        router/access/engine_fields.py); empty for every other key. Call after :meth:`check_client`."""
        if not self._engine_fields:
            return frozenset()
        token = bearer_token(authorization)
        return frozenset() if token is None else self._engine_fields.get(_digest(token), frozenset())

    def speculation_default(self, authorization: str | None) -> str | None:
        """The speculation hint configured for the request's key
        (``auth.speculation_defaults``), or None. Call after :meth:`check_client`."""
        if not self._speculation:
            return None
        token = bearer_token(authorization)
        return None if token is None else self._speculation.get(_digest(token))

    def check_client(self, authorization: str | None) -> None:
        """Admit a request to a client route.

        Raises:
            AuthenticationError: client auth is on and the key is missing or unknown.
        """
        if self.client is None:
            return
        if not authorization:
            raise AuthenticationError("You didn't provide an API key. Send it in the "
                                      "Authorization header as 'Bearer <key>'.")
        token = bearer_token(authorization)
        if token is None or not self.client.matches(token):
            raise AuthenticationError("Invalid API key")

    def check_admin(self, authorization: str | None) -> None:
        """Admit a request to an admin route.

        Raises:
            PermissionDenied: the admin API is off, or the key is a client key.
            AuthenticationError: the key is missing or unknown.
        """
        if self.admin is None:
            raise PermissionDenied("the admin API is disabled (no auth.admin_api_key configured)")
        if not authorization:
            raise AuthenticationError("You didn't provide an admin API key. Send it in the "
                                      "Authorization header as 'Bearer <key>'.")
        token = bearer_token(authorization)
        if token is None:
            raise AuthenticationError("Invalid API key")
        if self.admin.matches(token):
            return
        if self.client is not None and self.client.matches(token):
            raise PermissionDenied("this API key may not use the admin API")
        raise AuthenticationError("Invalid API key")


def _file_keys(path: str, what: str) -> list[str]:
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read {what} {path}: {exc.strerror}") from None
    keys = [line.strip() for line in text.splitlines()]
    return [k for k in keys if k and not k.startswith("#")]


def _env_keys(name: str, environ: Mapping[str, str], what: str) -> list[str]:
    if name not in environ:
        raise ConfigError(f"{what}: environment variable {name} is not set")
    return [k.strip() for k in environ[name].replace("\n", ",").split(",") if k.strip()]


def _collect(inline: Iterable[str], file: str | None, env: str | None, environ: Mapping[str, str],
             what: str) -> list[str] | None:
    keys = list(inline)
    named = bool(keys) or file is not None or env is not None
    if file is not None:
        keys += _file_keys(file, f"{what}_file")
    if env is not None:
        keys += _env_keys(env, environ, f"{what}_env")
    if not named:
        return None
    if not keys:
        raise ConfigError(f"auth: the {what} sources hold no key")
    if any(any(ch.isspace() for ch in k) for k in keys):
        raise ConfigError(f"auth: a key in the {what} sources holds whitespace")
    return keys


def load_auth(config: AuthConfig, environ: Mapping[str, str] | None = None) -> Auth:
    """Resolve the configured key sources into an :class:`Auth` (reads files and variables).

    Args:
        config: the ``auth`` section.
        environ: the environment (default ``os.environ``).

    Raises:
        ConfigError: a named file is unreadable, a named variable is unset, a named source set
            holds no key, or a key is both a client and an admin key.
    """
    env = os.environ if environ is None else environ
    client = _collect((k.get_secret_value() for k in config.api_keys), config.api_keys_file,
                      config.api_keys_env, env, "api_keys")
    admin_inline = [config.admin_api_key.get_secret_value()] if config.admin_api_key else []
    admin = _collect(admin_inline, config.admin_api_key_file, config.admin_api_key_env, env,
                     "admin_api_key")
    if client is not None and admin is not None and set(client) & set(admin):
        raise ConfigError("auth: an admin key is also a client key")
    return Auth(None if client is None else KeyRing(client), None if admin is None else KeyRing(admin),
                config.speculation_defaults, config.priority, config.engine_fields.keys)


def load_engine_key(config: AuthConfig, environ: Mapping[str, str] | None = None) -> str | None:
    """The engines' API key (SGLang ``--api-key``), or None when none is configured.

    Sources, first found wins: ``engine_api_key`` inline, ``engine_api_key_file`` (the first
    line that is not blank or a ``#`` comment), ``engine_api_key_env``. The router sends it as
    ``Authorization: Bearer <key>`` on every engine request and never forwards the client's
    ``Authorization``, cookies or ``x-api-key`` (router/upstream/proxy.py builds its own headers).

    Raises:
        ConfigError: a named file is unreadable or empty, a named variable unset or empty,
            or the key holds whitespace.
    """
    env = os.environ if environ is None else environ
    if config.engine_api_key is not None:
        keys = [config.engine_api_key.get_secret_value()]
    elif config.engine_api_key_file is not None:
        keys = _file_keys(config.engine_api_key_file, "engine_api_key_file")[:1]
    elif config.engine_api_key_env is not None:
        keys = _env_keys(config.engine_api_key_env, env, "engine_api_key_env")[:1]
    else:
        return None
    if not keys or not keys[0] or any(ch.isspace() for ch in keys[0]):
        raise ConfigError("auth: the engine_api_key source holds no usable key")
    return keys[0]
