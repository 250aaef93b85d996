"""SaslHandshake (17) and SaslAuthenticate (36): responses from the authenticator's steps, and
the answers Kafka's KafkaApis gives where no authentication is under way.

On a SASL listener the connection's authenticator (security.sasl_server, driven by
broker/server.py) answers both; a request reaching the dispatch table came on a listener
without SASL, or after authentication without re-authentication: Kafka answers
ILLEGAL_SASL_STATE then (KafkaApis.handleSaslHandshakeRequest / handleSaslAuthenticateRequest).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from broker.handlers.context import BrokerContext, ClientInfo
from common.errors import ErrorCode
from common.protocol.api_keys import ApiKey
from common.protocol.messages import build, error_code, response_module
from security.sasl_server import SaslStep


def handshake_response(step: SaslStep, version: int) -> Any:
    m = response_module(ApiKey.SASL_HANDSHAKE, version)
    return build(m.SaslHandshakeResponse, error_code=error_code(step.error_code), mechanisms=step.mechanisms)


def authenticate_response(step: SaslStep, version: int) -> Any:
    m = response_module(ApiKey.SASL_AUTHENTICATE, version)
    return build(m.SaslAuthenticateResponse, error_code=error_code(step.error_code),
                 error_message=step.error_message, auth_bytes=step.auth_bytes,
                 session_lifetime=timedelta(milliseconds=step.session_lifetime_ms))


async def handle_sasl_handshake(ctx: BrokerContext, request: Any, version: int, client: ClientInfo) -> Any:
    return handshake_response(SaslStep(int(ErrorCode.ILLEGAL_SASL_STATE)), version)


async def handle_sasl_authenticate(ctx: BrokerContext, request: Any, version: int, client: ClientInfo) -> Any:
    step = SaslStep(int(ErrorCode.ILLEGAL_SASL_STATE),
                    "SaslAuthenticate request received after successful authentication")
    return authenticate_response(step, version)
