"""A throwaway certificate authority for TLS listeners, pure: PEM bytes in, PEM bytes out.

    ca = new_ca("tidelog throwaway CA", now=datetime.now(timezone.utc))
    broker = issue(ca, "broker", hosts=["127.0.0.4", "localhost"], now=...)   # server and client auth
    client = issue(ca, "alice", hosts=[], now=...)                            # a client certificate
    broker.chain_and_key_pem      # ssl.keystore.location's file (Kafka's PEM keystore: key + chain)
    ca.certificate_pem            # ssl.truststore.location's file, and the clients' ssl.ca.location

Python's `cryptography` (already a dependency: pysyncobj encrypts quorum traffic with it)
makes the keys (EC P-256) and certificates, so a newcomer's TLS cluster needs no openssl CLI.
Certificates name their hosts as subjectAltName (IP addresses or DNS names), as clients check
them; every certificate may serve as server and client (brokers are both, to each other).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

PURE = True  # a pure core: no sockets, threads, clocks or files (tests/unit/test_purity.py)

VALIDITY: Final = timedelta(days=365)  # a throwaway CA's certificates: a year
CLOCK_SKEW: Final = timedelta(minutes=5)  # valid from a little before `now`, for clocks behind ours


@dataclass(frozen=True, slots=True)
class Issued:
    """A private key and its certificate (and the issuer's, for the chain)."""

    key_pem: bytes
    certificate_pem: bytes
    issuer_pem: bytes = b""

    @property
    def chain_and_key_pem(self) -> bytes:
        """Kafka's PEM keystore: the private key, then the certificate chain."""
        return self.key_pem + self.certificate_pem + self.issuer_pem


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def new_ca(common_name: str, *, now: datetime) -> Issued:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    certificate = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
                   .serial_number(x509.random_serial_number())
                   .not_valid_before(now - CLOCK_SKEW).not_valid_after(now + VALIDITY)
                   .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
                   .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                                content_commitment=False, key_encipherment=False,
                                                data_encipherment=False, key_agreement=False,
                                                encipher_only=False, decipher_only=False), critical=True)
                   .sign(key, hashes.SHA256()))
    return Issued(_key_pem(key), certificate.public_bytes(serialization.Encoding.PEM))


def _san(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


def issue(ca: Issued, common_name: str, *, hosts: list[str], now: datetime,
          organizational_unit: str | None = None) -> Issued:
    """A certificate for `common_name` (its subject CN, so the principal is User:CN=<name>...),
    valid for `hosts`, signed by `ca`."""
    ca_key = serialization.load_pem_private_key(ca.key_pem, password=None)
    ca_cert = x509.load_pem_x509_certificate(ca.certificate_pem)
    assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
    key = ec.generate_private_key(ec.SECP256R1())
    # DER order is the reverse of RFC 2253's (Kafka's principal): OU first here reads CN=..,OU=.. there
    attributes = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if organizational_unit is not None:
        attributes.insert(0, x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, organizational_unit))
    builder = (x509.CertificateBuilder().subject_name(x509.Name(attributes)).issuer_name(ca_cert.subject)
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - CLOCK_SKEW).not_valid_after(now + VALIDITY)
               .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
               .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                                     ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False))
    if hosts:
        builder = builder.add_extension(x509.SubjectAlternativeName([_san(h) for h in hosts]), critical=False)
    certificate = builder.sign(ca_key, hashes.SHA256())
    return Issued(_key_pem(key), certificate.public_bytes(serialization.Encoding.PEM), ca.certificate_pem)
