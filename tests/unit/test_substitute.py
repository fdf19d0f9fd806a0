"""Substitution: its settings, the inputs tag, the plan's lines, and what makes a substitute refused.

The pull itself runs against the in-process registry (tests/fake_registry.py, with and without the
referrers API) on a fake tree; the real registry and a real `support` build are in
tests/integration/test_substitute_registry.py.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fake_registry import Fake, serving
from helpers import ROOT, hermetic, resolve_in_project
from hermetic.attest import attach as attest
from hermetic.attest import provenance
from hermetic.core.errors import UsageError
from hermetic.model import record
from hermetic.model.settings import Settings, Substitute, parse_substitute
from hermetic.oci import image, referrers, referrers_registry
from hermetic.oci.layout import Layout, pick_root
from hermetic.oci.registry import RegistryClient
from hermetic.oci.transfer import push_layout
from hermetic.oci.types import parse_reference
from hermetic.plan import pipeline as plan
from hermetic.plan import substitute
from schemas.examples import ZIG_ID, fake_image, fake_llvm_build, settings

pytestmark = pytest.mark.unit

HOST = {"name": "host", "kind": "host"}
INPUTS = "cd" * 32  # what fake_llvm_build records


# -- settings ---------------------------------------------------------------------------------------------


def test_substitutes_from_each_layer_in_order_of_precedence(tmp_path: Path) -> None:
    table = 'substitutes = ["registry.example.com/llvm-cache"]'
    assert resolve_in_project(tmp_path, table=table).substitutes == (Substitute("registry.example.com", "llvm-cache"),)
    env = {"HERMETIC_SUBSTITUTES": "a.example.com/x, http://127.0.0.1:5000/y  b.example.com/org/z,a.example.com/x"}
    got = resolve_in_project(tmp_path / "e", env=env, table=table).substitutes
    assert got == (Substitute("a.example.com", "x"), Substitute("127.0.0.1:5000", "y", insecure=True),
                   Substitute("b.example.com", "org/z"))
    cli = {"substitutes": ["localhost:5000/c"]}
    assert resolve_in_project(tmp_path / "c", cli=cli, env=env).substitutes == (Substitute("localhost:5000", "c"),)
    # --no-substitute wins over every layer
    assert resolve_in_project(tmp_path / "n", cli={"no_substitute": True}, env=env, table=table).substitutes == ()
    assert resolve_in_project(tmp_path / "d").substitutes == ()


@pytest.mark.parametrize("text", ["llvm-cache", "registry.example.com/llvm:1", "registry.example.com/llvm@sha256:" + "a" * 64,
                                  "registry.example.com/", "ftp://registry.example.com/x", "registry.example.com/Bad"])
def test_a_substitute_is_a_registry_and_a_repository_only(text: str) -> None:
    with pytest.raises(UsageError, match="invalid substitute"):
        parse_substitute(text)


def test_a_bad_substitute_is_a_usage_error_without_traceback(tmp_path: Path) -> None:
    proc = hermetic("build", "llvm", "--variant", "support", "--work-dir", str(tmp_path / "w"),
                    "--substitute", "registry.example.com/llvm:19.1.7", check=False)
    assert proc.returncode == 2 and "invalid substitute" in proc.stderr and "Traceback" not in proc.stderr
    proc = hermetic("build", "llvm", "--substitute", "a.example.com/x", "--no-substitute", check=False)
    assert proc.returncode == 2 and "not allowed with" in proc.stderr


def test_substitute_is_an_option_of_the_commands_that_build_only() -> None:
    assert "--no-substitute" in hermetic("all", "--help").stdout
    proc = hermetic("fetch", "--substitute", "a.example.com/x", check=False)
    assert proc.returncode == 2 and "unrecognized arguments" in proc.stderr


# -- the tag ----------------------------------------------------------------------------------------------


def test_the_inputs_tag_is_the_first_128_bits_of_the_inputs_digest() -> None:
    digest = "0123456789abcdef" * 4
    assert substitute.inputs_tag(digest) == "inputs-0123456789abcdef0123456789abcdef"
    assert substitute.inputs_tag("sha256:" + digest) == substitute.inputs_tag(digest)
    assert len(substitute.inputs_tag(digest)) <= 128  # a valid tag
    parse_reference(f"r.example.com/x:{substitute.inputs_tag(digest)}")
    for bad in ("", "abc", "G" * 64, "AB" * 32):
        with pytest.raises(UsageError):
            substitute.inputs_tag(bad)


# -- the plan ---------------------------------------------------------------------------------------------


def _settings(tmp_path: Path, **kw: Any) -> Settings:
    return Settings(root=ROOT, cache_dir=tmp_path / "cache", work_dir=tmp_path / "work", quiet=True,
                    variant="support", toolchain="host", **kw)


SUB = Substitute("registry.example.com", "llvm-cache")


def _plan_all(s: Settings, log: Any, **kw: Any) -> plan.Plan:
    """As `hermetic all` plans: with the settings' substitutes asked (no credentials)."""
    return plan.plan_all(s, log, substitutes=substitute.Finder(s.substitutes, {}) if s.substitutes else None, **kw)


