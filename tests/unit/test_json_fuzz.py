"""Every JSON hermetic reads, damaged at random: a classed error or a result, never a traceback.

Valid documents (index.json, manifests, configs, referrers.json, build and wheel records, auth files, registry
answers) have a random part replaced, removed or retyped (hypothesis); the readers, and the CLI commands on
top of them, must answer with a HermeticError. The issue's inputs are fixed examples: a size of 1e999 and an
index nested 100,000 levels deep.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_oci import make_record
from test_oci_layers_benign import DIR, REG, layout_of, tar_of

from hermetic.__main__ import main
from hermetic.attest.inspection import inspect_layout, inspect_record
from hermetic.core.errors import HermeticError
from hermetic.model.record import load_build_record, load_wheel_record
from hermetic.oci import referrers
from hermetic.oci.http import _error_codes, _parse_token, error_messages, find_credentials
from hermetic.oci.layout import Layout, pick_root, select_manifest
from hermetic.oci.referrers_registry import _index_manifests
from hermetic.oci.transfer import pull_layout, pull_local
from hermetic.oci.unpack import unpack_layout

pytestmark = pytest.mark.unit

EXAMPLES = int(os.environ.get("HERMETIC_FUZZ_EXAMPLES", "90"))  # more for a long local run
FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow])

scalars = st.one_of(st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
                    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12))
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                       st.dictionaries(st.text(max_size=8), inner, max_size=3)),
                      max_leaves=8)


def mutate(doc: Any, data: st.DataObject) -> Any:
    """The document with one node (chosen by data) replaced by a random value, dropped, or retyped."""
    paths: list[tuple[Any, ...]] = []

    def walk(node: Any, path: tuple[Any, ...]) -> None:
        paths.append(path)
        if isinstance(node, dict):
            for k, v in node.items():
                walk(v, (*path, k))
        elif isinstance(node, list):
            for i, v in enumerate(node):
                walk(v, (*path, i))

    walk(doc, ())
    path = data.draw(st.sampled_from(paths))
    how = data.draw(st.sampled_from(["replace", "drop", "stringify"]))
    new = json.loads(json.dumps(doc))
    if not path:
        return data.draw(values)
    parent = new
    for key in path[:-1]:
        parent = parent[key]
    if how == "drop":
        parent.pop(path[-1])
    elif how == "stringify":
        parent[path[-1]] = json.dumps(parent[path[-1]])
    else:
        parent[path[-1]] = data.draw(values)
    return new


def classed(call: Callable[[], object]) -> None:
    try:
        call()
    except HermeticError as exc:
        assert exc.what  # a message a user can read


def image_documents(base: Path) -> tuple[Layout, dict[str, Path]]:
    """A valid layout with referrers, and the files holding each of its JSON documents."""
    layout = layout_of(base / "img", tar_of(("usr/", DIR, "", b"", 0o755), ("usr/a", REG, "", b"x", 0o644)))
    # every field hermetic reads, so that damage can reach each of them
    config = json.loads(layout.read_blob(layout.children(pick_root(layout))[0]))
    config.update(config={"Labels": {"io.hermetic.variant": "support", "org.opencontainers.image.title": "t"}},
                  history=[{"created_by": "test"}], created="2025-01-15T00:00:00Z")
    store(layout, "config", config)
    manifest = json.loads(layout.read_blob(pick_root(layout)))
    manifest["annotations"] = {"org.opencontainers.image.title": "t"}
    store(layout, "manifest", manifest)
    index = json.loads((layout.path / "index.json").read_text())
    index["manifests"][0].update(platform={"architecture": "amd64", "os": "linux"},
                                 annotations={"org.opencontainers.image.ref.name": "t"})
    (layout.path / "index.json").write_text(json.dumps(index))
    root = pick_root(layout)
    referrers.attach(layout, root, "application/vnd.test+json", b'{"x": 1}', "x.json", {})
    children = layout.children(root)
    return layout, {
        "index": layout.path / "index.json",
        "oci-layout": layout.path / "oci-layout",
        "manifest": layout.blob_path(root.digest),
        "config": layout.blob_path(children[0].digest),
        "referrers": layout.path / referrers.REFERRERS_FILE,
    }


def readers_of(layout: Layout, out: Path) -> list[Callable[[], object]]:
    return [
        lambda: select_manifest(layout, pick_root(layout), "amd64"),
        lambda: layout.verify(),
        lambda: unpack_layout(layout, out / "root"),
        lambda: pull_local(__import__("hermetic.oci.types", fromlist=["LayoutRef"]).LayoutRef(layout.path), out / "copy"),
        lambda: inspect_layout(layout.path, "amd64"),
        lambda: referrers.referrers(layout),
    ]


def store(layout: Layout, which: str, doc: Any) -> None:
    """A damaged manifest or config under its own new digest, the documents above it pointed at it: so the
    readers get past the digest checks and parse what is damaged."""
    data = json.dumps(doc).encode()
    index = json.loads((layout.path / "index.json").read_text())
    manifest_desc = index["manifests"][0]
    if which == "config":
        manifest = json.loads(layout.blob_path(manifest_desc["digest"]).read_bytes())
        manifest["config"].update(digest=layout.put_bytes(data), size=len(data))
        data = json.dumps(manifest).encode()
    manifest_desc.update(digest=layout.put_bytes(data), size=len(data))
    (layout.path / "index.json").write_text(json.dumps(index))


@pytest.mark.parametrize("which", ["index", "oci-layout", "manifest", "config", "referrers"])
@settings(FUZZ, max_examples=EXAMPLES * 2 // 3)
@given(data=st.data(), rehash=st.booleans())
def test_damaged_layout_documents(which: str, data: st.DataObject, rehash: bool) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        layout, files = image_documents(Path(tmp))
        path = files[which]
        damaged = mutate(json.loads(path.read_text()), data)
        if which in ("manifest", "config") and rehash:
            store(layout, which, damaged)
        else:
            path.chmod(0o644)
            path.write_text(json.dumps(damaged))
        for read in readers_of(layout, Path(tmp)):
            classed(read)


@FUZZ
@given(data=st.data(), wheel=st.booleans())
def test_damaged_records(data: st.DataObject, wheel: bool) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = make_record(Path(tmp) / "b")
        doc = mutate(json.loads(path.read_text()), data)
        path.write_text(json.dumps(doc))
        classed(lambda: load_build_record(path))
        classed(lambda: inspect_record(path))
        if wheel:
            classed(lambda: load_wheel_record(path))


@FUZZ
@given(data=st.data())
def test_damaged_auth_files(data: st.DataObject) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        auth = Path(tmp) / "auth.json"
        auth.write_text(json.dumps(mutate({"auths": {"r.io": {"auth": "dTpw"}, "https://o.io/v1/": {"username": "u"}}}, data)))
        classed(lambda: find_credentials("r.io", {"REGISTRY_AUTH_FILE": str(auth)}, Path(tmp)))


@FUZZ
@given(data=st.data())
def test_damaged_registry_answers(data: st.DataObject) -> None:
    answer = json.dumps(mutate({"errors": [{"code": "X", "message": "m"}], "token": "t", "expires_in": 60,
                                "manifests": [{"digest": "sha256:" + "a" * 64, "mediaType": "m", "size": 1}]}, data))
    body = answer.encode()
    error_messages(body)
    _error_codes(body)
    classed(lambda: _parse_token(body, "https://realm"))
    classed(lambda: _index_manifests(body, "the referrers"))


# -- the issue's inputs, through the CLI ------------------------------------------------------------------------


def run_main(*argv: str) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        rc = main(list(argv))
    return rc, err.getvalue()


@pytest.mark.parametrize("index", ids=["size-1e999", "manifests-nested-100000", "nested-100000"], argvalues=[
    '{"schemaVersion": 2, "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json", '
    '"digest": "sha256:' + "a" * 64 + '", "size": 1e999}]}',
    '{"manifests": ' + "[" * 100_000 + "]" * 100_000 + "}",
    "[" * 100_000 + "]" * 100_000,
])
def test_the_issue_s_index_files(tmp_path: Path, index: str) -> None:
    layout, files = image_documents(tmp_path)
    files["index"].write_text(index)
    for argv in (("inspect", str(layout.path)), ("pull", f"oci:{layout.path}", "--unpack", str(tmp_path / "u"))):
        rc, err = run_main(*argv)
        assert rc == 8, err
        assert err.startswith("error: ") and "fix:" in err
    assert not (tmp_path / "u").exists()


@pytest.fixture(scope="module")
def fuzzed_registry() -> Iterator[Any]:
    """One fake registry for every example: its manifest (by tag) is whatever the example puts in `body`."""
    from test_oci_registry_policy import CONFIG, Server, digest, manifest_of

    reg = Server()
    reg.body = b"{}"  # type: ignore[attr-defined]
    served = {digest(CONFIG): CONFIG, digest(manifest_of()): manifest_of()}

    def answer(method: str, path: str, headers: dict[str, str]) -> tuple[int, bytes, dict[str, str]]:
        name = path.rsplit("/", 1)[-1]
        if "/manifests/" in path:
            return 200, served.get(name, reg.body), {"Content-Type": "application/vnd.oci.image.manifest.v1+json"}  # type: ignore[attr-defined]
        return (200, served[name], {}) if name in served else (404, b"", {})

    reg.answer = answer
    threading.Thread(target=reg.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    yield reg
    reg.shutdown()
    reg.server_close()


@settings(FUZZ, max_examples=EXAMPLES // 3)
@given(data=st.data(), index=st.booleans())
def test_damaged_manifests_from_a_registry(fuzzed_registry: Any, data: st.DataObject, index: bool) -> None:
    """A registry's manifest (or index) damaged, served under its own digest: pull and inspect refuse it."""
    from test_oci_registry_policy import digest, manifest_of

    from hermetic.attest.inspection import inspect_ref
    from hermetic.oci.registry import RegistryClient
    from hermetic.oci.types import parse_reference

    good = json.loads(manifest_of())
    if index:
        good = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
                "manifests": [{"mediaType": good["mediaType"], "digest": digest(manifest_of()), "size": len(manifest_of()),
                               "platform": {"architecture": "amd64", "os": "linux"}}]}
    fuzzed_registry.body = json.dumps(mutate(good, data)).encode()
    host = fuzzed_registry.host
    with tempfile.TemporaryDirectory() as tmp:
        with RegistryClient(host, insecure=True, retries=0, timeout=5) as client:
            classed(lambda: pull_layout(client, parse_reference(f"{host}/x/y:1"), Path(tmp) / "out", "amd64"))
        classed(lambda: inspect_ref(f"{host}/x/y:1", True, "amd64", True, environ={}))
