#!/usr/bin/env python3
"""Compare lib/driver/driver.c's cuGetProcAddress rule with codegen/cuda_api.py's.

    test_procaddr_resolve.py EXE CUDA_API_PY CUDA_H TYPEDEFS_H REQUESTS
"""
import importlib.util
import subprocess
import sys


def main(argv):
    exe, api_py, cuda_h, typedefs_h, requests = argv[1:6]
    spec = importlib.util.spec_from_file_location('cuda_api', api_py)
    api = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(api)
    entries, _ = api.load(cuda_h, typedefs_h)

    queries = set()
    for e in entries:
        for v in (e.version - 10, e.version, e.version + 10, 12000, 13000, 99999, 0):
            for f in (0, 1, 2, 3):
                queries.add((e.symbol, v, f))
    for s in ('cuNoSuchFunction', 'cu', 'cuMemAllocX', '""'):
        queries.add((s, 13000, 0))
    with open(requests) as f:
        for line in f:
            if not line.startswith('cuGetProcAddress_v2 '):
                continue
            rest = line[len('cuGetProcAddress_v2 '):]
            sym, _, tail = rest.partition('ver=')
            sym = sym.strip() or '""'
            ver, _, fl = tail.partition(' flags=')
            queries.add((sym, int(ver), int(fl)))
    queries = sorted(queries)

    text = ''.join('%s %d %d\n' % q for q in queries)
    out = subprocess.run([exe], input=text, stdout=subprocess.PIPE, check=True,
                         universal_newlines=True).stdout.split('\n')
    bad = 0
    for q, got in zip(queries, out):
        e, status = api.resolve(entries, '' if q[0] == '""' else q[0], q[1], q[2])
        want = e.abi if e else '-' + status
        if got != want:
            print('FAIL %s %d %d: C says %s, cuda_api.py says %s' % (q + (got, want)))
            bad += 1
    print('%d queries, %d mismatches' % (len(queries), bad))
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
