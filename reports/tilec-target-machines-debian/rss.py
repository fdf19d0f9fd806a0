import resource, sys
sys.path.insert(0, "/work/main")
import tilec
from bench.tilec_compile import tilec_module, tilec_settings
st = tilec_settings(None)
src = str(tilec_module(sys.argv[1]))
def rss():
    return int(open("/proc/self/statm").read().split()[1]) * 4096 / 2**20
for i in range(1, 3001):
    tilec.compile(src, target="sm_90", use_ptxas=False, settings=st)
    if i in (100, 500, 1000, 2000, 3000):
        print(i, round(rss(), 1), "MiB", flush=True)
