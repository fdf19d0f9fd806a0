import hashlib, sys
sys.path.insert(0, "/work/main")
import tilec
from bench.tilec_compile import tilec_module, tilec_settings
st = tilec_settings(None)
for name in ("vadd", "vadd_v8", "expsin"):
    for t in ("sm_80", "sm_90"):
        for o in (0, 3):
            k = tilec.compile(tilec_module(name), target=t, opt_level=o, use_ptxas=False, settings=st)
            print(name, t, f"O{o}", hashlib.sha256(k.asm["ptx"].encode()).hexdigest()[:16])
