"""A throw-away certificate authority and a serving certificate for the test API server, so that
it can serve HTTPS as a real one does (kubectl sends a bearer token over HTTPS only).

Made with the ``openssl`` tool (ECDSA P-256, valid for two days): a CA, and a certificate for
``127.0.0.1``, ``::1`` and ``localhost`` signed by it. The files are the caller's to remove (they
are made in the directory it gives).

    tls = make_serving_certificate(workdir / "pki")
    server = APIServer(tls=tls)              # serves https://127.0.0.1:<port>
    write_kubeconfig(path, server.url, token, ca_pem=tls.ca_pem)
"""

from __future__ import annotations

import shutil
import ssl
import subprocess
from dataclasses import dataclass
from pathlib import Path

#: The names the serving certificate is valid for.
SUBJECT_ALT_NAMES = "IP:127.0.0.1,IP:::1,DNS:localhost"

_EXTENSIONS = f"""\
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature,keyEncipherment
extendedKeyUsage = serverAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
subjectAltName = {SUBJECT_ALT_NAMES}
"""
_DAYS = "2"
_CURVE = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]


class CertificateError(RuntimeError):
    """The certificates could not be made (no openssl tool, or it failed)."""


@dataclass(frozen=True, slots=True)
class ServingCertificate:
    ca_file: Path
    cert_file: Path
    key_file: Path

    @property
    def ca_pem(self) -> str:
        return self.ca_file.read_text()

    def server_context(self) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.cert_file, self.key_file)
        return context

    def client_context(self) -> ssl.SSLContext:
        """A client's context that trusts this CA only."""
        return ssl.create_default_context(cafile=str(self.ca_file))


def _openssl(*args: str) -> None:
    openssl = shutil.which("openssl")
    if openssl is None:
        raise CertificateError(
            "the openssl tool is needed to make the test API server's certificate"
        )
    done = subprocess.run([openssl, *args], capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        raise CertificateError(f"openssl {args[0]} failed: {done.stderr.strip()}")


def make_serving_certificate(directory: Path) -> ServingCertificate:
    """A new CA and a serving certificate for loopback, in ``directory`` (made private)."""
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    ca_key, ca_crt = directory / "ca.key", directory / "ca.crt"
    key, csr, crt = directory / "server.key", directory / "server.csr", directory / "server.crt"
    extensions = directory / "server.ext"
    extensions.write_text(_EXTENSIONS)
    _openssl(
        "req", "-x509", *_CURVE, "-keyout", str(ca_key), "-out", str(ca_crt), "-days", _DAYS,
        "-subj", "/CN=nodesync test API server CA",
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign",
    )  # fmt: skip
    _openssl(
        "req", *_CURVE, "-keyout", str(key), "-out", str(csr),
        "-subj", "/CN=nodesync test API server",
    )  # fmt: skip
    _openssl(
        "x509", "-req", "-in", str(csr), "-CA", str(ca_crt), "-CAkey", str(ca_key),
        "-CAcreateserial", "-days", _DAYS, "-extfile", str(extensions), "-out", str(crt),
    )  # fmt: skip
    return ServingCertificate(ca_crt, crt, key)
