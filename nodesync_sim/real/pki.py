"""A certificate authority for client certificates, made with openssl (EC P-256 keys: fast).

The API server trusts it (``--client-ca-file``); kubelets join with certificates it signs
(CN ``system:node:<name>``, O ``system:nodes``), and the API server presents one to kubelets.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

_DAYS = "2"
_TIMEOUT = 60.0


def _openssl(*args: str) -> None:
    result = subprocess.run(
        ["openssl", *args], capture_output=True, text=True, timeout=_TIMEOUT, check=False
    )
    if result.returncode != 0:
        raise RuntimeError(f"openssl {args[0]} failed: {result.stderr.strip()}")


def _key(path: Path) -> None:
    _openssl("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", str(path))
    path.chmod(0o600)


class ClientCA:
    """A CA in ``directory`` (``ca.crt``, ``ca.key``) that signs client certificates."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.cert = directory / "ca.crt"
        self.key = directory / "ca.key"

    def create(self, common_name: str = "nodesync-test-ca") -> ClientCA:
        self.directory.mkdir(parents=True, exist_ok=True)
        _key(self.key)
        _openssl(
            "req", "-x509", "-new", "-key", str(self.key), "-out", str(self.cert),
            "-days", _DAYS, "-subj", f"/CN={common_name}",
            "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign,digitalSignature",
        )  # fmt: skip
        return self

    def issue(self, name: str, common_name: str, *organizations: str) -> tuple[Path, Path]:
        """A client certificate and its key (``<name>.crt``, ``<name>.key``)."""
        cert, key = self.directory / f"{name}.crt", self.directory / f"{name}.key"
        csr, ext = self.directory / f"{name}.csr", self.directory / f"{name}.ext"
        _key(key)
        subject = "".join(f"/O={o}" for o in organizations) + f"/CN={common_name}"
        _openssl("req", "-new", "-key", str(key), "-out", str(csr), "-subj", subject)
        ext.write_text("keyUsage=critical,digitalSignature\nextendedKeyUsage=clientAuth\n")
        _openssl(
            "x509", "-req", "-in", str(csr), "-CA", str(self.cert), "-CAkey", str(self.key),
            "-CAcreateserial", "-out", str(cert), "-days", _DAYS, "-extfile", str(ext),
        )  # fmt: skip
        csr.unlink()
        ext.unlink()
        return cert, key


def write_kubeconfig(path: Path, server: str, server_ca: Path, cert: Path, key: Path) -> Path:
    """A kubeconfig at ``path`` for ``server``, authenticating with a client certificate."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "cluster",
                "cluster": {"server": server, "certificate-authority": str(server_ca)},
            }
        ],
        "users": [
            {"name": "user", "user": {"client-certificate": str(cert), "client-key": str(key)}}
        ],
        "contexts": [{"name": "user", "context": {"cluster": "cluster", "user": "user"}}],
        "current-context": "user",
    }
    path.write_text(json.dumps(config))
    return path
