#!/usr/bin/env python3
"""zipnn_bench.py FILE DTYPE [REPS]: ZipNN (PyPI 'zipnn') on FILE, one thread,
4 MiB chunks like tcgpu's codec: prints
   zipnn RATIO COMPRESS_MBPS DECOMPRESS_MBPS OK|BROKEN
(medians of REPS runs; BROKEN: zipnn's round trip did not give the input
back, as happens with zipnn 0.5.4 on some bf16/fp32 data). DTYPE: bf16,
fp16, fp32 or u8."""
import statistics
import sys
import time

import zipnn

path, dtype = sys.argv[1], sys.argv[2]
reps = int(sys.argv[3]) if len(sys.argv) > 3 else 3
names = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32", "u8": "uint8"}
data = open(path, "rb").read()
CHUNK = 4 << 20
z = zipnn.ZipNN(bytearray_dtype=names.get(dtype, "uint8"), threads=1, input_format="byte")
chunks = [data[i:i + CHUNK] for i in range(0, len(data), CHUNK)]
ct, dt = [], []
ok = True
for _ in range(reps):
    t = time.perf_counter()
    comp = [z.compress(c) for c in chunks]
    ct.append(time.perf_counter() - t)
    t = time.perf_counter()
    back = [z.decompress(c) for c in comp]
    dt.append(time.perf_counter() - t)
    if b"".join(bytes(b) for b in back) != data:
        ok = False
stored = sum(len(c) for c in comp)
mb = len(data) / 1e6
print("zipnn %.4f %.0f %.0f %s" % (stored / len(data), mb / statistics.median(ct),
                                  mb / statistics.median(dt), "OK" if ok else "BROKEN"))
