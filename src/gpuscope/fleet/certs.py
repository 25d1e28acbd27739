"""`gpuscope certs init`: a private CA, one server certificate per node and a client certificate.

Enough for real mutual TLS in one command: each node's dashboard serves its
own certificate and demands a client certificate from the CA
(``dashboard --tls-cert --tls-key --ca-cert``); the client trusts the CA and
presents its certificate (``--ca-cert --client-cert --client-key``). Keys are
written 0600 before a byte of them is.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuscope.errors import UsageError
from gpuscope.platform.tls import san, subject, write_private_key

CA_DAYS = 3650
LEAF_DAYS = 825


@dataclass(frozen=True, slots=True)
class Issued:
    ca: Path
    servers: dict[str, tuple[Path, Path]]
    client: tuple[Path, Path]


def _leaf(ca_cert: Any, ca_key: Any, common: str, sans: list[str] | None, client: bool) -> tuple[Any, Any]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID

    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.timezone.utc)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject(common))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=LEAF_DAYS))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH if client else ExtendedKeyUsageOID.SERVER_AUTH]),
            critical=False,
        )
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
    )
    if sans:
        builder = builder.add_extension(san(sans), critical=False)
    return builder.sign(ca_key, hashes.SHA256()), key


def init_fleet(folder: Path, nodes: list[str], extra_names: list[str] = ()) -> Issued:  # type: ignore[assignment]
    """Create the CA and the certificates in ``folder`` (which must not hold them already)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    if not nodes:
        raise UsageError("certs init: --nodes names at least one node", remedy="e.g. --nodes gpu-1,gpu-2")
    ca_path = folder / "ca.pem"
    if ca_path.exists():
        raise UsageError(f"{ca_path} exists: a CA is never replaced silently", remedy="choose a new folder")
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.timezone.utc)
    ca = (
        x509.CertificateBuilder()
        .subject_name(subject("gpuscope fleet CA"))
        .issuer_name(subject("gpuscope fleet CA"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=CA_DAYS))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    write_private_key(folder / "ca.key", ca_key)
    ca_path.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    servers = {}
    for node in nodes:
        cert, key = _leaf(ca, ca_key, node, [node, *extra_names], client=False)
        where = folder / node
        where.mkdir(exist_ok=True, mode=0o700)
        write_private_key(where / "server.key", key)
        (where / "server.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        servers[node] = (where / "server.pem", where / "server.key")
    cert, key = _leaf(ca, ca_key, "gpuscope client", None, client=True)
    write_private_key(folder / "client.key", key)
    (folder / "client.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return Issued(ca_path, servers, (folder / "client.pem", folder / "client.key"))
