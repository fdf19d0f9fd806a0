import sys, time
t0 = time.perf_counter()
import tilec
from bench.tilec_compile import tilec_module
t1 = time.perf_counter()
k = tilec.compile(tilec_module("vadd"), target="sm_90", settings=tilec.Settings.from_env())
t2 = time.perf_counter()
print(f"{sys.argv[1]} import {1e3*(t1-t0):.0f} ms, first compile {1e3*(t2-t1):.0f} ms, {k.cache_status}, {k.metadata.assembler}")
