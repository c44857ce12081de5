#!/usr/bin/env python3
"""The docs' lists of libtcgpu.so's environment, from lib/core/settings.def.

    gen_settings.py man SETTINGS_DEF PAGE.scd OUT.scd
        PAGE.scd with its line "; settings: every row" replaced by the list
        (scdoc), the ENVIRONMENT of tcgpu(7)
    gen_settings.py check SETTINGS_DEF DOC.md...
    gen_settings.py update SETTINGS_DEF DOC.md...
        the markdown tables between "<!-- settings: PART... (...) -->" and
        "<!-- settings: end -->" in each DOC: the rows of those PARTs (or of
        every row: "all"), as settings.def orders them. check says which
        differ (exit 1); update rewrites them.

A row is SETTING(NAME, TYPE, FIELD, DEFAULT, SHOWN, PART, DOC) (settings.def's
head says what each means); DEFAULT and SHOWN are C strings or NULL, DOC one
or more adjacent C strings.
"""
import difflib
import re
import sys

MAN_MARK = '; settings: every row'
BEGIN = re.compile(r'^<!-- settings: ([a-z ]+?) \((.*)\) -->\n', re.M)
END = '<!-- settings: end -->\n'
FIELDS = ('name', 'type', 'field', 'default', 'shown', 'part', 'doc')
STRING = re.compile(r'"((?:[^"\\]|\\.)*)"')


def fail(msg):
    sys.stderr.write('gen_settings.py: %s\n' % msg)
    sys.exit(2)


def split_row(text, at, where):
    """The texts of the arguments of the SETTING( that ends at text[at], and
    where the row ends."""
    args, start = [], at
    while at < len(text):
        if text[at] == '"':
            at = STRING.match(text, at).end()
            continue
        if text[at] in ',)':
            args.append(text[start:at].strip())
            start = at + 1
            if text[at] == ')':
                return args, at + 1
        at += 1
    fail('%s: a row without its ")"' % where)


def value(arg, where):
    """An argument's value: NULL is None, a name itself, strings joined."""
    if arg == 'NULL':
        return None
    if re.fullmatch(r'\w+', arg):
        return arg
    if not arg or STRING.sub('', arg).strip():
        fail('%s: "%s" is neither a name nor C strings' % (where, arg))
    return ''.join(re.sub(r'\\(.)', r'\1', body) for body in STRING.findall(arg))


def rows(path):
    text = re.sub(r'/\*.*?\*/', '', open(path).read(), flags=re.S)
    out = []
    for m in re.finditer(r'^SETTING\(', text, re.M):
        args, _ = split_row(text, m.end(), path)
        if len(args) != len(FIELDS):
            fail('%s: a row of %d fields, not %d: %s' % (path, len(args), len(FIELDS), args))
        out.append(dict(zip(FIELDS, (value(a, path) for a in args))))
    if not out:
        fail('%s: no rows' % path)
    return out


def shown(row):
    """The default as the docs say it (markdown); '' when there is none."""
    if row['shown'] is not None:
        return row['shown']
    return '`%s`' % row['default'] if row['default'] else ''


def table(all_rows, parts):
    lines = ['| variable | default | meaning |\n', '| --- | --- | --- |\n']
    for r in all_rows:
        if 'all' in parts or r['part'] in parts:
            lines.append('| `%s` | %s | %s |\n' % (r['name'], shown(r) or '—', r['doc']))
    return ''.join(lines)


def scd(md):
    """Markdown's `code` as scdoc's bold."""
    return re.sub(r'`([^`]*)`', r'*\1*', md)


def man_list(all_rows):
    out = []
    for r in all_rows:
        d = shown(r)
        out.append('*%s*\n\t%s%s\n' % (r['name'], scd(r['doc']),
                                        ' (default: %s)' % scd(d) if d else ''))
    return '\n'.join(out)


def man(def_path, page, out):
    text = open(page).read()
    if text.count(MAN_MARK + '\n') != 1:
        fail('%s: no line "%s" (or more than one)' % (page, MAN_MARK))
    with open(out, 'w') as f:
        f.write(text.replace(MAN_MARK + '\n', man_list(rows(def_path))))


def blocks(doc, path):
    """(start, end, parts) of each generated table in doc."""
    found = []
    for m in BEGIN.finditer(doc):
        end = doc.find(END, m.end())
        if end < 0:
            fail('%s: "%s" has no "%s"' % (path, m.group(0).strip(), END.strip()))
        found.append((m.end(), end, m.group(1).split()))
    if not found:
        fail('%s: no "<!-- settings: PART... (...) -->" table' % path)
    return found


def check_or_update(cmd, def_path, docs):
    all_rows = rows(def_path)
    known = {r['part'] for r in all_rows} | {'all'}
    stale = 0
    for path in docs:
        doc = open(path).read()
        new, at = '', 0
        for b, e, parts in blocks(doc, path):
            if set(parts) - known:
                fail('%s: unknown parts %s' % (path, ' '.join(sorted(set(parts) - known))))
            want = table(all_rows, parts)
            if doc[b:e] != want:
                stale += 1
                sys.stdout.writelines(difflib.unified_diff(
                    doc[b:e].splitlines(True), want.splitlines(True), path, 'generated'))
            new += doc[at:b] + want
            at = e
        new += doc[at:]
        if cmd == 'update' and new != doc:
            with open(path, 'w') as f:
                f.write(new)
    if stale and cmd == 'check':
        print('%d table(s) differ from lib/core/settings.def: run '
              '`ninja -C build settings-doc-update`' % stale)
        return 1
    return 0


def main(argv):
    if len(argv) == 5 and argv[1] == 'man':
        man(argv[2], argv[3], argv[4])
        return 0
    if len(argv) >= 4 and argv[1] in ('check', 'update'):
        return check_or_update(argv[1], argv[2], argv[3:])
    sys.stderr.write(__doc__)
    return 2


if __name__ == '__main__':
    sys.exit(main(sys.argv))
