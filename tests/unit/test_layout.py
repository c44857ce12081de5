#!/usr/bin/env python3
"""The folder rules of lib/README.md, checked on the source tree.

    test_layout.py SOURCE_ROOT

- lib/README.md's table is the rule: its rows name every folder of lib/, and
  its last column says which folders each may include;
- an #include "folder/x.h" from a file in lib/A is allowed only when that table
  lets A include that folder; a bare #include "x.h" names a header of the
  same folder (or tcgpu.h, or a header generated into that folder);
- the tools include only the libraries they link (TOOLS below, lib/README.md's
  "Who links what");
- a library's meson.build depends only on the libraries it may include;
- no meson.build compiles a source file of another folder;
- /proc is read in lib/common/proc.c only (PROC_READERS: the exceptions and why);
- docs/architecture.md's folder table names every folder of the tree (lib/'s,
  tools/'s and plugins/' one by one) and no folder that is gone, and its table
  of lib/core names every file there and no file that is gone.
- nothing in lib/ or interpose/ reads the environment (getenv, secure_getenv,
  environ) but lib/core/settings.c, where libtcgpu.so's settings are parsed
  (design decision 19: libraries take options, programs read the environment).
"""
import os
import re
import sys

# Filled from lib/README.md's table by read_rules(): folder -> the folders it may include.
MAY_INCLUDE = {}
TOOLS = {
    'tools/gpuckpt': {'common', 'ctl', 'image', 'json', 'ckptapi', 'gpuckpt'},
    'tools/tcgpud': {'common', 'ctl', 'policy', 'json', 'ckptapi', 'tcgpud'},
    'tools/replay': {'common', 'policy', 'json'},
    'plugins/criu': {'common', 'ctl', 'image', 'ckptapi'},
    'slurm': {'common'},
}
# The files of the products (not simcuda/, a product of its own, nor tests/)
# that may name a /proc path; every other goes through lib/common/proc.h.
PROC_READERS = {
    'lib/common/proc.c': 'the home of process facts and tree walks',
    'lib/common/pathtrust.c': 'recognises /proc/self/fd/N/ paths; reads nothing',
    'lib/core/hostkeep.c': '/proc/meminfo, the machine\'s memory, not a process\'s',
    'tools/gpuckpt/criu_rlimits.c': 'a shim preloaded into CRIU that links nothing of ours',
}
PRODUCTS = ('lib', 'interpose', 'tools', 'plugins', 'slurm')
PROC_PATH = re.compile(r'"/proc[/"]')
COMMENT = re.compile(r'/\*.*?\*/|//[^\n]*', re.S)
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
TABLE_ROW = re.compile(r'^\|(.*)\|\s*$', re.M)
FOLDER = re.compile(r'`([\w./{},-]+)`')


def table_rows(text, heading=None):
    """The cells of a markdown table's body rows: the first table of text, or
    the first one after the line `heading`."""
    if heading is not None:
        at = text.find('\n' + heading + '\n')
        if at < 0:
            return None
        text = text[at + len(heading) + 2:]
    rows, started = [], False
    for line in text.split('\n'):
        m = TABLE_ROW.match(line)
        if not m:
            if started:
                break
            continue
        started = True
        cells = [c.strip() for c in m.group(1).split('|')]
        if not all(set(c) <= set('-: ') for c in cells):
            rows.append(cells)
    return rows[1:]          # the header row is not a rule


def read_rules(root, bad):
    """lib/README.md's table: `folder/` in the first column, the folders it
    may include in the last (backquoted, `include/tcgpu.h` aside)."""
    for cells in table_rows(open(os.path.join(root, 'lib', 'README.md')).read()):
        names = FOLDER.findall(cells[0])
        if len(names) != 1 or not names[0].endswith('/'):
            bad.append('lib/README.md: a table row does not start with one `folder/`: %s' % cells[0])
            continue
        MAY_INCLUDE[names[0].rstrip('/')] = {n.rstrip('/') for n in FOLDER.findall(cells[-1])
                                             if n.endswith('/')}
    for f, allowed in MAY_INCLUDE.items():
        for other in sorted(allowed - set(MAY_INCLUDE)):
            bad.append('lib/README.md: %s/ may include %s/, which the table does not name' % (f, other))


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
            bad.append('lib/%s is not in lib/README.md\'s table' % f)
    for f in sorted(set(MAY_INCLUDE) - set(folders)):
        bad.append('lib/README.md names %s/, which lib/ does not have' % f)
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
            if lib_of != f and lib_of in MAY_INCLUDE and lib_of not in MAY_INCLUDE.get(f, set()):
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