def test_a_hit_makes_the_build_a_pull_and_its_source_unneeded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[str] = []

    def find(subs: tuple[Substitute, ...], inputs: str, environ: Any, log: Any) -> substitute.Hit:
        asked.append(inputs)
        return substitute.Hit(subs[0], substitute.inputs_tag(inputs), "sha256:" + "e" * 64)

    monkeypatch.setattr(substitute, "find", find)
    job = _plan_all(_settings(tmp_path, substitutes=(SUB,)), lambda m: None)
    states = {s.key: s.state for s in job.steps}
    assert states == {"toolchain": plan.SKIP, "fetch": plan.SKIP, "wheelhouse": plan.SKIP, "prune": plan.SKIP,
                      "build": plan.PULL, "image": plan.PULL, "wheel": plan.SKIP}
    assert asked == [job.step("build").inputs_digest]
    text = job.render()
    assert f"[pull] build llvm-support     inputs {asked[0][:16]}  registry.example.com/llvm-cache@sha256:{'e' * 64}" in text
    assert f"(tag inputs-{asked[0][:32]})" in text
    for key in ("fetch", "prune", "wheelhouse"):
        assert job.step(key).detail == "not needed: build llvm-support is pulled"
    # the digests do not depend on where the tree comes from
    plain = plan.plan_all(_settings(tmp_path), lambda m: None)
    assert [s.inputs_digest for s in plain.steps] == [s.inputs_digest for s in job.steps]
    assert plain.step("build").state == plan.RUN and plain.step("fetch").state == plan.RUN


def test_no_substitute_or_force_asks_nobody(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def find(*a: Any) -> None:
        raise AssertionError("a substitute was asked")

    monkeypatch.setattr(substitute, "find", find)
    assert plan.plan_all(_settings(tmp_path), lambda m: None).step("build").state == plan.RUN
    forced = _plan_all(_settings(tmp_path, substitutes=(SUB,)), lambda m: None, force=True).step("build")
    assert forced.state == plan.RUN and "--force" in forced.detail


def test_a_wheel_that_runs_keeps_the_toolchain_and_wheelhouse(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(substitute, "find", lambda s, i, e, log: substitute.Hit(s[0], "t", "sha256:" + "e" * 64))
    s = Settings(root=ROOT, cache_dir=tmp_path / "c", work_dir=tmp_path / "w", quiet=True, variant="nvptx",
                 toolchain="zig", substitutes=(SUB,))
    job = _plan_all(s, lambda m: None)
    states = {st.key: st.state for st in job.steps}
    assert states["build"] == plan.PULL and states["wheel"] == plan.RUN
    assert states["toolchain"] == plan.RUN and states["wheelhouse"] == plan.RUN  # the wheel needs both
    assert states["fetch"] == plan.SKIP and states["prune"] == plan.SKIP
    # `build llvm` stops at the build: no wheel, so neither is needed
    narrowed = _plan_all(s, lambda m: None, through="build")
    assert [st.key for st in narrowed.steps] == ["toolchain", "fetch", "wheelhouse", "prune", "build"]
    assert {st.state for st in narrowed.steps[:4]} == {plan.SKIP}


def test_an_unreachable_substitute_is_warned_about_and_the_build_planned(tmp_path: Path) -> None:
    logged: list[str] = []
    dead = Substitute(f"127.0.0.1:{_closed_port()}", "llvm-cache", insecure=True)
    job = _plan_all(_settings(tmp_path, substitutes=(dead,)), logged.append)
    assert job.step("build").state == plan.RUN
    assert len(logged) == 1 and logged[0].startswith(f"warning: substitute {dead} not asked:")


def _closed_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# -- what is refused --------------------------------------------------------------------------------------


def _statement(tmp_path: Path, toolchain_id: dict[str, str] | None = None) -> tuple[dict[str, Any], str]:
    rec = fake_llvm_build(tmp_path / "a", toolchain_id=toolchain_id)
    layout = fake_image(rec, tmp_path / "image")
    attest.attest_image(settings(tmp_path), layout, rec)
    prov = referrers.referrers(Layout(layout), artifact_type=provenance.MEDIA_TYPE)[0]
    return json.loads(prov.read()), pick_root(Layout(layout)).digest


def test_a_provenance_that_agrees_has_no_problems(tmp_path: Path) -> None:
    st, digest = _statement(tmp_path, ZIG_ID)
    assert substitute.check_provenance(st, digest, INPUTS, ZIG_ID) == []


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"version": "0.16.0"}, "toolchain version 0.17.1, this build's is 0.16.0"),
        ({"sha256": "00" * 32}, f"toolchain sha256 {ZIG_ID['sha256']}, this build's is {'00' * 32}"),
        ({"name": "zig2"}, "toolchain name zig, this build's is zig2"),
        ({"target": "aarch64-linux-gnu.2.28"}, "toolchain target x86_64-linux-gnu.2.28, this build's is aarch64-linux-gnu.2.28"),
    ],
)
def test_a_different_toolchain_is_named(tmp_path: Path, change: dict[str, str], named: str) -> None:
    st, digest = _statement(tmp_path, ZIG_ID)
    assert substitute.check_provenance(st, digest, INPUTS, ZIG_ID | change) == [f"the provenance names {named}"]


