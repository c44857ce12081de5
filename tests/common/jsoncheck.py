#!/usr/bin/env python3
"""Strict JSON checks against the schemas the docs publish.

    jsoncheck.py DOC OBJECT [--lines] [PATH=JSON | PATH~TEXT | PATH>NUMBER ...] < output

Reads the tool's output from stdin and checks, strictly:
- the bytes are UTF-8 (no invalid sequence, no lone surrogate escape),
- each document is JSON with no duplicate key and no NaN/Infinity,
- it is one object (or, with --lines, one object a line),
- every key it has is documented for OBJECT in DOC, with the documented
  type (nested objects and arrays checked against their own schemas),
  and every key documented as required is there.
Expectations, for the object (each line's, with --lines): PATH=JSON, the
value at PATH (keys, or an array's indexes, joined by '.': status.state,
processes.0.pid) is that JSON value (ok=true, status.state='"running"');
PATH~TEXT, it is a string holding TEXT; PATH>NUMBER, it is a number above
NUMBER.

Schemas are the tables under "#### `NAME`" headings of DOC:

    #### `job`
    | key | type | meaning |
    | --- | --- | --- |
    | `pid` | integer | ... |
    | `for` | integer, optional | ... |
    | `status` | object status, or null | ... |
    | `jobs` | array of job | ... |
    | `codecs` | map of sums | ... |
    | *status* | | every key of `status` |

Types: string, integer, number (an integer is a number too), boolean,
object NAME, array of TYPE, map of TYPE (an object whose keys are free and
whose values are TYPE), tuple(TYPE TYPE...) (an array of those, in order),
where a TYPE that is not one of these is the name of an object's schema;
", or null" allows null; ", optional" allows the key to be absent; a row
whose key is *NAME* includes NAME's rows. Several docs may be given, joined
by ':' (DOC1:DOC2), for schemas that include another's.
Exit status 0 when everything holds, 1 otherwise (the problems on stderr).
"""
import json
import re
import sys

PRIMITIVE = {'string', 'integer', 'number', 'boolean'}


def parse_schemas(path):
    schemas, name = {}, None
    for line in open(path, encoding='utf-8'):
        m = re.match(r'^####\s+`([\w.-]+)`', line)
        if m:
            name = m.group(1)
            schemas[name] = {'rows': {}, 'includes': []}
            continue
        if name is None or not line.startswith('|'):
            if line.startswith('#'):
                name = None
            continue
        cells = [c.strip() for c in line.strip().strip('|').split('|')]
        if len(cells) < 2 or cells[0] in ('key', '---') or set(cells[0]) <= {'-'}:
            continue
        inc = re.match(r'^\*([\w.-]+)\*$', cells[0])
        if inc:
            schemas[name]['includes'].append(inc.group(1))
            continue
        key = re.match(r'^`([^`]+)`$', cells[0])
        if not key:
            continue
        schemas[name]['rows'][key.group(1)] = parse_type(cells[1], name, key.group(1))
    return schemas


def parse_base(base, obj, key):
    """A type without its qualifiers: a primitive, an object, or a container of a type."""
    m = re.match(r'^(array of|map of)\s+(.+)$', base)
    if m:
        return {'kind': m.group(1), 'item': parse_base(m.group(2), obj, key)}
    m = re.match(r'^tuple\(([\w ]+)\)$', base)
    if m:
        return {'kind': 'tuple', 'items': [parse_base(t, obj, key) for t in m.group(1).split()]}
    m = re.match(r'^object\s+([\w.-]+)$', base)
    if m:
        return {'kind': 'object', 'of': m.group(1)}
    if base in PRIMITIVE:
        return {'kind': base}
    if re.match(r'^[\w.-]+$', base) and base not in PRIMITIVE:
        return {'kind': 'object', 'of': base}      # "array of job": a schema's name
    raise SystemExit('%s.%s: unknown type %r' % (obj, key, base))


def parse_type(text, obj, key):
    parts = [p.strip() for p in text.split(',')]
    t = parse_base(parts[0], obj, key)
    t['nullable'] = t['optional'] = False
    for p in parts[1:]:
        if p == 'optional':
            t['optional'] = True
        elif p in ('or null', 'null'):
            t['nullable'] = True
        else:
            raise SystemExit('%s.%s: unknown type qualifier %r' % (obj, key, p))
    return t


def rows_of(schemas, name, seen=()):
    if name not in schemas:
        raise SystemExit('no schema `%s` in the doc' % name)
    rows = {}
    for inc in schemas[name]['includes']:
        if inc in seen:
            raise SystemExit('schema %s includes itself' % inc)
        rows.update(rows_of(schemas, inc, seen + (name,)))
    rows.update(schemas[name]['rows'])
    return rows


def check_primitive(kind, v):
    if kind == 'string':
        return isinstance(v, str)
    if kind == 'boolean':
        return isinstance(v, bool)
    if kind == 'integer':
        return isinstance(v, int) and not isinstance(v, bool)
    if kind == 'number':
        return isinstance(v, (int, float)) and not isinstance(v, bool)
    return False


