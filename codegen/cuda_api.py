#!/usr/bin/env python3
"""The CUDA driver API as the toolkit's headers describe it.

cudaTypedefs.h declares one typedef per driver entry point and version:

    typedef CUresult (CUDAAPI *PFN_cuMemAlloc_v3020)(CUdeviceptr_v2 *dptr, size_t bytesize);
    typedef CUresult (CUDAAPI *PFN_cuMemcpyAsync_v7000_ptsz)(...);

cuda.h maps each API name to its exported (ABI) symbol for the newest version
(``#define cuMemAlloc cuMemAlloc_v2``, ``__CUDA_API_PTSZ(cuMemcpyAsync)``) and,
under __CUDA_API_VERSION_INTERNAL, declares the older exported symbols too.

From these two files we derive, for every (symbol, version, stream flavour),
the exported function that cuGetProcAddress must return and its prototype.
This is the single source from which simcuda's cuGetProcAddress table and the
interposer's wrappers are generated (nothing is kept by hand).

Version rule (checked against cuda.h's declarations): the distinct versions of
a symbol, oldest first, are exported as ``sym``, ``sym_v2``, ``sym_v3`` ...;
the newest is whatever cuda.h's #define names (usually ``sym_vN``, sometimes
another function, e.g. cuGraphInstantiate -> cuGraphInstantiateWithFlags).
Per-thread-default-stream flavours append ``_ptds`` (synchronous copies and
the like) or ``_ptsz`` (calls that take a stream).

Not every driver entry point is in cuda.h: the profiler's three
(cuProfilerInitialize/Start/Stop) are in cudaProfiler.h with their typedefs
in cudaProfilerTypedefs.h, and libcuda exports them like the rest (the
toolkit's stub libcuda.so lists exactly cuda.h's and these). load() reads
every such pair it finds next to cuda.h (COMPANIONS), so nothing the driver
exports bypasses what is generated from here. The graphics interop headers
(cudaGL.h, cudaEGL.h, cudaVDPAU.h) need the window system's headers to
compile and the stub does not export them: they are not read.

Usable as a module (``load(cuda_h, typedefs_h)``) or a command:
    cuda_api.py --version cuda.h             print CUDA_VERSION
    cuda_api.py --list cuda.h cudaTypedefs.h print the table, one entry a line
"""

import os
import re
import sys
from dataclasses import dataclass, field

TYPEDEF_RE = re.compile(
    r'typedef\s+CUresult\s*\(\s*CUDAAPI\s*\*\s*PFN_(\w+?)_v(\d+)(_ptds|_ptsz)?\s*\)\s*\((.*?)\)\s*;',
    re.S)
DEFINE_RE = re.compile(
    r'^\s*#define\s+(cu\w+)\s+(?:__CUDA_API_(PTDS|PTSZ)\((cu\w+)\)|(cu\w+))\s*$', re.M)
DECL_RE = re.compile(r'CUresult\s+CUDAAPI\s+(cu\w+)\s*\(')
VERSION_RE = re.compile(r'^#define\s+CUDA_VERSION\s+(\d+)', re.M)

# (declarations, typedefs) read besides cuda.h + cudaTypedefs.h, from the same folder.
COMPANIONS = [('cudaProfiler.h', 'cudaProfilerTypedefs.h')]


def companions(cuda_h):
    """The companion headers present next to cuda_h: [(decl_path, typedefs_path)]."""
    d = os.path.dirname(os.path.abspath(cuda_h))
    return [(os.path.join(d, a), os.path.join(d, b)) for a, b in COMPANIONS
            if os.path.isfile(os.path.join(d, a)) and os.path.isfile(os.path.join(d, b))]


def header_names(cuda_h):
    """The #include names of the declaration headers read besides cuda.h."""
    return [os.path.basename(a) for a, _ in companions(cuda_h)]


@dataclass
class Entry:
    symbol: str          # API name as passed to cuGetProcAddress ("cuMemAlloc")
    version: int         # first CUDA version with this prototype (3020)
    flavour: str         # "", "ptds" or "ptsz"
    abi: str             # exported symbol ("cuMemAlloc_v2", "cuMemcpyAsync_ptsz")
    pfn: str             # typedef in cudaTypedefs.h ("PFN_cuMemAlloc_v3020")
    params: str          # parameter list, as declared ("CUdeviceptr_v2 *dptr, size_t bytesize")
    names: list = field(default_factory=list)   # parameter names, in order


def _param_names(params):
    params = ' '.join(params.split())
    if params in ('', 'void'):
        return []
    names = []
    for p in params.split(','):
        p = p.strip()
        m = re.search(r'(\w+)\s*(\[\s*\w*\s*\])?$', p)
        if not m:
            raise ValueError('cannot parse parameter %r' % p)
        names.append(m.group(1))
    return names


def cuda_version(cuda_h_text):
    m = VERSION_RE.search(cuda_h_text)
    if not m:
        raise ValueError('CUDA_VERSION not found in cuda.h')
    return int(m.group(1))


