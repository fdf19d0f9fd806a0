"""Backend plugins: the CPU example plugin installed as a distribution (entry point) and as a
TILEC_PLUGIN_DIRS directory, running real kernels on this machine; and the errors for
duplicate, broken and misconfigured plugins and unknown targets."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

pytestmark = pytest.mark.native

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "tilec-cpu"


def _root(tilec: ModuleType) -> Path:
    return Path(tilec.__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def installed_plugin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`pip install` of examples/tilec-cpu into a private target directory."""
    target = tmp_path_factory.mktemp("plugin-site")
    build = tmp_path_factory.mktemp("plugin-build")
    src = build / "tilec-cpu"
    shutil.copytree(EXAMPLE, src, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "--disable-pip-version-check",
            "--target",
            str(target),
            str(src),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (target / "tilec_cpu" / "backend.py").is_file()
    eps = next(target.glob("tilec_cpu-*.dist-info")) / "entry_points.txt"
    assert "[tilec.backends]" in eps.read_text() and "cpu = tilec_cpu:CPUBackend" in eps.read_text()
    return target


@pytest.fixture
def plugin_dir(tmp_path: Path) -> Path:
    """The plugin package copied to a directory whose name is no Python identifier."""
    d = tmp_path / "plugins" / "cpu backend-1.0"
    shutil.copytree(EXAMPLE / "tilec_cpu", d, ignore=shutil.ignore_patterns("__pycache__"))
    return d


def _settings(tilec: ModuleType, tmp_path: Path, **env: str) -> Any:
    base = {"TILEC_CACHE_DIR": str(tmp_path / "cache"), "PATH": os.environ.get("PATH", "")}
    return tilec.Settings.from_env({**base, **env})


def _python(
    code: str, tilec: ModuleType, paths: list[Path], env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if k != "TILEC_PLUGIN_DIRS"}
    full["PYTHONPATH"] = os.pathsep.join(str(p) for p in [*paths, _root(tilec)])
    full.update(env or {})
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=full, check=False
    )


RUN_VADD = """
    import json, sys
    import numpy as np
    import tilec
    sys.path.insert(0, {tests!r})
    import kernels
    k = tilec.compile(kernels.vector_add(tilec.ir), target="cpu:x86-64")
    a = np.arange(1000, dtype=np.float32)
    b = np.full(1000, 0.5, dtype=np.float32)
    out = np.zeros(1000, dtype=np.float32)
    k[4, 256](a, b, out, 1000)
    backend = tilec.backends.registry_for(tilec.Settings.from_env().plugin_dirs).plugins("cpu")
    print(json.dumps({{"ok": bool((out == a + b).all()), "stages": list(k.asm),
                      "origin": [p.origin for p in backend], "file": type(k).__module__}}))
"""


def test_installed_plugin_runs_a_kernel_through_its_entry_point(
    tilec: ModuleType, installed_plugin: Path, tmp_path: Path
) -> None:
    proc = _python(
        RUN_VADD.format(tests=str(Path(__file__).parent)),
        tilec,
        [installed_plugin],
        {"TILEC_CACHE_DIR": str(tmp_path / "cache")},
    )
    assert proc.returncode == 0, proc.stderr
    res = json.loads(proc.stdout.splitlines()[-1])
    assert res["ok"] is True
    assert res["stages"] == ["llir", "llir_host", "llir_opt", "asm", "obj", "so"]
    assert res["origin"] == [
        f"entry point 'cpu = tilec_cpu:CPUBackend' of distribution tilec-cpu 0.1.0 "
        f"({next(installed_plugin.glob('tilec_cpu-*.dist-info'))})"
    ]
    cli = _python("import sys; from tilec.cli import main; sys.exit(main(['backends']))", tilec, [installed_plugin])
    assert cli.returncode == 0, cli.stdout + cli.stderr
    assert "cpu: elf-shared-object via stage 'so'; entry point 'cpu = tilec_cpu:CPUBackend'" in cli.stdout
    assert "cuda: cubin via stage 'cubin'; tilec itself (built in)" in cli.stdout


