"""Security's cost (issue 29): produce and consume throughput over SASL_SSL as a fraction of
PLAINTEXT with the C client (bench/loadgen.c, librdkafka), and full SCRAM-SHA-512 logins per
second (TCP, TLS handshake, SaslHandshake, two SaslAuthenticate round trips) on one broker.

    .venv/bin/python bench/sasl_tls_overhead.py [--records 300000] [--logins-seconds 10]   # make bench-security

One controller and one broker from `tidelog up --security SASL_SSL` (localcluster.security_setup),
with SCRAM-SHA-512 enabled beside PLAIN and one SCRAM user; the PLAINTEXT and SASL_SSL
listeners of the same broker carry the same load one after the other. Logins run from
LOGIN_WORKERS concurrent clients; each login's client side (PBKDF2 at 4096 iterations) runs in
this process, which shares the machine with the broker.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import ssl
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Final

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import c_client  # noqa: E402
from common.protocol import messages  # noqa: E402
from common.protocol.frame import strip_response_header  # noqa: E402
from localcluster.launcher import LocalCluster, free_ports  # noqa: E402
from security.scram import SCRAM_SHA_512, ScramClient  # noqa: E402

VALUE_BYTES: Final = 100
LOGIN_WORKERS: Final = 4
USER, PASSWORD = "bench", "bench-secret"
HOSTS: Final = ["127.0.0.1", "127.0.0.2"]


def _frame(api_key: int, version: int, correlation: int, entity: Any) -> bytes:
    from common.protocol.frame import RequestHeader, encode_request_header
    body = b"".join(bytes(c) for c in messages.encode_request(entity, version))  # type: ignore[arg-type]
    data = encode_request_header(RequestHeader(api_key, version, correlation, "bench")) + body
    return struct.pack(">i", len(data)) + data


async def _call(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, api_key: int, version: int,
                correlation: int, **fields: Any) -> Any:
    writer.write(_frame(api_key, version, correlation, messages.build(messages.request_type(api_key, version),
                                                                      **fields)))
    size = struct.unpack(">i", await reader.readexactly(4))[0]
    data = await reader.readexactly(size)
    return messages.decode_response(api_key, version, strip_response_header(api_key, version, memoryview(data)[4:]))


async def _login(host: str, port: int, context: ssl.SSLContext) -> None:
    reader, writer = await asyncio.open_connection(host, port, ssl=context, server_hostname=host)
    try:
        await _call(reader, writer, 17, 1, 1, mechanism="SCRAM-SHA-512")
        client = ScramClient(SCRAM_SHA_512, USER, PASSWORD, secrets.token_urlsafe(18))
        first = await _call(reader, writer, 36, 2, 2, auth_bytes=client.first())
        final = await _call(reader, writer, 36, 2, 3, auth_bytes=client.final(bytes(first.auth_bytes)))
        if int(final.error_code) or not client.verify(bytes(final.auth_bytes)):
            raise RuntimeError(f"login failed: {final.error_message}")
    finally:
        writer.close()


async def logins_per_second(host: str, port: int, ca: str, seconds: float) -> float:
    context = ssl.create_default_context(cafile=ca)
    done = 0
    deadline = time.monotonic() + seconds

    async def worker() -> None:
        nonlocal done
        while time.monotonic() < deadline:  # bounded by the deadline
            await _login(host, port, context)
            done += 1

    started = time.monotonic()
    await asyncio.gather(*(worker() for _ in range(LOGIN_WORKERS)))
    return done / (time.monotonic() - started)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--logins-seconds", type=float, default=10.0)
    args = parser.parse_args()
    binary = c_client.build()
    if binary is None:
        return 1
    with tempfile.TemporaryDirectory(prefix="bench-security-") as scratch:  # removed when the run ends
        root = Path(scratch)
        raft, admin, kafka, metrics = free_ports(HOSTS, 4)
        with LocalCluster.start(root, controllers=1, brokers=1, raft_port=raft, admin_port=admin, kafka_port=kafka,
                                metrics_port=metrics, security="SASL_SSL",
                                broker_config={"sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512"}) as cluster:
            try:
                broker = cluster.brokers[0].spec
                plaintext = broker.bootstrap_address
                secure_host, secure_port = broker.host, broker.kafka_port + 2
                subprocess.run([sys.executable, "-m", "tidelog", "users", "create", "--user", USER, "--password",
                                PASSWORD, "--bootstrap-server", plaintext], check=True, capture_output=True)
                config = root / "client.properties"
                rows = []
                for name, bootstrap, extra in (("PLAINTEXT", plaintext, ""),
                                               ("SASL_SSL", f"{secure_host}:{secure_port}", str(config))):
                    os.environ["LOADGEN_CONFIG"] = extra
                    topic = f"bench-{name.lower()}"
                    produced = c_client.produce(binary, bootstrap, topic, records=args.records, value_bytes=VALUE_BYTES,
                                                partitions=1, acks="1", linger_ms=5)
                    consumed = c_client.consume(binary, bootstrap, topic, records=args.records, partitions=1)
                    rows.append((name, produced.records / produced.seconds, consumed.records / consumed.seconds))
                os.environ.pop("LOADGEN_CONFIG", None)
                ca = str(root / "tls" / "ca.pem")
                rate = asyncio.run(logins_per_second(secure_host, secure_port, ca, args.logins_seconds))
            finally:
                cluster.stop()
    print(f"security bench: {args.records} records of {VALUE_BYTES} B, one broker, librdkafka "
          f"{c_client.librdkafka_version(binary).split()[0]}")
    print(f"{'listener':<10} {'produce rec/s':>14} {'consume rec/s':>14}")
    for name, p, c in rows:
        print(f"{name:<10} {p:>14,.0f} {c:>14,.0f}")
    print(f"SASL_SSL / PLAINTEXT: produce {rows[1][1] / rows[0][1]:.2f}, consume {rows[1][2] / rows[0][2]:.2f}")
    print(f"full SCRAM-SHA-512 logins over TLS: {rate:,.1f}/s ({LOGIN_WORKERS} concurrent clients)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
