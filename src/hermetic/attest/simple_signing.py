"""OpenPGP simple-signing signatures of images in a lookaside store: what Debian 12's containers tools enforce.

Debian 12's containers/image (5.23.1, in skopeo 1.9.3, buildah 1.28.2 and
podman 4.3.1) parses `sigstoreSigned` policy requirements but refuses every
image under them: Debian patched sigstore verification out ("Debian-local
change: sigstore disabled"). What it does enforce is `signedBy` with
`keyType: GPGKeys`: an OpenPGP-signed "atomic container signature" payload
naming the image's digest and reference, read from the lookaside store that
registries.d names for the registry (`lookaside: file:///DIR` or an http(s)
URL serving the same tree). So a builder signs both ways: sigstore
attachments (signing.py) for upstream containers/image and cosign, and this
for Debian.

The OpenPGP work is GnuPG's (`gpg`, Debian's gnupg): keys are imported into a
throwaway GNUPGHOME for each use, so no keyring of the user's is touched.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from hermetic import __version__
from hermetic.core.errors import EnvironmentError_, SubprocessFailed, UsageError

KEY_FILE_ENV = "HERMETIC_GPG_KEY_FILE"
ATOMIC_TYPE = "atomic container signature"


def payload(identity: str, digest: str) -> bytes:
    doc = {
        "critical": {
            "identity": {"docker-reference": identity},
            "image": {"docker-manifest-digest": digest},
            "type": ATOMIC_TYPE,
        },
        "optional": {"creator": f"hermetic {__version__}"},
    }
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()


def _gpg() -> str:
    found = shutil.which("gpg")
    if found is None:
        raise EnvironmentError_("gpg is not installed", "OpenPGP image signatures are made with GnuPG",
                                "apt-get install gnupg")
    return found


@contextmanager
def _home() -> Iterator[dict[str, str]]:
    with tempfile.TemporaryDirectory(prefix="hermetic-gpg-") as home:
        os.chmod(home, 0o700)
        try:
            yield {"GNUPGHOME": home, "LC_ALL": "C", "PATH": os.environ.get("PATH", "/usr/bin:/bin")}
        finally:
            # gpg-agent lingers per home; ask it to go before the directory does
            subprocess.run(["gpgconf", "--kill", "all"], env={"GNUPGHOME": home, "PATH": os.environ.get("PATH", "")},
                           capture_output=True, check=False)


def _run(argv: list[str], env: Mapping[str, str], what: str, data: bytes = b"") -> bytes:
    proc = subprocess.run(argv, input=data, env=dict(env), capture_output=True, timeout=120)
    if proc.returncode != 0:
        raise SubprocessFailed(what, argv, proc.returncode, proc.stderr.decode(errors="replace"))
    return proc.stdout


@dataclass(frozen=True)
class GpgKey:
    """An armored OpenPGP secret key (unprotected) and where it came from."""

    armored: bytes
    source: str


def load_key(path: str | None, environ: Mapping[str, str]) -> GpgKey | None:
    """--gpg-key FILE, else HERMETIC_GPG_KEY_FILE; None when neither is given."""
    path = path or environ.get(KEY_FILE_ENV) or None
    if not path:
        return None
    try:
        return GpgKey(Path(path).read_bytes(), path)
    except OSError as exc:
        raise UsageError(f"cannot read the OpenPGP key {path}", str(exc), "check the path") from exc


def generate(prefix: Path, name: str) -> tuple[Path, Path]:
    """PREFIX.gpg.key (armored secret key, mode 0600) and PREFIX.gpg.pub (the public key for policy.json)."""
    priv, pub = prefix.with_name(prefix.name + ".gpg.key"), prefix.with_name(prefix.name + ".gpg.pub")
    for p in (priv, pub):
        if p.exists():
            raise UsageError(f"{p} exists", "hermetic never overwrites a key", "choose another PREFIX")
    gpg = _gpg()
    with _home() as env:
        _run([gpg, "--batch", "--passphrase", "", "--quick-gen-key", f"{name} <builder@hermetic.invalid>",
              "nistp256", "sign", "never"], env, "making an OpenPGP key")
        secret = _run([gpg, "--batch", "--armor", "--export-secret-keys"], env, "exporting the OpenPGP key")
        public = _run([gpg, "--batch", "--armor", "--export"], env, "exporting the OpenPGP key")
    fd = os.open(priv, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(secret)
    pub.write_bytes(public)
    return priv, pub


def sign(key: GpgKey, identity: str, digest: str) -> bytes:
    """An OpenPGP signed message of the simple-signing payload (what containers/image's signedBy verifies)."""
    gpg = _gpg()
    with _home() as env:
        _run([gpg, "--batch", "--import"], env, f"importing the OpenPGP key {key.source}", key.armored)
        listing = _run([gpg, "--batch", "--with-colons", "--list-secret-keys"], env, "listing the OpenPGP key")
        fprs = [line.split(":")[9] for line in listing.decode().splitlines() if line.startswith("fpr:")]
        if not fprs:
            raise UsageError(f"{key.source} holds no OpenPGP secret key", "", "pass the .gpg.key `hermetic key generate` wrote")
        return _run([gpg, "--batch", "--pinentry-mode", "loopback", "--passphrase", "", "--local-user", fprs[0],
                     "--sign", "--output", "-"], env, "signing the image", payload(identity, digest))


def lookaside_dir(base: Path, repository: str, digest: str) -> Path:
    """Where containers/image looks for a signature: BASE/REPO@sha256=HEX/ (signature-1, signature-2, …)."""
    algo, _, hexpart = digest.partition(":")
    return base / f"{repository}@{algo}={hexpart}"


def store(base: Path, repository: str, digest: str, signature: bytes) -> Path:
    """Add a signature beside those already there (each builder's is kept); an identical one is not repeated."""
    where = lookaside_dir(base, repository, digest)
    where.mkdir(parents=True, exist_ok=True)
    n = 1
    while (where / f"signature-{n}").exists():
        if (where / f"signature-{n}").read_bytes() == signature:
            return where / f"signature-{n}"
        n += 1
    path = where / f"signature-{n}"
    tmp = where / f".signature-{n}.tmp{os.getpid()}"
    tmp.write_bytes(signature)
    os.replace(tmp, path)
    return path
