#!/usr/bin/env python3
"""Replay libcudart's start-up requests with and without libtcgpu.so.

    test_procaddr_replay.py REPLAY_EXE LIBTCGPU SIMCUDA REQUESTS

Without the interposer simcuda answers each cuGetProcAddress_v2 request;
with it, every found symbol must come back as libtcgpu.so's wrapper of the
same ABI name, and every not-found answer (code and status) must be the same.
"""
import os
import subprocess
import sys


def run(exe, requests, env):
    out = subprocess.run([exe, requests], env=env, stdout=subprocess.PIPE, check=True,
                         universal_newlines=True).stdout
    rows = []
    for line in out.splitlines():
        req, ans = line.split(' -> ')
        rows.append((req, ans.split()))
    return rows


def main(argv):
    exe, libtcgpu, simcuda, requests = (os.path.abspath(a) for a in argv[1:5])
    env = dict(os.environ)
    env['LD_LIBRARY_PATH'] = os.path.dirname(simcuda) + (
        ':' + env['LD_LIBRARY_PATH'] if env.get('LD_LIBRARY_PATH') else '')
    env.pop('LD_PRELOAD', None)
    plain = run(exe, requests, env)
    env['LD_PRELOAD'] = libtcgpu + (' ' + os.environ['LD_PRELOAD'] if os.environ.get('LD_PRELOAD') else '')
    env['TCGPU_REAL_LIBCUDA'] = simcuda
    ours = run(exe, requests, env)
    if len(plain) != len(ours) or not plain:
        print('FAIL: %d requests without the interposer, %d with it' % (len(plain), len(ours)))
        return 1
    bad = found = 0
    for (req, a), (req2, b) in zip(plain, ours):
        assert req == req2
        rc, st, abi, lib = a
        rc2, st2, abi2, lib2 = b
        if rc != rc2 or st != st2:
            print('FAIL %s: simcuda says rc %s status %s, through libtcgpu rc %s status %s'
                  % (req, rc, st, rc2, st2))
            bad += 1
        elif abi != '-':
            found += 1
            if abi2 != abi or not lib2.startswith('libtcgpu.so'):
                print('FAIL %s: simcuda returns %s (%s), libtcgpu returns %s (%s)'
                      % (req, abi, lib, abi2, lib2))
                bad += 1
        elif abi2 != '-':
            print('FAIL %s: simcuda returns nothing, libtcgpu returns %s' % (req, abi2))
            bad += 1
    print('%d requests, %d found (each libtcgpu.so\'s wrapper of the same ABI name), '
          '%d not found (same answer), %d mismatches' % (len(plain), found, len(plain) - found, bad))
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