def load(cuda_h, typedefs_h):
    """Return (entries, cuda_version). Raises ValueError on anything inconsistent."""
    with open(cuda_h) as f:
        cuda_text = f.read()
    with open(typedefs_h) as f:
        td_text = f.read()
    version_text = cuda_text
    for decl, tds in companions(cuda_h):
        with open(decl) as f:
            cuda_text += '\n' + f.read()
        with open(tds) as f:
            td_text += '\n' + f.read()

    # Newest ABI name of each API symbol, per cuda.h.
    newest = {}
    flavour_of = {}
    for m in DEFINE_RE.finditer(cuda_text):
        sym, macro, inner, plain = m.groups()
        if sym.startswith('cu') and (inner or plain) and sym not in newest:
            newest[sym] = inner or plain
            flavour_of[sym] = (macro or '').lower()
    # Exported names: every declaration, seen through cuda.h's own #defines
    # (the internal block declares the older names under their real spelling).
    declared = set()
    for name in DECL_RE.findall(cuda_text):
        declared.add(name)
        declared.add(newest.get(name, name))
        if flavour_of.get(name):
            declared.add(newest[name] + '_' + flavour_of[name])

    versions = {}   # symbol -> {version: {flavour: (pfn, params)}}
    for m in TYPEDEF_RE.finditer(td_text):
        sym, ver, fl, params = m.group(1), int(m.group(2)), (m.group(3) or '')[1:], m.group(4)
        pfn = 'PFN_%s_v%d%s' % (sym, ver, '_' + fl if fl else '')
        versions.setdefault(sym, {}).setdefault(ver, {})[fl] = (pfn, ' '.join(params.split()))

    entries = []
    for sym in sorted(versions):
        legacy = sorted(v for v in versions[sym] if '' in versions[sym][v])
        target = newest.get(sym, sym)
        if not re.fullmatch(re.escape(sym) + r'(_v\d+)?', target):
            target = None      # cuda.h maps the name to another function
        base_of = {}
        for i, ver in enumerate(legacy):
            numbered = sym if i == 0 else '%s_v%d' % (sym, i + 1)
            # cuda.h names the newest version with a #define, except where an
            # API grew a second version without one (CUDA 13's cuCtxGetDevice_v2,
            # cuCtxSynchronize_v2, cuStreamGetCtx_v2): there the numbered name
            # is declared and the plain name keeps the old prototype.
            if i == len(legacy) - 1 and target and not (
                    target == sym and i > 0 and numbered in declared):
                base_of[ver] = target
            else:
                base_of[ver] = numbered
        for ver in sorted(versions[sym]):
            for fl, (pfn, params) in sorted(versions[sym][ver].items()):
                # A per-thread flavour is named after the legacy version it shadows.
                older = [v for v in legacy if v <= ver]
                base = base_of[older[-1]] if older else sym
                abi = base + ('_' + fl if fl else '')
                if abi not in declared:
                    raise ValueError('%s v%d%s: derived ABI name %s is not declared in cuda.h'
                                     % (sym, ver, ' ' + fl if fl else '', abi))
                entries.append(Entry(sym, ver, fl, abi, pfn, params, _param_names(params)))
    return entries, cuda_version(version_text)


def resolve(entries, symbol, version, flags):
    """What cuGetProcAddress(symbol, version, flags) returns: (entry or None, status).

    status is 'found', 'version' (symbol exists, but only in newer versions) or
    'missing'. Flag 2 (CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) prefers a
    _ptds/_ptsz flavour; flags 0 and 1 pick the legacy one.
    """
    cands = [e for e in entries if e.symbol == symbol]
    if not cands:
        return None, 'missing'
    ok = [e for e in cands if e.version <= version]
    legacy = [e for e in ok if e.flavour == '']
    if not legacy:
        return None, 'version'
    best = max(legacy, key=lambda e: e.version)
    if flags & 2:
        ptds = [e for e in ok if e.flavour and e.version >= best.version]
        if ptds:
            return max(ptds, key=lambda e: e.version), 'found'
    return best, 'found'


def abi_entries(entries):
    """One entry per exported ABI name, sorted by name (strcmp order).

    Where several (symbol, version) pairs share an ABI name, they share its
    prototype too; the first is kept.
    """
    seen = {}
    for e in entries:
        seen.setdefault(e.abi, e)
    return [seen[a] for a in sorted(seen)]


def internal_types(cuda_h):
    """Type names cuda.h declares only under __CUDA_API_VERSION_INTERNAL (the
    pre-3.2 32-bit ABI: CUdeviceptr_v1, CUDA_MEMCPY2D_v1, ...)."""
    with open(cuda_h) as f:
        lines = f.read().split('\n')
    names, depth, inside = set(), 0, None
    for line in lines:
        t = line.strip()
        if t.startswith('#if'):
            depth += 1
            if inside is None and t == '#if defined(__CUDA_API_VERSION_INTERNAL)':
                inside = depth
        elif t.startswith('#endif'):
            if inside == depth:
                inside = None
            depth -= 1
        elif inside is not None:
            m = re.match(r'(?:typedef\s+[^;]*?\b|\}\s*)(\w+)\s*;', t)
            if m:
                names.add(m.group(1))
    return names


def needs_internal(e, internal):
    """Whether e's prototype uses a type from internal_types()."""
    return any(w in internal for w in re.findall(r'\w+', e.params))


def main(argv):
    if len(argv) == 3 and argv[1] == '--version':
        with open(argv[2]) as f:
            print(cuda_version(f.read()))
        return 0
    if len(argv) == 4 and argv[1] == '--list':
        entries, _ = load(argv[2], argv[3])
        for e in entries:
            print(e.symbol, e.version, e.flavour or '-', e.abi, e.pfn)
        return 0
    sys.stderr.write(__doc__)
    return 2


if __name__ == '__main__':
    sys.exit(main(sys.argv))
