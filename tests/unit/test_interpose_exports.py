#!/usr/bin/env python3
"""libtcgpu.so exports exactly the driver's ABI names, dlsym and tcgpu_*, unversioned.

    test_interpose_exports.py LIBTCGPU CUDA_API_PY CUDA_H TYPEDEFS_H
"""
import importlib.util
import subprocess
import sys


def main(argv):
    lib, api_py, cuda_h, typedefs_h = argv[1:5]
    spec = importlib.util.spec_from_file_location('cuda_api', api_py)
    api = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(api)
    entries, _ = api.load(cuda_h, typedefs_h)
    want = {e.abi for e in entries} | {'dlsym'}

    out = subprocess.run(['nm', '-D', '--defined-only', lib], stdout=subprocess.PIPE,
                         check=True, universal_newlines=True).stdout
    have = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) < 3:
            continue
        name = parts[2]
        base, _, ver = name.partition('@')
        have[base] = ver.lstrip('@')
    bad = 0
    for n in sorted(want - set(have)):
        print('FAIL: %s is not exported' % n)
        bad += 1
    for n in sorted(set(have) - want):
        if n.startswith('tcgpu_'):
            continue
        print('FAIL: %s is exported, but is neither a driver entry point nor tcgpu_*' % n)
        bad += 1
    for n in sorted(set(have)):
        if have[n]:
            print('FAIL: %s has version %r: a versioned definition would not catch the '
                  'program\'s references' % (n, have[n]))
            bad += 1
    print('%d driver entry points + dlsym expected, %d exported symbols, %d problems'
          % (len(want), len(have), bad))
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
