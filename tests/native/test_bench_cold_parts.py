"""bench/tilec_cold_parts.py cuts a real cold compile into the backend's stages and the rest of the call: every
stage is timed inside that compile (the wrapper sees them all), and the parts add up to the whole."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest

pytestmark = pytest.mark.native


def test_a_cold_compile_is_cut_into_its_stages_and_the_rest(tilec: ModuleType, tmp_path: Path) -> None:
    from bench.tilec_cold_parts import parts

    res = parts("vadd", "sm_90", 2, tmp_path)
    assert len(res["samples"]) == 2
    for s in res["samples"]:
        stages = {k: v for k, v in s.items() if k.startswith("stage:")}
        assert set(stages) == {"stage:llir", "stage:llir_opt", "stage:ptx", "stage:cubin"}
        assert all(v > 0 for v in stages.values())
        assert s["stages"] == pytest.approx(sum(stages.values()))
        assert 0 < s["stages"] < s["compile"]
        assert s["rest"] == pytest.approx(s["compile"] - s["stages"])
    assert res["assembler"] in ("nvptxcompiler", "ptxas")
