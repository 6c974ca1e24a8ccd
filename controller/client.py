"""A client for the controller's REST API: one JSON request, the status and the parsed body back."""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from typing import Any

from ureplicator.common.errors import UReplicatorError


def request(url: str, method: str = "GET", body: Any = None, token: str | None = None,
            timeout_s: float = 30.0, ca: str | None = None) -> tuple[int, Any]:
    """Call the REST API; returns (status, parsed JSON). Raises UReplicatorError when unreachable.

    ``ca``: a PEM bundle to trust for an https:// URL (the REST API's own CA).
    """
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method)
    req.add_header("Content-Type", "application/json")
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        context = ssl.create_default_context(cafile=ca) if ca else None
        with urllib.request.urlopen(req, timeout=timeout_s, context=context) as resp:
            return resp.status, json.loads(resp.read() or b"null")
    except urllib.error.HTTPError as exc:
        payload = exc.read()
        try:
            return exc.code, json.loads(payload or b"null")
        except ValueError:
            return exc.code, {"error": {"code": exc.code, "message": payload.decode(errors="replace")}}
    except (urllib.error.URLError, OSError) as exc:
        raise UReplicatorError(f"cannot reach the controller at {url}: {getattr(exc, 'reason', exc)}") from None
