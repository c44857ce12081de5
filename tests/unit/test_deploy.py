#!/usr/bin/env python3
"""deploy/'s manifests parse, carry what docs/kubernetes.md promises, and hang together.

    test_deploy.py SOURCE_ROOT

- every YAML file of deploy/ parses (PyYAML, safe loader) into objects with
  apiVersion, kind and metadata.name;
- each row of the table "What the manifests promise" in docs/kubernetes.md
  (promise | file | field | value) holds: the field, a path such as
  spec.template.spec.containers[name=train].env[name=LD_PRELOAD].value, has
  that value in that file (`data["tcgpud.ini"]` followed by `[section] key`
  reads a key of the INI text);
- the pieces fit: every volume a container mounts is declared, every declared
  volume is mounted, the Job's tcgpud socket is the one tcgpud serves, the
  checkpoint volume is a claim of the same file, tcgpud's keys are keys that
  docs/tcgpud.md documents, the kustomization lists files that exist.
"""
import configparser
import json
import os
import re
import sys

import yaml


def load_all(deploy):
    docs = {}
    for name in sorted(os.listdir(deploy)):
        if not name.endswith('.yaml'):
            continue
        with open(os.path.join(deploy, name)) as f:
            docs[name] = [d for d in yaml.safe_load_all(f) if d is not None]
    return docs


def check_objects(docs, bad):
    for name, objs in docs.items():
        if not objs:
            bad.append('%s holds no object' % name)
        for o in objs:
            if not isinstance(o, dict) or not o.get('apiVersion') or not o.get('kind'):
                bad.append('%s: an object without apiVersion or kind' % name)
            elif o['kind'] != 'Kustomization' and not (o.get('metadata') or {}).get('name'):
                bad.append('%s: a %s without metadata.name' % (name, o['kind']))


STEP = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)|\[name=([^\]]+)\]|\["([^"]+)"\]|\.')


def walk(obj, path):
    """The value at a dotted path with [name=X] (list item by name) and ["key"] steps."""
    pos = 0
    while pos < len(path):
        m = STEP.match(path, pos)
        if not m:
            raise KeyError('bad path %r at %r' % (path, path[pos:]))
        pos = m.end()
        key, byname, quoted = m.groups()
        if key or quoted:
            k = key or quoted
            if not isinstance(obj, dict) or k not in obj:
                raise KeyError('no %r' % k)
            obj = obj[k]
        elif byname:
            hits = [x for x in obj if isinstance(x, dict) and x.get('name') == byname]
            if len(hits) != 1:
                raise KeyError('%d items named %r' % (len(hits), byname))
            obj = hits[0]
    return obj


def ini(text):
    p = configparser.ConfigParser(inline_comment_prefixes=(';',), comment_prefixes=(';', '#'),
                                  interpolation=None)
    p.optionxform = str
    p.read_string(text)
    return p


def value_of(objs, field):
    """A field of the first object that has it; INI keys after data["x"] `[sec] key`."""
    m = re.match(r'^`?([^`]+)`?(?:\s+`\[([^\]]+)\]\s+([a-z_]+)`)?$', field)
    if not m:
        raise KeyError('unreadable field %r' % field)
    path, section, key = m.groups()
    last = None
    for o in objs:
        try:
            v = walk(o, path)
        except KeyError as e:
            last = e
            continue
        return ini(v).get(section, key) if section else v
    raise KeyError(str(last))


def promises(doc):
    """Rows of the table under "What the manifests promise"."""
    text = open(doc).read()
    start = text.index('What the manifests promise')
    rows = []
    for line in text[start:].splitlines():
        if line.startswith('| promise') or line.startswith('| ---'):
            continue
        if not line.startswith('|'):
            if rows:
                break
            continue
        cells = [c.strip() for c in line.strip('|').split('|')]
        if len(cells) == 4:
            rows.append(cells)
    return rows


def expected(cell):
    v = cell.strip('`')
    try:
        return json.loads(v)
    except ValueError:
        return v