def check_value(schemas, t, v, where, bad):
    if v is None:
        if not t.get('nullable'):
            bad.append('%s: null, but the doc says %s' % (where, describe(t)))
        return
    kind = t['kind']
    if kind in PRIMITIVE:
        if not check_primitive(kind, v):
            bad.append('%s: %r is not a %s' % (where, v, kind))
    elif kind == 'object':
        check_object(schemas, t['of'], v, where, bad)
    elif kind == 'tuple':
        if not isinstance(v, list) or len(v) != len(t['items']):
            bad.append('%s: not an array of %d' % (where, len(t['items'])))
            return
        for i, (item, it) in enumerate(zip(v, t['items'])):
            check_value(schemas, it, item, '%s[%d]' % (where, i), bad)
    else:
        want = list if kind == 'array of' else dict
        if not isinstance(v, want):
            bad.append('%s: not %s' % (where, 'an array' if want is list else 'an object'))
            return
        items = enumerate(v) if want is list else v.items()
        for k, item in items:
            check_value(schemas, t['item'], item, '%s[%r]' % (where, k), bad)


def describe(t):
    if t['kind'] in ('array of', 'map of'):
        return t['kind'] + ' ' + describe(t['item'])
    if t['kind'] == 'tuple':
        return 'tuple(%s)' % ' '.join(describe(i) for i in t['items'])
    return t['kind'] + (' ' + t['of'] if 'of' in t else '')


def check_object(schemas, name, v, where, bad):
    if not isinstance(v, dict):
        bad.append('%s: not an object (schema %s)' % (where, name))
        return
    rows = rows_of(schemas, name)
    for k, item in v.items():
        if k not in rows:
            bad.append('%s: key %r is not documented for `%s`' % (where, k, name))
            continue
        check_value(schemas, rows[k], item, '%s.%s' % (where, k), bad)
    for k, t in rows.items():
        if not t['optional'] and k not in v:
            bad.append('%s: required key %r of `%s` is missing' % (where, k, name))


def no_duplicates(pairs):
    seen = {}
    for k, v in pairs:
        if k in seen:
            raise ValueError('duplicate key %r' % k)
        seen[k] = v
    return seen


def no_constants(name):
    raise ValueError('%s is not JSON' % name)


def no_surrogates(v):
    """A lone surrogate escape (\\udcff) parses in Python but is not Unicode."""
    if isinstance(v, str):
        v.encode('utf-8')
    elif isinstance(v, dict):
        for k, x in v.items():
            no_surrogates(k)
            no_surrogates(x)
    elif isinstance(v, list):
        for x in v:
            no_surrogates(x)


def strict_loads(text):
    v = json.loads(text, object_pairs_hook=no_duplicates, parse_constant=no_constants)
    try:
        no_surrogates(v)
    except UnicodeEncodeError:
        raise ValueError('a lone surrogate escape (not Unicode)')
    return v


def main(argv):
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    doc, name, rest = argv[1], argv[2], argv[3:]
    lines = '--lines' in rest
    expect = []
    for e in rest:
        m = re.match(r'^([\w.-]+)([=~>])(.*)$', e)
        if m:
            expect.append(m.groups())
        elif e != '--lines':
            raise SystemExit('unknown argument %r' % e)
    schemas = {}
    for path in doc.split(':'):
        schemas.update(parse_schemas(path))
    raw = sys.stdin.buffer.read()
    try:
        text = raw.decode('utf-8', errors='strict')
    except UnicodeDecodeError as e:
        print('FAIL: output is not UTF-8: %s' % e, file=sys.stderr)
        return 1
    docs = [l for l in text.split('\n') if l.strip()] if lines else [text]
    if not lines and text.count('\n') > 1:
        print('FAIL: more than one line: %r' % text[:300], file=sys.stderr)
        return 1
    bad = []
    for i, d in enumerate(docs):
        try:
            v = strict_loads(d)
        except ValueError as e:
            bad.append('document %d is not strict JSON (%s): %r' % (i, e, d[:300]))
            continue
        check_object(schemas, name, v, name if not lines else '%s#%d' % (name, i), bad)
        for path, op, want in expect:
            got = v
            for k in path.split('.'):
                if isinstance(got, list) and k.isdigit():
                    got = got[int(k)] if int(k) < len(got) else None
                else:
                    got = got.get(k) if isinstance(got, dict) else None
            if op == '=' and json.dumps(got) != json.dumps(json.loads(want)):
                bad.append('%s: %s is %s, not %s' % (name, path, json.dumps(got), want))
            elif op == '~' and not (isinstance(got, str) and want in got):
                bad.append('%s: %s is %s, which does not hold %r' % (name, path, json.dumps(got), want))
            elif op == '>' and not (isinstance(got, (int, float)) and not isinstance(got, bool)
                                    and got > float(want)):
                bad.append('%s: %s is %s, not above %s' % (name, path, json.dumps(got), want))
    if not docs:
        bad.append('no JSON at all')
    for b in bad:
        print('FAIL: ' + b, file=sys.stderr)
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
