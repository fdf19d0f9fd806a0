"""The GPU runner: the whole pipeline on a CUDA machine without network, as typed steps writing one report.json."""