def test_other_inputs_another_image_or_a_host_build_are_named(tmp_path: Path) -> None:
    st, digest = _statement(tmp_path)
    assert substitute.check_provenance(st, digest, "ef" * 32, HOST) == [
        f"the provenance names inputs digest {INPUTS[:16]}…, this build's is {'ef' * 8}…"]
    other = "sha256:" + "0" * 64
    assert substitute.check_provenance(st, other, INPUTS, HOST) == [
        f"the provenance is about {digest[:19]}…, not this image"]
    # a host build does not stand in for a zig one
    assert "the provenance names toolchain name host, this build's is zig" in substitute.check_provenance(
        st, digest, INPUTS, ZIG_ID)
    assert substitute.check_provenance({"predicateType": "x"}, digest, INPUTS, HOST)[0].startswith(
        "the provenance is malformed")


# -- the pull, against the in-process registry -------------------------------------------------------------


@pytest.fixture(params=[True, False], ids=["referrers-api", "tag-schema"])
def fake(request: pytest.FixtureRequest) -> Iterator[Fake]:
    with serving(request.param) as server:
        yield server


def _publish(fake: Fake, layout_path: Path) -> str:
    layout = Layout(layout_path)
    with RegistryClient(fake.host, insecure=True) as client:
        pushed = push_layout(client, layout, parse_reference(f"{fake.host}/llvm:19.1.7"))
        referrers_registry.push_referrers(client, layout, "llvm", {pushed.digest})
        assert substitute.publish(client, layout, "llvm", [pick_root(layout)]) == [
            (substitute.inputs_tag(INPUTS), pushed.digest)]
    return pushed.digest


def _install(fake: Fake, work: Path, logged: list[str]) -> record.BuildRecord:
    sub = Substitute(fake.host, "llvm", insecure=True)
    hit = substitute.find((sub,), INPUTS, {}, logged.append)
    assert hit is not None
    return substitute.install(hit, work / "llvm" / "support", work / "images", "llvm-support-19.1.7-linux-amd64",
                              INPUTS, HOST, "amd64", {}, logged.append)


def test_a_substitute_is_pulled_verified_and_swapped_in(fake: Fake, tmp_path: Path) -> None:
    rec_path = fake_llvm_build(tmp_path / "a")
    layout = fake_image(rec_path, tmp_path / "image")
    attest.attest_image(settings(tmp_path), layout, rec_path)
    digest = _publish(fake, layout)
    work = tmp_path / "elsewhere" / "work"
    got = _install(fake, work, [])
    original = record.load_build_record(rec_path)
    assert got.substituted == f"{fake.host}/llvm@{digest}" and got.substitute_refused is None
    assert got.tree == original.tree and got.inputs_digest == original.inputs_digest
    on_disk = record.load_build_record(work / "llvm" / "support" / "record.json")
    assert on_disk == got and on_disk.install_root == str(work / "llvm" / "support" / "install")
    assert record.tree_digest(record.scan_tree(work / "llvm" / "support" / "install")) == original.tree.digest
    assert not (work / "llvm" / "support" / ".new").exists()
    kept = work / "images" / "llvm-support-19.1.7-linux-amd64"
    assert image.kept_image(got, kept, "gzip") == pick_root(Layout(kept))
    assert pick_root(Layout(kept)).digest == digest and pick_root(Layout(kept)).ref_name == kept.name
    assert image.kept_image(got, kept, "zstd") is None  # another compression is another image
    assert sorted(r.kind for r in referrers.referrers(Layout(kept))) == ["build-record", "provenance", "sbom"]


