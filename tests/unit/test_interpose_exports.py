#!/usr/bin/env python3
"""libtcgpu.so exports exactly: the driver's ABI names, dlsym and the NCCL
functions of interpose/nccl.list (track_nccl.c), unversioned;
the C API of include/tcgpu.h, each name in a TCGPU_<release> node of
interpose/libtcgpu.map; nothing else. And its cu* names are exactly those of
the toolkit's stub libcuda.so (STUB_LIBCUDA, when the toolkit has one): a
driver entry point we do not wrap (the profiler's, once) would be handed out
unwrapped by cuGetProcAddress and bypass the API gate.

    test_interpose_exports.py LIBTCGPU CUDA_API_PY CUDA_H TYPEDEFS_H TCGPU_H LIBTCGPU_MAP NCCL_LIST [STUB_LIBCUDA]
"""
import importlib.util
import re
import subprocess
import sys


def api_names(tcgpu_h):
    """Every function tcgpu.h declares with TCGPU_API."""
    text = open(tcgpu_h).read()
    return set(re.findall(r'^TCGPU_API\b[^;(]*?\b(tcgpu_\w+)\s*\(', text, re.M))


def map_nodes(path):
    """{name: node} of the version script (comments stripped)."""
    text = re.sub(r'/\*.*?\*/', '', open(path).read(), flags=re.S)
    nodes = {}
    for node, body in re.findall(r'([\w.]+)\s*\{(.*?)\}\s*(?:\w+\s*)?;', text, re.S):
        body = body.split('local:')[0].replace('global:', '')
        for name in re.findall(r'([\w*]+)\s*;', body):
            nodes[name] = node
    return nodes


def defined_cu_names(lib):
    """The cu* symbols a shared library defines."""
    out = subprocess.run(['nm', '-D', '--defined-only', lib], stdout=subprocess.PIPE,
                         check=True, universal_newlines=True).stdout
    return {l.split()[2].partition('@')[0] for l in out.splitlines()
            if len(l.split()) >= 3 and l.split()[2].startswith('cu')}


def main(argv):
    lib, api_py, cuda_h, typedefs_h, tcgpu_h, map_path, nccl_list = argv[1:8]
    stub = argv[8] if len(argv) > 8 and argv[8] else None
    spec = importlib.util.spec_from_file_location('cuda_api', api_py)
    api = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(api)
    entries, _ = api.load(cuda_h, typedefs_h)
    nccl = {l.strip() for l in open(nccl_list) if l.strip() and not l.startswith('#')}
    driver = {e.abi for e in entries} | {'dlsym'} | nccl
    public = api_names(tcgpu_h)
    nodes = map_nodes(map_path)

    out = subprocess.run(['nm', '-D', '--defined-only', lib], stdout=subprocess.PIPE,
                         check=True, universal_newlines=True).stdout
    have = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) < 3 or parts[1] == 'A':      # version definitions
            continue
        base, _, ver = parts[2].partition('@')
        have[base] = ver.lstrip('@')
    bad = []
    for n in sorted(public - set(nodes)):
        bad.append('%s is declared in tcgpu.h but in no node of libtcgpu.map' % n)
    for n in sorted(set(nodes) - public):
        bad.append('libtcgpu.map lists %s, which tcgpu.h does not declare with TCGPU_API' % n)
    for n in sorted((driver | public) - set(have)):
        bad.append('%s is not exported' % n)
    for n in sorted(set(have) - driver - public):
        bad.append('%s is exported, but is neither a driver entry point, dlsym, an NCCL name of nccl.list, nor tcgpu.h API' % n)
    for n in sorted(set(have) & driver):
        if have[n]:
            bad.append('%s has version %r: a versioned definition would not catch the '
                       "program's references" % (n, have[n]))
    for n in sorted(set(have) & public):
        if n in nodes and have[n] != nodes[n]:
            bad.append('%s is exported as version %r, libtcgpu.map says %r' % (n, have[n], nodes[n]))
        if not re.match(r'TCGPU_\d+\.\d+$', nodes.get(n, 'TCGPU_')):
            bad.append('%s is in node %r, not TCGPU_<major>.<minor>' % (n, nodes.get(n)))
    if stub:
        ours, theirs = defined_cu_names(lib), defined_cu_names(stub)
        for n in sorted(theirs - ours):
            bad.append('%s is exported by the driver (%s) but not wrapped by libtcgpu.so: it '
                       'would bypass the gate' % (n, stub))
        for n in sorted(ours - theirs):
            bad.append('%s is exported by libtcgpu.so but not by the driver (%s)' % (n, stub))
        print('%d cu* names in the stub driver, %d in libtcgpu.so' % (len(theirs), len(ours)))
    else:
        print('no stub libcuda.so in the toolkit: the comparison with it is skipped')
    for b in bad:
        print('FAIL: ' + b)
    print('%d driver entry points + dlsym, %d API names, %d exported symbols, %d problems'
          % (len(driver), len(public), len(have), len(bad)))
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
