"""TLS for gpuscope's servers and clients: TLS 1.3 only, a self-signed certificate made once, real mutual TLS
on request, and the X.509 helpers the fleet's certificate authority uses too.

The self-signed certificate is ECDSA P-256, made with ``cryptography`` and
kept under ``~/.gpuscope/tls/`` (key 0600), so a browser that trusted it once
keeps trusting it; its SHA-256 fingerprint is printed at every start so a
client can pin it.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
import socket
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuscope.errors import UsageError

CERT_NAME = "dashboard-cert.pem"
KEY_NAME = "dashboard-key.pem"
VALID_DAYS = 825  # the longest validity Apple and Chrome accept for a server certificate


def subject(text: str) -> Any:
    """An X.509 name with just a common name."""
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, text)])


def san(names: list[str]) -> Any:
    """A subjectAltName extension: IP addresses as such, anything else as a DNS name (duplicates dropped)."""
    from cryptography import x509

    out: list[Any] = []
    for n in dict.fromkeys(names):
        try:
            out.append(x509.IPAddress(ipaddress.ip_address(n)))
        except ValueError:
            out.append(x509.DNSName(n))
    return x509.SubjectAlternativeName(out)


def write_private_key(path: Path, key: Any, *, replace: bool = False) -> None:
    """Write ``key`` (PEM, PKCS8) to a file created mode 0600 before a byte is in it.

    With ``replace``, an existing file is removed first rather than truncated:
    truncating would keep its old mode, which may let others read the new key.
    """
    from cryptography.hazmat.primitives import serialization

    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    if replace:
        path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(pem)


@dataclass(frozen=True, slots=True)
class ServerCert:
    cert: Path
    key: Path
    fingerprint: str  # SHA-256 of the DER certificate, colon-separated hex
    generated: bool


def fingerprint(cert_pem: bytes) -> str:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes

    digest = x509.load_pem_x509_certificate(cert_pem).fingerprint(hashes.SHA256())
    return ":".join(f"{b:02X}" for b in digest)


def self_signed(folder: Path, hosts: list[str]) -> ServerCert:
    """The certificate in ``folder``, made there (ECDSA P-256, SANs ``hosts``) when absent or unreadable."""
    cert, key = folder / CERT_NAME, folder / KEY_NAME
    if cert.is_file() and key.is_file():
        try:
            return ServerCert(cert, key, fingerprint(cert.read_bytes()), generated=False)
        except ValueError:
            pass  # damaged: made again below
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    private = ec.generate_private_key(ec.SECP256R1())
    name = subject(f"gpuscope dashboard ({socket.gethostname()})")
    now = dt.datetime.now(dt.timezone.utc)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(private.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=VALID_DAYS))
        .add_extension(san(hosts), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(private, hashes.SHA256())
    )
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    write_private_key(key, private, replace=True)  # a damaged pair is made again
    cert_pem = certificate.public_bytes(serialization.Encoding.PEM)
    cert.write_bytes(cert_pem)
    return ServerCert(cert, key, fingerprint(cert_pem), generated=True)


def server_context(cert: Path, key: Path, *, client_ca: Path | None = None, flags: str = "--") -> ssl.SSLContext:
    """A server context that speaks TLS 1.3 only; with ``client_ca``, every client must present a certificate it signed.

    Raises UsageError for files that cannot be read or do not match, naming
    the options ``{flags}tls-cert``, ``{flags}tls-key`` and ``{flags}ca-cert``.
    """
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_3
    ctx.maximum_version = ssl.TLSVersion.TLSv1_3
    try:
        ctx.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as exc:
        raise UsageError(
            f"{flags}tls-cert {cert} / {flags}tls-key {key}: cannot load: {exc}",
            remedy="give a PEM certificate and its private key",
        ) from None
    if client_ca is not None:
        try:
            ctx.load_verify_locations(cafile=client_ca)
        except (OSError, ssl.SSLError) as exc:
            raise UsageError(
                f"{flags}ca-cert {client_ca}: cannot load: {exc}", remedy="give a PEM CA certificate"
            ) from None
        ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx
