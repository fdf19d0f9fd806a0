"""The wheelhouse under the origin switches, and re-verified on every look."""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import pytest

from hermetic.core.errors import SourceError
from hermetic.fetch import wheelhouse
from hermetic.model import requirements
from hermetic.model.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.unit

FILES = {"alpha-1.0-py3-none-any.whl": b"alpha wheel", "beta_pkg-2.0-py3-none-any.whl": b"beta wheel"}


def _reqs(tmp_path: Path) -> Path:
    req = tmp_path / "reqs.txt"
    req.write_text(
        f"alpha==1.0 --hash=sha256:{hashlib.sha256(FILES['alpha-1.0-py3-none-any.whl']).hexdigest()}\n"
        f"beta-pkg==2.0 --hash=sha256:{hashlib.sha256(FILES['beta_pkg-2.0-py3-none-any.whl']).hexdigest()}\n"
    )
    return req


def _settings(tmp_path: Path, use_urls: bool) -> Settings:
    return Settings(root=ROOT, cache_dir=tmp_path / "cache", work_dir=tmp_path / "work", quiet=True, use_urls=use_urls)


def _pip_that_records(tmp_path: Path) -> tuple[str, Path]:
    """A "python" that writes the pinned wheels like pip download would, and leaves a trace that it ran."""
    trace = tmp_path / "pip-ran"
    script = tmp_path / "fake-python"
    script.write_text(
        f"#!{sys.executable}\nimport sys\nfrom pathlib import Path\n"
        f"Path({str(trace)!r}).write_text('ran')\n"
        "d = Path(sys.argv[sys.argv.index('-d') + 1])\n"
        f"for n, data in {FILES!r}.items():\n    (d / n).write_bytes(data)\n"
    )
    script.chmod(0o755)
    return str(script), trace


def test_no_urls_never_runs_pip_and_names_what_is_missing(tmp_path: Path) -> None:
    req = _reqs(tmp_path)
    house = tmp_path / "house"
    house.mkdir()
    (house / "alpha-1.0-py3-none-any.whl").write_bytes(FILES["alpha-1.0-py3-none-any.whl"])
    python, trace = _pip_that_records(tmp_path)
    with pytest.raises(SourceError) as exc:
        wheelhouse.fetch_wheelhouse(_settings(tmp_path, use_urls=False), lambda m: None, req, house, python=python)
    assert not trace.exists(), "pip download ran although --no-urls was given"
    err = exc.value
    assert "beta-pkg==2.0" in err.why and "alpha" not in err.why
    assert "--no-urls" in err.fix and str(house) in err.fix
    assert "pass --wheelhouse" not in err.fix  # `fetch` and `all` have no such option
    assert err.exit_code == 4


def test_no_urls_with_a_complete_wheelhouse_is_fine(tmp_path: Path) -> None:
    req = _reqs(tmp_path)
    house = tmp_path / "house"
    house.mkdir()
    for name, data in FILES.items():
        (house / name).write_bytes(data)
    python, trace = _pip_that_records(tmp_path)
    assert wheelhouse.fetch_wheelhouse(_settings(tmp_path, use_urls=False), lambda m: None, req, house, python=python) == house
    assert not trace.exists()


def test_tampered_wheel_is_removed_and_refetched(tmp_path: Path) -> None:
    req = _reqs(tmp_path)
    house = tmp_path / "house"
    house.mkdir()
    for name, data in FILES.items():
        (house / name).write_bytes(data)
    target = house / "beta_pkg-2.0-py3-none-any.whl"
    target.write_bytes(b"beta wheeL")  # same size
    python, trace = _pip_that_records(tmp_path)
    logged: list[str] = []
    wheelhouse.fetch_wheelhouse(_settings(tmp_path, use_urls=True), logged.append, req, house, python=python)
    assert trace.exists() and target.read_bytes() == FILES[target.name]
    assert any(str(target) in m and hashlib.sha256(b"beta wheeL").hexdigest() in m for m in logged)


def test_tampered_wheel_with_no_urls_is_removed_and_named(tmp_path: Path) -> None:
    req = _reqs(tmp_path)
    house = tmp_path / "house"
    house.mkdir()
    for name, data in FILES.items():
        (house / name).write_bytes(data)
    target = house / "beta_pkg-2.0-py3-none-any.whl"
    target.write_bytes(b"beta wheeL")
    with pytest.raises(SourceError) as exc:
        wheelhouse.fetch_wheelhouse(_settings(tmp_path, use_urls=False), lambda m: None, req, house, python="/nonexistent")
    assert str(target) in exc.value.why
    assert hashlib.sha256(b"beta wheeL").hexdigest() in exc.value.why
    assert hashlib.sha256(FILES[target.name]).hexdigest() in exc.value.why
    assert not target.exists()


def test_require_wheelhouse_names_path_and_digests_of_a_damaged_wheel(tmp_path: Path) -> None:
    req = _reqs(tmp_path)
    house = tmp_path / "house"
    house.mkdir()
    for name, data in FILES.items():
        (house / name).write_bytes(data)
    (house / "alpha-1.0-py3-none-any.whl").write_bytes(b"alpha wheeL")
    with pytest.raises(SourceError) as exc:
        requirements.require_wheelhouse(house, requirements.load_requirements(req))
    assert str(house / "alpha-1.0-py3-none-any.whl") in exc.value.why
    assert hashlib.sha256(b"alpha wheeL").hexdigest() in exc.value.why
