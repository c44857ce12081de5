#!/usr/bin/env python3
"""zipnn_bench.py FILE DTYPE [REPS]: ZipNN (PyPI 'zipnn') on FILE, one thread,
4 MiB chunks like tcgpu's codec: prints
   zipnn RATIO COMPRESS_MBPS DECOMPRESS_MBPS OK|BROKEN
speeds in MB per CPU-second of this process (time.process_time: ZipNN's C
threads included), medians of REPS runs. DTYPE: bf16, fp16, fp32 or u8.

ZipNN 0.5.4's compress() rewrites its input buffer in place (even a bytes
object): every rep compresses fresh copies of the chunks, made outside the
timing, and the round trip is checked against the file's bytes (BROKEN: it
did not give them back)."""
import statistics
import sys
import time

import zipnn

path, dtype = sys.argv[1], sys.argv[2]
reps = int(sys.argv[3]) if len(sys.argv) > 3 else 3
names = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32", "u8": "uint8"}
with open(path, "rb") as f:
    data = f.read()
CHUNK = 4 << 20
z = zipnn.ZipNN(bytearray_dtype=names.get(dtype, "uint8"), threads=1, input_format="byte")
offsets = range(0, len(data), CHUNK)
ct, dt = [], []
ok = True
for _ in range(reps):
    fresh = [bytes(bytearray(data[i:i + CHUNK])) for i in offsets]   # not timed
    t = time.process_time()
    comp = [z.compress(c) for c in fresh]
    ct.append(time.process_time() - t)
    comp_copy = [bytes(bytearray(c)) for c in comp]                   # decompress may scribble too
    t = time.process_time()
    back = [z.decompress(c) for c in comp_copy]
    dt.append(time.process_time() - t)
    if b"".join(bytes(b) for b in back) != data:
        ok = False
stored = sum(len(c) for c in comp)
mb = len(data) / 1e6
print("zipnn %.4f %.0f %.0f %s" % (stored / len(data), mb / statistics.median(ct),
                                  mb / statistics.median(dt), "OK" if ok else "BROKEN"))