def check_proc(root, bad):
    for top in PRODUCTS:
        for path in sources(os.path.join(root, top)):
            rel = os.path.relpath(path, root)
            code = COMMENT.sub('', open(path, errors='replace').read())
            if rel not in PROC_READERS and PROC_PATH.search(code):
                bad.append('%s reads /proc itself: use lib/common/proc.h (test_layout.py '
                           'PROC_READERS)' % rel)


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
    which would bring jansson into every program it is preloaded into, nor
    ckptapi's, a second door to the driver beside lib/driver."""
    text = open(os.path.join(root, 'lib', 'core', 'meson.build')).read()
    m = re.search(r'libtcgpu_all\s*=\s*\[([^\]]*)\]', text)
    if not m:
        bad.append('lib/core/meson.build: no libtcgpu_all list')
        return
    for name, why in (('json', 'jansson'), ('ckptapi', 'the driver from outside a process')):
        if name in m.group(1):
            bad.append('lib/core/meson.build: libtcgpu_all takes lib/%s (%s) into libtcgpu.so'
                       % (name, why))


def expand(name):
    """`registry.{h,c}` -> registry.h, registry.c; `tools/gpuckpt/` -> itself."""
    m = re.match(r'(.*)\{([^}]*)\}(.*)$', name)
    if not m:
        return [name]
    return [m.group(1) + alt + m.group(3) for alt in m.group(2).split(',')]


def folders_of(root, top):
    return sorted(top + '/' + d + '/' for d in os.listdir(os.path.join(root, top))
                  if os.path.isdir(os.path.join(root, top, d)) and not d.startswith('.'))


def check_architecture(root, bad):
    """docs/architecture.md's two tables against the tree: no folder or file
    missing from them, none named that is gone."""
    doc = 'docs/architecture.md'
    text = open(os.path.join(root, doc)).read()
    named = set()
    for cells in table_rows(text, '## The folders') or []:
        for n in FOLDER.findall(cells[0]):
            named.update(expand(n))
    if not named:
        bad.append('%s: no folder table under "## The folders"' % doc)
        return
    want = {d + '/' for d in os.listdir(root)
            if os.path.isdir(os.path.join(root, d)) and not d.startswith(('.', 'build')) and d != 'docs'}
    want -= {'lib/', 'tools/', 'plugins/'}
    for top in ('lib', 'tools', 'plugins'):
        want.update(folders_of(root, top))
    covered = named | {os.path.dirname(n) + '/' for n in named if not n.endswith('/')}
    for n in sorted(want - covered):
        bad.append('%s: the folder table does not name %s' % (doc, n))
    for n in sorted(named):
        if not os.path.exists(os.path.join(root, n)):
            bad.append('%s: the folder table names %s, which is gone' % (doc, n))

    files = set()
    for cells in table_rows(text, '## lib/core, one concept per file') or []:
        for n in FOLDER.findall(cells[0]):
            for f in expand(n):
                if f in files:
                    bad.append('%s: the lib/core table names %s twice' % (doc, f))
                files.add(f)
    if not files:
        bad.append('%s: no table under "## lib/core, one concept per file"' % doc)
        return
    core = os.path.join(root, 'lib', 'core')
    have = {n for n in os.listdir(core) if n.endswith(('.c', '.h', '.def'))}
    for n in sorted(have - files):
        bad.append('%s: the lib/core table does not name %s' % (doc, n))
    for n in sorted(files - have):
        bad.append('%s: the lib/core table names %s, which lib/core does not have' % (doc, n))


def main(argv):
    root = argv[1]
    bad = []
    read_rules(root, bad)
    check_lib(root, bad)
    check_architecture(root, bad)
    check_environment(root, bad)
    check_preload(root, bad)
    check_tools(root, bad)
    check_meson(root, bad)
    check_proc(root, bad)
    for b in bad:
        print('FAIL: ' + b)
    print('%d problems' % len(bad))
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
