#!/usr/bin/env python3
"""One container of deploy/'s manifests, as podman runs it (tests/containers/deploy.sh).

    pod_spec.py DEPLOY FILE CONTAINER NODE SCRATCH args     podman run's options
    pod_spec.py DEPLOY FILE CONTAINER command               its command and args
    pod_spec.py DEPLOY FILE CONTAINER probe                 its readiness probe's command
    pod_spec.py DEPLOY FILE CONTAINER env NAME              one variable of its env

CONTAINER is a container or an init container of the pod template (or pod) in
deploy/FILE. Output: NUL-separated words. `args` gives what the pod spec asks
of the runtime: its env (`-e NAME=VALUE`), `--privileged`, `--pid host` for
hostPID, and each volume mount as a bind mount (`-v SRC:DST[:ro]`), the
volume's source being:
  hostPath   NODE + the path: NODE stands for the node's root filesystem,
             shared by every container the test runs, as a node's is;
  configMap  SCRATCH/configmap-NAME, where the ConfigMap's data (found in
             deploy/) is written, one file a key, as the kubelet projects it;
  emptyDir   SCRATCH/emptydir-NAME, one per pod spec, as the kubelet's.
A field the test cannot honour (a volume of another kind, a probe that is not
exec, env from a reference) is an error naming it: the test must not pass on
a manifest it did not run.
"""
import os
import sys

import yaml


def fail(msg):
    print('pod_spec.py: %s' % msg, file=sys.stderr)
    sys.exit(1)


def objects(deploy):
    objs = []
    for name in sorted(os.listdir(deploy)):
        if name.endswith('.yaml'):
            with open(os.path.join(deploy, name)) as f:
                objs += [(name, o) for o in yaml.safe_load_all(f) if o]
    return objs


def pod_spec(objs, fname):
    for name, o in objs:
        if name != fname:
            continue
        spec = o.get('spec') or {}
        if o.get('kind') == 'Pod':
            return spec
        if (spec.get('template') or {}).get('spec'):
            return spec['template']['spec']
    fail('deploy/%s holds no pod template' % fname)


def container(spec, cname):
    hits = [c for c in spec.get('containers', []) + spec.get('initContainers', [])
            if c.get('name') == cname]
    if len(hits) != 1:
        fail('%d containers named %s' % (len(hits), cname))
    return hits[0]


def config_map(objs, name):
    for _, o in objs:
        if o.get('kind') == 'ConfigMap' and o['metadata']['name'] == name:
            return o.get('data') or {}
    fail('no ConfigMap %s in deploy/' % name)


def volume_source(objs, vol, node, scratch):
    if 'hostPath' in vol:
        path = vol['hostPath']['path']
        src = node + path
        kind = vol['hostPath'].get('type')
        if kind == 'DirectoryOrCreate':
            os.makedirs(src, exist_ok=True)
        elif not os.path.exists(src):
            fail('hostPath %s (type %s) is not on the node: the pod would not start' % (path, kind))
        return src
    if 'configMap' in vol:
        src = os.path.join(scratch, 'configmap-' + vol['name'])
        os.makedirs(src, exist_ok=True)
        for key, text in config_map(objs, vol['configMap']['name']).items():
            with open(os.path.join(src, key), 'w') as f:
                f.write(text)
        return src
    if 'emptyDir' in vol:
        src = os.path.join(scratch, 'emptydir-' + vol['name'])
        os.makedirs(src, exist_ok=True)
        return src
    fail('volume %s: a kind the test does not run (%s)' % (vol['name'], ', '.join(vol)))


def env_of(c):
    env = {}
    for e in c.get('env', []):
        if 'value' not in e:
            fail('env %s of %s has no plain value' % (e['name'], c['name']))
        env[e['name']] = str(e['value'])
    return env


def run_args(objs, spec, c, node, scratch):
    args = []
    for k, v in env_of(c).items():
        args += ['-e', '%s=%s' % (k, v)]
    if (c.get('securityContext') or {}).get('privileged'):
        args.append('--privileged')
    if spec.get('hostPID'):
        args += ['--pid', 'host']
    vols = {v['name']: v for v in spec.get('volumes', [])}
    for m in c.get('volumeMounts', []):
        if m['name'] not in vols:
            fail('%s mounts an undeclared volume %s' % (c['name'], m['name']))
        src = volume_source(objs, vols[m['name']], node, scratch)
        args += ['-v', '%s:%s%s' % (src, m['mountPath'], ':ro' if m.get('readOnly') else '')]
    return args


def main(argv):
    if len(argv) < 5:
        fail('usage: pod_spec.py DEPLOY FILE CONTAINER NODE SCRATCH args | command | probe | env NAME')
    deploy, fname, cname = argv[1:4]
    objs = objects(deploy)
    spec = pod_spec(objs, fname)
    c = container(spec, cname)
    what = argv[4]
    if what == 'command':
        words = list(c.get('command', [])) + list(c.get('args', []))
    elif what == 'probe':
        probe = (c.get('readinessProbe') or {}).get('exec')
        if not probe:
            fail('%s has no exec readiness probe' % cname)
        words = probe['command']
    elif what == 'env':
        words = [env_of(c).get(argv[5], '')]
    elif len(argv) == 7 and argv[6] == 'args':
        words = run_args(objs, spec, c, argv[4], argv[5])
    else:
        fail('unknown query %s' % ' '.join(argv[4:]))
    sys.stdout.write(''.join(str(w) + '\0' for w in words))
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