def test_plugin_directory_with_any_name_runs_kernels(
    tilec: ModuleType, kernels: ModuleType, plugin_dir: Path, tmp_path: Path
) -> None:
    s = _settings(tilec, tmp_path, TILEC_PLUGIN_DIRS=str(plugin_dir.parent))
    k = tilec.compile(kernels.vector_add(tilec.ir), target="cpu", settings=s)
    assert k.target.arch == "x86-64" and k.asm["so"][:4] == b"\x7fELF"
    assert type(k).__module__.startswith("_tilec_plugin_cpu_")
    rng = np.random.default_rng(7)
    a, b = rng.standard_normal(5000, dtype=np.float32), rng.standard_normal(5000, dtype=np.float32)
    out = np.zeros_like(a)
    k[(20,), (256,)](a, b, out, 5000)
    assert np.array_equal(out, a + b)
    # libdevice calls become libm calls; a specialization fixes scale.
    e = tilec.compile(kernels.EXP_IR, target="cpu:native", constants={"scale": 3.0}, settings=s)
    assert e.name == "exp_scale__scale_3p0" and "@expf" in e.asm["llir_host"]
    x = np.linspace(-4, 4, 999, dtype=np.float32)
    y = np.zeros_like(x)
    e[4, 256](x, y, np.int64(999))
    np.testing.assert_allclose(y, 3.0 * np.exp(x), rtol=1e-6)
    with pytest.raises(tilec.LaunchArgumentError, match="takes 3 argument"):
        e[4, 256](x, y, 2.0, 999)
    # The manifest in the package directory also works when the directory is listed itself.
    s2 = _settings(tilec, tmp_path, TILEC_PLUGIN_DIRS=str(plugin_dir))
    assert tilec.backends.registry_for(s2.plugin_dirs).plugins("cpu")[0].kind == "plugin directory"


def test_cpu_backend_refuses_barriers(tilec: ModuleType, kernels: ModuleType, plugin_dir: Path, tmp_path: Path) -> None:
    s = _settings(tilec, tmp_path, TILEC_PLUGIN_DIRS=str(plugin_dir))
    with pytest.raises(tilec.CompileError, match="cannot honour barriers"):
        tilec.compile(kernels.block_sum(tilec.ir), target="cpu", settings=s)
    with pytest.raises(tilec.TargetError, match=r"unknown target 'cpu:arm64'.*\[backend 'cpu' from plugin directory"):
        tilec.compile(kernels.EXP_IR, target="cpu:arm64", settings=s)


def test_duplicate_backend_names_name_both_origins(
    tilec: ModuleType, installed_plugin: Path, plugin_dir: Path, tmp_path: Path
) -> None:
    code = """
        import tilec
        try:
            tilec.compile("define void @f() {{ ret void }}", target="cpu")
        except tilec.PluginError as exc:
            print(exc)
    """
    proc = _python(
        code.format(),
        tilec,
        [installed_plugin],
        {"TILEC_PLUGIN_DIRS": str(plugin_dir), "TILEC_CACHE_DIR": str(tmp_path / "c")},
    )
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "backend name 'cpu' is provided 2 times" in out
    assert "entry point 'cpu = tilec_cpu:CPUBackend' of distribution tilec-cpu 0.1.0" in out
    assert f"plugin directory {plugin_dir} (manifest {plugin_dir / 'tilec-plugin.toml'})" in out


def _write_plugin(root: Path, dirname: str, manifest: str, files: dict[str, str]) -> Path:
    d = root / dirname
    d.mkdir(parents=True)
    (d / "tilec-plugin.toml").write_text(textwrap.dedent(manifest))
    for name, text in files.items():
        (d / name).write_text(textwrap.dedent(text))
    return d


