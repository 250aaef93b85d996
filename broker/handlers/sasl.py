"""SaslHandshake (17) and SaslAuthenticate (36): responses from the authenticator's steps, and
the answers Kafka's KafkaApis gives where no authentication is under way.

On a SASL listener the connection's authenticator (security.sasl_server, driven by
broker/server.py) answers both; a request reaching the dispatch table came on a listener
without SASL, or after authentication without re-authentication: Kafka answers
ILLEGAL_SASL_STATE then (KafkaApis.handleSaslHandshakeRequest / handleSaslAuthenticateRequest).
"""

from __future__ import annotations

from typing import Any

from broker.handlers.context import BrokerContext, ClientInfo
from broker.listener_security import authenticate_response, handshake_response
from common.errors import ErrorCode
from security.sasl_server import SaslStep


async def handle_sasl_handshake(ctx: BrokerContext, request: Any, version: int, client: ClientInfo) -> Any:
    return handshake_response(SaslStep(int(ErrorCode.ILLEGAL_SASL_STATE)), version)


async def handle_sasl_authenticate(ctx: BrokerContext, request: Any, version: int, client: ClientInfo) -> Any:
    step = SaslStep(int(ErrorCode.ILLEGAL_SASL_STATE),
                    "SaslAuthenticate request received after successful authentication")
    return authenticate_response(step, version)