def check_promises(docs, doc, bad):
    rows = promises(doc)
    if len(rows) < 10:
        bad.append('docs/kubernetes.md promises only %d fields: the table was not found' % len(rows))
    for promise, fname, field, value in rows:
        if fname not in docs:
            bad.append('%s: no deploy/%s' % (promise, fname))
            continue
        try:
            got = value_of(docs[fname], field)
        except KeyError as e:
            bad.append('%s: deploy/%s has no %s (%s)' % (promise, fname, field, e))
            continue
        want = expected(value)
        if isinstance(want, bool) or isinstance(got, bool):
            ok = got is want
        else:
            ok = got == want or (not isinstance(want, (list, dict)) and str(got) == str(want))
        if not ok:
            bad.append('%s: deploy/%s %s is %r, docs/kubernetes.md says %r' % (promise, fname, field,
                                                                              got, want))


def pod_specs(docs):
    for name, objs in docs.items():
        for o in objs:
            spec = ((o.get('spec') or {}).get('template') or {}).get('spec')
            if spec:
                yield name, o, spec


def check_volumes(docs, bad):
    for name, o, spec in pod_specs(docs):
        declared = {v['name'] for v in spec.get('volumes', [])}
        mounted = set()
        for c in spec.get('containers', []) + spec.get('initContainers', []):
            for m in c.get('volumeMounts', []):
                mounted.add(m['name'])
                if m['name'] not in declared:
                    bad.append('%s: container %s mounts undeclared volume %s' % (name, c['name'],
                                                                               m['name']))
        for v in declared - mounted:
            bad.append('%s: volume %s is declared and never mounted' % (name, v))


def documented_keys(doc):
    """Keys of docs/tcgpud.md's configuration table, by section kind."""
    keys, section = {}, None
    for line in open(doc).read().splitlines():
        m = re.match(r'^\| *(`\[([a-z]+)[^`]*\]`)? *\| *`([a-z_]+)` *\|', line)
        if not m:
            continue
        if m.group(2):
            section = m.group(2)
        keys.setdefault(section, set()).add(m.group(3))
    return keys


def check_together(docs, root, bad):
    cm = [o for o in docs.get('tcgpud-configmap.yaml', []) if o['kind'] == 'ConfigMap'][0]
    conf = ini(cm['data']['tcgpud.ini'])
    sock = conf.get('daemon', 'socket')
    job = [o for o in docs.get('train-job.yaml', []) if o['kind'] == 'Job'][0]
    env = {e['name']: e.get('value') for c in job['spec']['template']['spec']['containers']
           for e in c.get('env', [])}
    if env.get('TCGPU_DAEMON_SOCKET') != sock:
        bad.append('the Job reaches tcgpud at %s, tcgpud serves %s' % (env.get('TCGPU_DAEMON_SOCKET'),
                                                                      sock))
    claim = job['spec']['template']['metadata']['annotations']['tcgpu.io/checkpoint-volume']
    claims = [o['metadata']['name'] for o in docs['train-job.yaml'] if o['kind'] == 'PersistentVolumeClaim']
    if claim not in claims:
        bad.append('checkpoint volume %s is not a claim of train-job.yaml (%s)' % (claim, claims))
    keys = documented_keys(os.path.join(root, 'docs', 'tcgpud.md'))
    for section in conf.sections():
        kind = section.split()[0]
        for k in conf[section]:
            if k not in keys.get(kind, set()):
                bad.append('tcgpud.ini [%s] %s is not a key docs/tcgpud.md documents' % (section, k))
    plugin = ini(cm['data']['tcgpu_plugin.conf'])
    if not plugin.has_option('plugin', 'timeout'):
        bad.append('tcgpu_plugin.conf has no [plugin] timeout')
    kust = [o for o in docs.get('kustomization.yaml', []) if o['kind'] == 'Kustomization']
    for r in (kust[0]['resources'] if kust else []):
        if r not in docs:
            bad.append('kustomization.yaml lists %s, which is not in deploy/' % r)


def main(argv):
    root = argv[1]
    bad = []
    docs = load_all(os.path.join(root, 'deploy'))
    check_objects(docs, bad)
    check_promises(docs, os.path.join(root, 'docs', 'kubernetes.md'), bad)
    check_volumes(docs, bad)
    try:
        check_together(docs, root, bad)
    except (KeyError, IndexError) as e:
        bad.append('the manifests lack a piece: %r' % e)
    for b in bad:
        print('FAIL: ' + b)
    print('%d files, %d problems' % (len(docs), len(bad)))
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
