"""Throwaway TLS certificates for the tests, made with the openssl command.

One CA signs a server certificate for 127.0.0.1 and a client certificate;
a second, untrusted CA signs an "intruder" client certificate. Everything
lives in a temporary directory that is deleted with the object: no key is
ever committed.
"""

from __future__ import annotations

import shutil
import ssl
import subprocess
import tempfile
from pathlib import Path


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


class TlsFiles:
    def __init__(self):
        self.dir = Path(tempfile.mkdtemp(prefix="recall-tls-"))
        for ca in ("ca", "otherca"):
            _openssl(
                "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                "-keyout", f"{ca}.key", "-out", f"{ca}.pem", "-days", "2", "-subj", f"/CN=recall test {ca}",
                "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign",
                cwd=self.dir,
            )  # fmt: skip
        self._leaf("server", "ca", "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n")
        self._leaf("client", "ca", "extendedKeyUsage=clientAuth\n")
        self._leaf("intruder", "otherca", "extendedKeyUsage=clientAuth\n")

    def _leaf(self, name: str, ca: str, ext: str) -> None:
        (self.dir / f"{name}.ext").write_text(ext)
        _openssl(
            "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={name}",
            cwd=self.dir,
        )  # fmt: skip
        _openssl(
            "x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key",
            "-CAcreateserial", "-out", f"{name}.pem", "-days", "2", "-extfile", f"{name}.ext",
            cwd=self.dir,
        )  # fmt: skip

    def path(self, name: str) -> str:
        return str(self.dir / name)

    def server_args(self, verify_mode: int = 0, *extra: str) -> list[str]:
        """memcached's flags for TLS with these files."""
        opts = f"ssl_chain_cert={self.path('server.pem')},ssl_key={self.path('server.key')}"
        if verify_mode:
            opts += f",ssl_ca_cert={self.path('ca.pem')},ssl_verify_mode={verify_mode}"
        return ["-Z", "-o", opts, *extra]

    def client_context(self, cert: str | None = None) -> ssl.SSLContext:
        """A client context trusting the CA, presenting `cert` (a file stem) if given."""
        ctx = ssl.create_default_context(cafile=self.path("ca.pem"))
        if cert:
            ctx.load_cert_chain(self.path(f"{cert}.pem"), self.path(f"{cert}.key"))
        return ctx

    def close(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)