def test_a_tampered_provenance_is_refused_and_nothing_kept(fake: Fake, tmp_path: Path) -> None:
    rec_path = fake_llvm_build(tmp_path / "a")
    layout_path = fake_image(rec_path, tmp_path / "image")
    attest.attest_image(settings(tmp_path), layout_path, rec_path)
    layout = Layout(layout_path)
    prov = referrers.referrers(layout, artifact_type=provenance.MEDIA_TYPE)[0]
    st = json.loads(prov.read())
    st["predicate"]["buildDefinition"]["internalParameters"]["inputsDigest"] = "ef" * 32
    referrers.attach(layout, pick_root(layout), provenance.MEDIA_TYPE, provenance.dumps(st), "provenance.intoto.json",
                     {referrers.ANN_KIND: attest.KIND_PROVENANCE})
    digest = _publish(fake, layout_path)
    work = tmp_path / "w"
    with pytest.raises(substitute.Refused) as err:
        _install(fake, work, [])
    assert str(err.value) == (f"substitute {fake.host}/llvm@{digest} refused: the provenance names inputs digest "
                              f"{'ef' * 8}…, this build's is {INPUTS[:16]}…")
    assert "\n" not in str(err.value)
    assert not (work / "llvm" / "support" / "record.json").exists() and not (work / "images").exists()
    assert not (work / "llvm" / "support" / ".new").exists()


def test_a_record_that_is_not_the_one_the_provenance_names_is_refused(fake: Fake, tmp_path: Path) -> None:
    rec_path = fake_llvm_build(tmp_path / "a")
    layout_path = fake_image(rec_path, tmp_path / "image")
    attest.attest_image(settings(tmp_path), layout_path, rec_path)
    layout = Layout(layout_path)
    data = json.loads(rec_path.read_text())
    data["jobs"] = 64  # the same inputs, another story
    referrers.attach(layout, pick_root(layout), record.RECORD_MEDIA_TYPE, json.dumps(data).encode(), "record.json",
                     {referrers.ANN_KIND: attest.KIND_BUILD_RECORD})
    _publish(fake, layout_path)
    with pytest.raises(substitute.Refused, match="is not the one the provenance names"):
        _install(fake, tmp_path / "w", [])


def test_an_image_without_attestations_has_no_inputs_tag_and_no_hit(fake: Fake, tmp_path: Path) -> None:
    rec_path = fake_llvm_build(tmp_path / "a")
    layout = Layout(fake_image(rec_path, tmp_path / "image"))
    with RegistryClient(fake.host, insecure=True) as client:
        push_layout(client, layout, parse_reference(f"{fake.host}/llvm:19.1.7"))
        assert substitute.publish(client, layout, "llvm", [pick_root(layout)]) == []
    assert substitute.find((Substitute(fake.host, "llvm", insecure=True),), INPUTS, {}, lambda m: None) is None


def test_a_refused_substitute_runs_the_skipped_steps_and_records_the_refusal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from hermetic.build import llvm
    from hermetic.fetch import prune, sources, wheelhouse
    from hermetic.model import recipe

    ran: list[str] = []
    s = _settings(tmp_path, substitutes=(SUB,))
    rec = recipe.load(s.recipes_dir)
    variant = recipe.resolve_variant(rec, "support")
    hit = substitute.Hit(SUB, "t", "sha256:" + "e" * 64)
    why = f"substitute {hit.ref} refused: the provenance names inputs digest 0000000000000000…, this build's is …"

    def refuse(*a: Any) -> record.BuildRecord:
        ran.append("pull")
        raise substitute.Refused(why)

    monkeypatch.setattr(substitute, "find", lambda *a: hit)
    monkeypatch.setattr(substitute, "install", refuse)
    monkeypatch.setattr(sources, "fetch", lambda *a: ran.append("fetch") or "the release")
    monkeypatch.setattr(wheelhouse, "fetch_wheelhouse", lambda *a, **kw: ran.append("wheelhouse"))
    monkeypatch.setattr(prune, "ensure_pruned", lambda *a: ran.append("prune") or {"path": "x"})
    monkeypatch.setattr(llvm.BuildStep, "source", lambda self, ctx: llvm.BuildInputs(
        rec, variant, tmp_path / "x", "00", (), None, toolchain=ctx.toolchain))
    monkeypatch.setattr(llvm, "build", lambda *a, **kw: ran.append(f"build refused={kw['substitute_refused']}"))
    logged: list[str] = []
    job = plan.plan_all(s, logged.append, through="build", substitutes=substitute.Finder(s.substitutes, {}))
    assert job.step("build").state == plan.PULL
    plan.execute(job, logged.append)
    # each resolving step once: the prune takes the archive the fetch left in the context
    assert ran == ["pull", "fetch", "wheelhouse", "prune", f"build refused={why}"]
    assert f"warning: {why}; building instead" in logged
