"""Who a request is: the API key it presented, among the operator's keys, named by a digest (a principal) so no key
is stored or logged. The key variable holds one key, or several separated by commas (one per client); a thread
belongs to the principal that made it, and another principal is told it does not exist."""

from __future__ import annotations

import hashlib
import hmac

from .protocol import ApiError
from .settings import ServeSettings

__all__ = ["principal_of", "principal_for_key"]


def principal_for_key(key: str) -> str:
    """The principal of a key: a digest, stable across restarts and replicas, that does not reveal the key."""
    return "key-" + hashlib.sha256(key.encode()).hexdigest()[:24]


def principal_of(settings: ServeSettings, authorization: str | None, cookie_key: str | None) -> str | None:
    """The principal of a request from its `Authorization: Bearer` header, or the playground's cookie (a browser
    cannot send the header); None when the server has no key (everyone is the same anonymous principal). 401 when
    the key is missing or wrong. Every key is compared, in constant time, so the time taken tells nothing."""
    keys = settings.api_keys()
    if not keys:
        return None
    scheme, _, given = (authorization or "").partition(" ")
    given = given.strip() if scheme.lower() == "bearer" else (cookie_key or "")
    matched = None
    for key in keys:
        if hmac.compare_digest(given.encode(), key.encode()):
            matched = key
    if matched is None:
        raise ApiError(401, "invalid_api_key", "missing or wrong API key (send `Authorization: Bearer <key>`)",
                       headers={"WWW-Authenticate": "Bearer"})
    return principal_for_key(matched)
