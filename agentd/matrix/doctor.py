"""What `agentd doctor` says about `[matrix]`: the homeserver answers, and the login works.

Plain HTTP (urllib), so the check needs no mautrix; it never logs in with the password (that
would make an access token each time): with a password it says which device agentd logs in as.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from typing import Any

from agentd.config import Config, SecretSource, read_secret
from agentd.matrix.config import settings
from agentd.tools.capability import Check, Checks


def _get(url: str, token: str = "") -> tuple[int, Any]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    request = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, json.loads(answer.read() or b"null")
    except urllib.error.HTTPError as exc:
        return exc.code, None


def checks(config: Config, secrets: SecretSource, device_of: Callable[[str], str]) -> list[Check]:
    cfg = settings(config)
    found = Checks()
    if cfg is None:
        return found
    base = cfg.homeserver.rstrip("/")
    try:
        status, _ = _get(f"{base}/_matrix/client/versions")
    except (OSError, ValueError) as exc:
        found.add(
            "matrix",
            False,
            f"{base} does not answer ({type(exc).__name__}): check matrix.homeserver",
        )
        return found
    if status != 200:
        found.add("matrix", False, f"{base} answered HTTP {status}: is it a Matrix homeserver?")
        return found
    token = read_secret(cfg.access_token_env, secrets)
    password = read_secret(cfg.password_env, secrets)
    if token:
        status, who = _get(f"{base}/_matrix/client/v3/account/whoami", token)
        user = (who or {}).get("user_id") if isinstance(who, dict) else None
        ok = status == 200 and user == cfg.user_id
        detail = (
            f"{cfg.user_id}, device {(who or {}).get('device_id')} (access token)"
            if ok
            else f"the access token in {cfg.access_token_env} is not {cfg.user_id}'s "
            f"(HTTP {status}, {user or 'no user'})"
        )
        found.add("matrix login", ok, detail)
    elif password:
        found.add(
            "matrix login",
            True,
            f"{cfg.user_id} logs in with {cfg.password_env} at each start, always on device "
            f"{device_of(cfg.user_id)}; not tried here (each login makes an access token)",
            warn=True,
        )
    else:
        found.add(
            "matrix login",
            False,
            f"neither {cfg.access_token_env} nor {cfg.password_env} is set: put the bot "
            "account's access token or password in agentd.env",
        )
    if cfg.owner == "":
        found.add(
            "matrix owner", True, "matrix.owner is unset: only allowed_users are served", warn=True
        )
    return found
