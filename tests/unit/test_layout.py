#!/usr/bin/env python3
"""The folder rules of lib/README.md, checked on the source tree.

    test_layout.py SOURCE_ROOT

- an #include "folder/x.h" from a file in lib/A is allowed only when lib/README.md's
  table lets A include that folder; a bare #include "x.h" names a header of the
  same folder (or tcgpu.h, or a header generated into that folder);
- the tools include only the libraries they link (gpuckpt: common, ctl, image,
  json; tcgpud: common, ctl, policy, json; tcgpu-replay (tools/replay): common,
  policy, json; the CRIU plugin: common, ctl, image and gpuckpt's driver client;
  tcgpu-slurm and its defer library: common);
- a library's meson.build depends only on the libraries it may include;
- no meson.build compiles a source file of another folder;
- nothing in lib/ or interpose/ reads the environment (getenv, secure_getenv,
  environ) but lib/core/settings.c, where libtcgpu.so's settings are parsed
  (design decision 19: libraries take options, programs read the environment).
"""
import os
import re
import sys

# Keep in step with lib/README.md (the table there is the documentation).
MAY_INCLUDE = {
    'common': set(),
    'policy': {'common'},
    'driver': {'common'},
    'image': {'common'},
    'ctl': {'common'},
    'engine': {'common', 'driver', 'image'},
    'core': {'common', 'driver', 'image', 'ctl', 'engine'},
    'json': {'common', 'ctl'},
}
TOOLS = {
    'tools/gpuckpt': {'common', 'ctl', 'image', 'json', 'gpuckpt'},
    'tools/tcgpud': {'common', 'ctl', 'policy', 'json', 'tcgpud'},
    'tools/replay': {'common', 'policy', 'json'},
    # the CRIU plugin drives the checkpoint API through gpuckpt's driver client
    'plugins/criu': {'common', 'ctl', 'image', 'gpuckpt'},
    'slurm': {'common'},
}
# The one file of lib/ and interpose/ that reads the environment.
SETTINGS = 'lib/core/settings.c'
ENV_READ = re.compile(r'\b(?:secure_getenv|getenv|__environ|environ)\b')
COMMENT_OR_STRING = re.compile(r'/\*.*?\*/|//[^\n]*|"(?:[^"\\\n]|\\.)*"|\'(?:[^\'\\\n]|\\.)*\'',
                               re.S)
GENERATED = {'driver': {'driver_table.h'}}
# Headers of other trees a folder is built against (include_directories in its meson.build).
EXTERNAL = {'engine': {'simcuda_kernel.h'}}     # the simcuda twin of the scan kernel
PUBLIC = {'tcgpu.h'}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
DEP = re.compile(r'\btcgpu_(\w+?)_dep\b')


def sources(top):
    for d, _, names in os.walk(top):
        for n in sorted(names):
            if n.endswith(('.c', '.h', '.cu')):
                yield os.path.join(d, n)


def check_lib(root, bad):
    lib = os.path.join(root, 'lib')
    folders = sorted(f for f in os.listdir(lib) if os.path.isdir(os.path.join(lib, f)))
    for f in folders:
        if f not in MAY_INCLUDE:
            bad.append('lib/%s is not in lib/README.md\'s table (test_layout.py MAY_INCLUDE)' % f)
    for f in folders:
        top = os.path.join(lib, f)
        for path in sources(top):
            rel = os.path.relpath(path, root)
            here = os.path.dirname(path)
            for inc in INCLUDE.findall(open(path, errors='replace').read()):
                if '/' not in inc:
                    if (inc in PUBLIC or inc in GENERATED.get(f, ()) or inc in EXTERNAL.get(f, ()) or
                            os.path.exists(os.path.join(here, inc))):
                        continue
                    bad.append('%s: #include "%s" is neither in its folder nor qualified' % (rel, inc))
                    continue
                first = inc.split('/')[0]
                if first != f and os.path.exists(os.path.join(here, inc)):
                    continue          # a subfolder of its own folder ("kernels/devhash.h")
                if first == f:
                    if inc.startswith(f + '/') and os.path.exists(os.path.join(lib, inc)):
                        bad.append('%s: #include "%s": a header of the same folder is included bare'
                                   % (rel, inc))
                    continue
                if first not in MAY_INCLUDE.get(f, set()):
                    bad.append('%s: #include "%s": lib/%s may not include lib/%s (lib/README.md)'
                               % (rel, inc, f, first))
        mb = os.path.join(top, 'meson.build')
        if not os.path.exists(mb):
            bad.append('lib/%s has no meson.build' % f)
            continue
        for dep in set(DEP.findall(open(mb).read())):
            lib_of = {'control': 'core'}.get(dep, dep)
            if lib_of != f and lib_of in MAY_INCLUDE and lib_of not in MAY_INCLUDE[f]:
                bad.append('lib/%s/meson.build depends on tcgpu_%s_dep, which it may not use'
                           % (f, dep))


def check_tools(root, bad):
    for top, allowed in TOOLS.items():
        path = os.path.join(root, top)
        files = [path] if path.endswith('.c') else list(sources(path))
        for p in files:
            for inc in INCLUDE.findall(open(p, errors='replace').read()):
                first = inc.split('/')[0] if '/' in inc else None
                if first and first not in allowed:
                    bad.append('%s: #include "%s": this tool does not link lib/%s'
                               % (os.path.relpath(p, root), inc, first))


def check_meson(root, bad):
    for d, dirs, names in os.walk(root):
        dirs[:] = [x for x in dirs if not x.startswith(('.', 'build'))]
        if 'meson.build' not in names:
            continue
        text = open(os.path.join(d, 'meson.build')).read()
        for m in re.finditer(r"'((?:\.\./)+[^']*\.(?:c|cu))'", text):
            bad.append('%s: compiles %s, a file of another folder'
                       % (os.path.relpath(os.path.join(d, 'meson.build'), root), m.group(1)))


def check_environment(root, bad):
    for top in ('lib', 'interpose'):
        for path in sources(os.path.join(root, top)):
            rel = os.path.relpath(path, root)
            if rel == SETTINGS:
                continue
            code = COMMENT_OR_STRING.sub('""', open(path, errors='replace').read())
            for m in ENV_READ.finditer(code):
                bad.append('%s: reads the environment (%s): take an option, and let %s read it '
                           '(lib/README.md)' % (rel, m.group(0), SETTINGS))


def check_preload(root, bad):
    """libtcgpu.so takes lib/'s archives whole (libtcgpu_all): never json's,
    which would bring jansson into every program it is preloaded into."""
    text = open(os.path.join(root, 'lib', 'core', 'meson.build')).read()
    m = re.search(r'libtcgpu_all\s*=\s*\[([^\]]*)\]', text)
    if not m:
        bad.append('lib/core/meson.build: no libtcgpu_all list')
    elif 'json' in m.group(1):
        bad.append('lib/core/meson.build: libtcgpu_all takes lib/json (jansson) into libtcgpu.so')


def main(argv):
    root = argv[1]
    bad = []
    check_lib(root, bad)
    check_environment(root, bad)
    check_preload(root, bad)
    check_tools(root, bad)
    check_meson(root, bad)
    for b in bad:
        print('FAIL: ' + b)
    print('%d problems' % len(bad))
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