GOOD_BACKEND = """
    from tilec.backends import Backend, Target
    class Toy(Backend):
        name = "{name}"
        binary_stage = "llir"
        binary_format = "llvm-ir"
        def parse_target(self, arch, options):
            return Target(self.name, arch)
        def stages(self, target, options, settings):
            return {{"llir": lambda src, ctx: src}}
"""


@pytest.mark.parametrize(
    ("manifest", "files", "message"),
    [
        (
            'name = "toy"\nentry = "mod:Toy"\n',
            {"mod.py": "raise ImportError('no numpy here')\n"},
            r"backend plugin 'toy' from plugin directory .*toy-plugin.* failed to load: ImportError: no numpy here",
        ),
        (
            'name = "toy"\nentry = "mod:Nope"\n',
            {"mod.py": GOOD_BACKEND.format(name="toy")},
            r"backend plugin 'toy' .* failed to load: AttributeError",
        ),
        (
            'name = "toy"\nentry = "mod:thing"\n',
            {"mod.py": "thing = 42\n"},
            r"gives 42, which is not a tilec.backends.Backend",
        ),
        (
            'name = "toy"\nentry = "mod:Toy"\n',
            {"mod.py": GOOD_BACKEND.format(name="other")},
            r"registered as 'toy' but its backend calls itself 'other'",
        ),
    ],
)
def test_broken_plugins_name_the_plugin_and_origin(
    tilec: ModuleType, tmp_path: Path, manifest: str, files: dict[str, str], message: str
) -> None:
    d = _write_plugin(tmp_path / "plugins", "toy-plugin", manifest, files)
    s = _settings(tilec, tmp_path, TILEC_PLUGIN_DIRS=str(d.parent))
    with pytest.raises(tilec.PluginError, match=message) as info:
        tilec.compile("define void @f() {\n  ret void\n}\n", target="toy:1", settings=s)
    assert info.value.plugin == "toy" and str(d) in info.value.origin


def test_bad_manifests_and_dirs_show_up_with_unknown_targets(tilec: ModuleType, tmp_path: Path) -> None:
    root = tmp_path / "plugins"
    _write_plugin(root, "no entry", 'name = "toy"\n', {})
    _write_plugin(root, "bad toml", "name = \n", {})
    missing = tmp_path / "does-not-exist"
    s = _settings(tilec, tmp_path, TILEC_PLUGIN_DIRS=f"{root}{os.pathsep}{missing}")
    with pytest.raises(tilec.TargetError) as info:
        tilec.compile("define void @f() {\n  ret void\n}\n", target="toy:1", settings=s)
    text = str(info.value)
    assert "no backend named 'toy'" in text and "cuda (tilec itself (built in))" in text
    assert f"{root / 'no entry' / 'tilec-plugin.toml'} is not a valid tilec plugin manifest: 'entry' must be" in text
    assert f"cannot read {root / 'bad toml' / 'tilec-plugin.toml'}" in text
    assert f"TILEC_PLUGIN_DIRS names {missing}, which is not a directory" in text
    with pytest.raises(tilec.TargetError, match=r"unknown target 'tpu'.*write <backend>:<arch>"):
        tilec.compile("define void @f() {\n  ret void\n}\n", target="tpu", settings=s)


def test_a_working_toy_plugin_without_init(tilec: ModuleType, tmp_path: Path) -> None:
    d = _write_plugin(
        tmp_path / "p",
        "toy.v2 (test)",
        'name = "toy"\nentry = "mod:Toy"\n',
        {"mod.py": GOOD_BACKEND.format(name="toy")},
    )
    s = _settings(tilec, tmp_path, TILEC_PLUGIN_DIRS=str(d))
    k = tilec.compile(
        'define void @f() {\n  ret void\n}\n!nvvm.annotations = !{!0}\n!0 = !{ptr @f, !"kernel", i32 1}\n',
        target="toy:anything",
        settings=s,
    )
    assert list(k.asm) == ["llir"] and str(k.target) == "toy:anything"
    with pytest.raises(tilec.BackendError, match="gives kernels no launcher"):
        k[1, 1]()
