"""Certificates for the TLS tests, made with ``cryptography`` (no openssl runs): a test
CA, server certificates for 127.0.0.1/localhost, client certificates with a chosen
subject, an expired one, and a second CA nobody trusts. Written as PEM files."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_NAME_OIDS = {"CN": NameOID.COMMON_NAME, "OU": NameOID.ORGANIZATIONAL_UNIT_NAME,
              "O": NameOID.ORGANIZATION_NAME, "C": NameOID.COUNTRY_NAME}


def _name(subject: str) -> x509.Name:
    """"CN=alice,OU=eng,O=example" (RFC 2253 order: most specific first)."""
    parts = [p.split("=", 1) for p in subject.split(",")]
    return x509.Name([x509.NameAttribute(_NAME_OIDS[k.strip()], v.strip())
                      for k, v in reversed(parts)])


@dataclass
class Issued:
    cert: Path  # PEM certificate (chain: leaf then CA)
    key: Path  # PEM private key (unencrypted unless a password was given)

    def keystore(self) -> Path:
        """One PEM file with the key and the chain (ssl.keystore.location)."""
        path = self.cert.with_suffix(".keystore.pem")
        path.write_bytes(self.key.read_bytes() + self.cert.read_bytes())
        return path


class TestCA:
    """A certificate authority in ``directory``; ``cert`` is its PEM certificate."""

    __test__ = False  # not a pytest class

    def __init__(self, directory: Path, name: str = "Odradek Test CA") -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self._key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        subject = _name(f"CN={name},O=Odradek tests")
        self._cert = (
            x509.CertificateBuilder().subject_name(subject).issuer_name(subject)
            .public_key(self._key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=30))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(self._key, hashes.SHA256()))
        self.cert = directory / f"{name.replace(' ', '-').lower()}.pem"
        self.cert.write_bytes(self._cert.public_bytes(serialization.Encoding.PEM))

    def issue(self, file_name: str, subject: str, *, server: bool = False,
              expired: bool = False, password: str | None = None) -> Issued:
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        start, end = ((now - datetime.timedelta(days=10), now - datetime.timedelta(days=1))
                      if expired else (now - datetime.timedelta(days=1),
                                       now + datetime.timedelta(days=30)))
        builder = (
            x509.CertificateBuilder().subject_name(_name(subject))
            .issuer_name(self._cert.subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(start).not_valid_after(end)
            .add_extension(x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH]),
                critical=False))
        if server:
            builder = builder.add_extension(x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                critical=False)
        cert = builder.sign(self._key, hashes.SHA256())
        encryption = (serialization.BestAvailableEncryption(password.encode()) if password
                      else serialization.NoEncryption())
        paths = Issued(self.directory / f"{file_name}.crt", self.directory / f"{file_name}.key")
        paths.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM)
                               + self._cert.public_bytes(serialization.Encoding.PEM))
        paths.key.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                                serialization.PrivateFormat.PKCS8, encryption))
        return paths
