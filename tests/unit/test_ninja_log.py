"""devtools.ninja_log (what bench/scale_floor.py reads logs with): a ninja log's edges counted once each, by kind,
and the time at least one ran."""

from __future__ import annotations

import pytest

from devtools import ninja_log

pytestmark = pytest.mark.unit

LOG = "\n".join([
    "# ninja log v7",
    "0\t1000\t1\tlib/Support/CMakeFiles/LLVMSupport.dir/APInt.cpp.o\taa",
    "500\t3000\t1\tlib/Target/X86/X86GenInstrInfo.inc\tbb",
    "500\t3000\t1\t/abs/build/lib/Target/X86/X86GenInstrInfo.inc\tbb",  # the same edge, its other output
    "4000\t4500\t1\tlib/libLLVMSupport.a\tcc",
    "4500\t4600\t1\tbin/llvm-tblgen\tdd",
    "4000\t4200\t1\tinclude/llvm/IR/IntrinsicsNVPTX.h\tee",
])


def test_edges_with_several_outputs_count_once() -> None:
    assert len(ninja_log.ninja_edges(LOG)) == 5


def test_breakdown_by_kind() -> None:
    got = ninja_log.ninja_breakdown(LOG)
    assert got["span_s"] == 4.6
    kinds = got["kinds"]
    assert kinds["tablegen"]["edges"] == 2  # the .inc and the intrinsics header
    assert kinds["tablegen"]["edge_s_summed"] == 2.7
    assert kinds["compile"]["edges"] == 1 and kinds["archive"]["edges"] == 1 and kinds["link"]["edges"] == 1


def test_running_time_is_the_union_of_the_spans() -> None:
    assert ninja_log.union_s([(0, 1000), (500, 3000), (4000, 4500)]) == 3.5
    assert ninja_log.union_s([(0, 3000), (1000, 2000)]) == 3.0
