"""Backend options: parsed by the backend's own frozen dataclass, refused when unknown, keyed."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

pytestmark = pytest.mark.native

TOY_WITH_OPTIONS = """
    from dataclasses import dataclass
    from tilec.backends import Backend, Target
    from tilec.errors import TargetError

    @dataclass(frozen=True)
    class ToyOptions:
        lanes: int = 1

        def validate(self):
            if self.lanes not in (1, 2, 4):
                raise TargetError(f"lanes must be 1, 2 or 4, got {self.lanes}")

    class Toy(Backend):
        name = "toy"
        binary_stage = "llir"
        binary_format = "llvm-ir"
        options_class = ToyOptions
        def parse_target(self, arch, options):
            return Target(self.name, arch)
        def stages(self, target, options, settings):
            lanes = self.options(options).lanes
            return {"llir": lambda src, ctx: src + f"; lanes={lanes}\\n"}
"""
IR = 'define void @f() {\n  ret void\n}\n!nvvm.annotations = !{!0}\n!0 = !{ptr @f, !"kernel", i32 1}\n'


def test_cuda_options_are_parsed_and_checked(tilec: ModuleType, kernels: ModuleType, settings: Any) -> None:
    with pytest.raises(tilec.TargetError, match=r"backend 'cuda' has no option 'ptx_versoin'.*ptx_version, ftz"):
        tilec.compile(kernels.EXP_IR, target="sm_90", ptx_versoin=80, settings=settings)
    with pytest.raises(tilec.TargetError, match="ftz must be True or False"):
        tilec.compile(kernels.EXP_IR, target="sm_90", ftz="yes", settings=settings)
    with pytest.raises(tilec.TargetError, match="ptxas_options must be a sequence of strings"):
        tilec.compile(kernels.EXP_IR, target="sm_90", ptxas_options="-v", settings=settings)
    cuda = tilec.backends.cuda
    opts = tilec.CompileOptions(target="sm_90", backend_options={"ptx_version": 80, "ptxas_options": ["-v"]})
    parsed = tilec.backends.registry_for().get("cuda").options(opts)
    assert parsed == cuda.CudaOptions(ptx_version=80, ptxas_options=("-v",))
    assert parsed.features == "+ptx80"
    assert hash(opts) == hash(tilec.CompileOptions(target="sm_90", backend_options=opts.extra))


def test_defaults_given_or_left_out_key_the_same(tilec: ModuleType, kernels: ModuleType, settings: Any) -> None:
    plain = tilec.compile(kernels.EXP_IR, target="sm_90", settings=settings)
    explicit = tilec.compile(kernels.EXP_IR, target="sm_90", ftz=False, use_ptxas=True, settings=settings)
    assert explicit.key == plain.key and explicit.cache_status == "hit"
    assert isinstance(plain.metadata, tilec.backends.cuda.CudaMetadata)
    assert explicit.metadata.registers == plain.metadata.registers is not None
    other = tilec.compile(kernels.EXP_IR, target="sm_90", ptxas_options=("-O2",), settings=settings)
    assert other.key != plain.key


def _toy_settings(tilec: ModuleType, tmp_path: Path, source: str) -> Any:
    """Settings whose TILEC_PLUGIN_DIRS holds one plugin `toy` made of `source`."""
    d = tmp_path / "plugins" / "toy"
    d.mkdir(parents=True)
    (d / "tilec-plugin.toml").write_text('name = "toy"\nentry = "mod:Toy"\n')
    (d / "mod.py").write_text(textwrap.dedent(source))
    return tilec.Settings.from_env(
        {"TILEC_CACHE_DIR": str(tmp_path / "cache"), "TILEC_PLUGIN_DIRS": str(d), "PATH": os.environ.get("PATH", "")}
    )


def test_a_plugin_declares_its_options_and_refuses_others(tilec: ModuleType, tmp_path: Path) -> None:
    s = _toy_settings(tilec, tmp_path, TOY_WITH_OPTIONS)
    one = tilec.compile(IR, target="toy:x", settings=s)
    four = tilec.compile(IR, target="toy:x", lanes=4, settings=s)
    assert one.asm["llir"].endswith("; lanes=1\n") and four.asm["llir"].endswith("; lanes=4\n")
    assert one.key != four.key
    with pytest.raises(tilec.TargetError, match="lanes must be 1, 2 or 4, got 3"):
        tilec.compile(IR, target="toy:x", lanes=3, settings=s)
    with pytest.raises(tilec.TargetError, match=r"backend 'toy' has no option 'ftz'; its options: lanes"):
        tilec.compile(IR, target="toy:x", ftz=True, settings=s)


def test_a_backend_without_options_refuses_them(tilec: ModuleType, tmp_path: Path) -> None:
    s = _toy_settings(tilec, tmp_path, TOY_WITH_OPTIONS.replace("options_class = ToyOptions", ""))
    with pytest.raises(tilec.TargetError, match="backend 'toy' takes no options of its own; got ptx_version"):
        tilec.compile(IR, target="toy:x", ptx_version=80, settings=s)


def test_unhashable_option_values_are_refused_up_front(tilec: ModuleType) -> None:
    with pytest.raises(tilec.TargetError, match="backend options take numbers, strings"):
        tilec.CompileOptions(target="sm_90", backend_options={"ptxas_options": [{"-v": 1}]})
