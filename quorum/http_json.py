"""Reading an admin API request's JSON body, bounded: the one reader every route uses."""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from quorum import admin_api as api
from quorum.admin_api import AdminError


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


async def read_json(request: web.Request) -> tuple[bytes, Any]:
    """The raw body and its JSON; 413 when too large (before reading it), 400 when not JSON."""
    if request.content_length is not None and request.content_length > api.MAX_ADMIN_BODY_BYTES:
        raise AdminError("INVALID_REQUEST", f"the request body of {request.content_length} bytes is larger "
                         f"than {api.MAX_ADMIN_BODY_BYTES} bytes", None, status=413)
    raw = await request.read()  # aiohttp stops at client_max_size with 413 too
    if len(raw) > api.MAX_ADMIN_BODY_BYTES:
        raise AdminError("INVALID_REQUEST", f"the request body is larger than {api.MAX_ADMIN_BODY_BYTES} "
                         "bytes", None, status=413)
    try:
        return raw, json.loads(raw, parse_constant=_reject_constant)
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        raise api.invalid(f"the request body is not valid JSON: {str(exc)[:200]}", None) from None
