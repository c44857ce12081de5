#!/usr/bin/env python3
"""Expected cuGetProcAddress answers, from codegen/cuda_api.py's resolve().

usage: gen_expected.py CUDA_API_PY CUDA_H CUDA_TYPEDEFS_H REQUESTS OUT

REQUESTS is a recording of the runtime's calls ("cuGetProcAddress_v2 SYMBOL
ver=V flags=F"). OUT gets one line per request, then one per table entry
(every ABI name at its own version and flavour):
    SYMBOL VERSION FLAGS found ABI | SYMBOL VERSION FLAGS version - | ... missing -
An empty symbol is written as "-".
"""
import importlib.util
import sys


def main(argv):
    if len(argv) != 6:
        sys.stderr.write(__doc__)
        return 2
    spec = importlib.util.spec_from_file_location('cuda_api', argv[1])
    api = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(api)
    entries, _ = api.load(argv[2], argv[3])
    requests = []
    with open(argv[4]) as f:
        for line in f:
            if not line.strip() or line.startswith('#'):
                continue
            parts = line.split()
            if parts[0] not in ('cuGetProcAddress', 'cuGetProcAddress_v2'):
                continue    # the recording also has the runtime's other calls
            kv = dict(p.split('=', 1) for p in parts if '=' in p)
            names = [p for p in parts[1:] if '=' not in p]
            requests.append((names[0] if names else '', int(kv['ver']), int(kv['flags'])))
    for e in entries:
        requests.append((e.symbol, e.version, 2 if e.flavour else 0))
    with open(argv[5], 'w') as out:
        for sym, ver, flags in requests:
            hit, status = api.resolve(entries, sym, ver, flags)
            out.write('%s %d %d %s %s\n' % (sym or '-', ver, flags, status, hit.abi if hit else '-'))
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
