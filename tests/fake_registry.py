"""An in-process OCI registry of both kinds: with the OCI 1.1 referrers API (api=True) and without.

Blobs, monolithic uploads, manifests by tag and digest, and the referrers API; it records the paths
asked, so tests can see how discovery went.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from contextlib import contextmanager

from devtools.servers import serving as serve
from fake_http import FakeHandler, FakeServer
from hermetic.oci.types import MT_INDEX


class Fake(FakeServer):
    def __init__(self, api: bool) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.api = api
        self.blobs: dict[str, bytes] = {}
        self.uploads: dict[str, bytes] = {}
        self.manifests: dict[str, tuple[str, bytes]] = {}  # reference -> (media type, body)
        self.paths: list[str] = []



@contextmanager
def serving(api: bool) -> Iterator[Fake]:
    """A Fake registry answering on a thread for the duration of the block."""
    with serve(Fake(api=api)) as server:
        yield server


class _Handler(FakeHandler):
    server: Fake

    def handle_any(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        path, _, query = self.path.partition("?")
        self.server.paths.append(f"{self.command} {path}")
        parts = path.split("/")
        if path == "/v2/":
            return self.reply(200)
        if "uploads" in parts:
            uid = parts[-1] or "u1"
            if self.command == "POST":
                self.server.uploads[uid] = b""
                return self.reply(202, Location=f"/v2/r/blobs/uploads/{uid}")
            data = self.server.uploads.pop(uid) + body
            digest = query.split("digest=")[1].replace("%3A", ":")
            assert "sha256:" + hashlib.sha256(data).hexdigest() == digest
            self.server.blobs[digest] = data
            return self.reply(201)
        if "blobs" in parts:
            data = self.server.blobs.get(parts[-1])
            return self.reply(404) if data is None else self.reply(200, data)
        if "referrers" in parts:
            if not self.server.api:
                return self.reply(404, b"404 page not found\n")
            subject = parts[-1]
            found = []
            for ref, (mt, doc) in self.server.manifests.items():
                m = json.loads(doc)
                if ref.startswith("sha256:") and (m.get("subject") or {}).get("digest") == subject:
                    found.append({"mediaType": mt, "digest": ref, "size": len(doc),
                                  "artifactType": m.get("artifactType"), "annotations": m.get("annotations") or {}})
            index = json.dumps({"schemaVersion": 2, "mediaType": MT_INDEX, "manifests": found}).encode()
            return self.reply(200, index, Content_Type=MT_INDEX)
        if "manifests" in parts:
            ref = parts[-1]
            if self.command == "PUT":
                digest = "sha256:" + hashlib.sha256(body).hexdigest()
                mt = self.headers.get("Content-Type", "")
                self.server.manifests[ref] = self.server.manifests[digest] = (mt, body)
                extra = {}
                subject = (json.loads(body).get("subject") or {}).get("digest")
                if self.server.api and subject:
                    extra["OCI_Subject"] = subject
                return self.reply(201, Docker_Content_Digest=digest, **extra)
            if ref not in self.server.manifests:
                return self.reply(404)
            mt, doc = self.server.manifests[ref]
            return self.reply(200, doc, Content_Type=mt)
        return self.reply(404)

    do_GET = do_HEAD = do_POST = do_PUT = do_PATCH = handle_any
