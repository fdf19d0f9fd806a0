"""The test tiers, marked by directory; fixtures every tier shares: the source cache and the tiny recipe's builds."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from devtools.servers import REGISTRY_BIN, Registry
from helpers import TINY, SharedBuilds

# Cheapest first: .ci/run runs them in this order and stops at the first that fails.
TIERS = ("unit", "integration", "native", "functional", "gpu")
TESTS = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Each test gets the marker of its tier's directory; a test outside them, or marked for another tier,
    is an error rather than a test that `-m TIER` silently leaves out."""
    for item in items:
        rel = Path(str(item.path)).resolve().relative_to(TESTS)
        tier = rel.parts[0]
        if tier not in TIERS:
            raise pytest.UsageError(f"{rel}: every test lives in a tier directory ({', '.join(TIERS)})")
        other = [m.name for m in item.iter_markers() if m.name in TIERS and m.name != tier]
        if other:
            raise pytest.UsageError(f"{item.nodeid} is marked {other[0]} but lives in tests/{tier}/")
        item.add_marker(getattr(pytest.mark, tier))


@pytest.fixture(scope="session")
def source_cache() -> Path:
    """The real source cache: fetched once, reused across runs (HERMETIC_CACHE or the default)."""
    return Path(os.environ.get("HERMETIC_CACHE", Path.home() / ".cache" / "hermetic"))


def _need_registry() -> None:
    if not os.access(REGISTRY_BIN, os.X_OK):
        pytest.fail(f"{REGISTRY_BIN} is missing: install Debian's docker-registry package (.ci/setup does)")


@pytest.fixture(scope="session")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    """One docker-registry for the session; tests use their own repositories."""
    _need_registry()
    reg = Registry(tmp_path_factory.mktemp("registry"))
    reg.start()
    yield reg
    reg.stop()


@pytest.fixture
def fresh_registry(tmp_path: Path) -> Iterator[Registry]:
    """A registry of the test's own, which the test may kill and restart."""
    _need_registry()
    reg = Registry(tmp_path / "registry")
    reg.start()
    yield reg
    reg.stop()


@pytest.fixture(scope="session")
def builds(tmp_path_factory: pytest.TempPathFactory, source_cache: Path) -> SharedBuilds:
    """Every real build of the session, once each (see SharedBuilds)."""
    return SharedBuilds(tmp_path_factory, source_cache)


# --- the tiny recipe (tests/recipes/tiny): a real Conan build through hermetic, in seconds ------------------


@pytest.fixture(scope="session")
def tiny_mirror(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory holding tiny's release archive, handed to hermetic with --mirror (admitted by its pin)."""
    import sys

    sys.path.insert(0, str(TINY.parent))
    import tiny_archive

    mirror = tmp_path_factory.mktemp("tiny-mirror")
    tiny_archive.write(mirror)
    return mirror


@pytest.fixture(scope="session")
def tiny(tiny_mirror: Path) -> tuple[str, ...]:
    """The options that make a command build or use the tiny recipe."""
    return ("--llvm-recipe", str(TINY), "--mirror", str(tiny_mirror))


@pytest.fixture(scope="session")
def tiny_install(builds: SharedBuilds, tiny: tuple[str, ...]) -> Path:
    """record.json of tiny's `support` variant built with the host compiler: about 10 s."""
    return builds.get(TINY, "support", "host", extra=tiny[2:])


@pytest.fixture(scope="session")
def tiny_full_install(builds: SharedBuilds, tiny: tuple[str, ...]) -> Path:
    """record.json of tiny's `full` variant (two libraries, a 1.5 MB data file), host compiler: about 15 s."""
    return builds.get(TINY, "full", "host", extra=tiny[2:])


@pytest.fixture(scope="session")
def tiny_zig_install(builds: SharedBuilds, tiny: tuple[str, ...]) -> Path:
    """record.json of tiny's `support` with the pinned zig toolchain: about 10 s once zig's runtimes are in the
    source cache (the first zig build of a cache builds them: about a minute)."""
    return builds.get(TINY, "support", "zig", extra=tiny[2:])


@pytest.fixture(scope="session")
def tiny_arm64_install(builds: SharedBuilds, tiny: tuple[str, ...]) -> Path:
    """record.json of tiny's `support` cross-built for arm64 with zig, its test_package run under qemu."""
    return builds.get(TINY, "support", "zig", arch="arm64", extra=tiny[2:])
