#!/usr/bin/env bash
# The dashboard in a real headless browser (Debian's chromium), loaded
# during the demo's preemption: after its script ran, the page shows
# - tcgpud live;
# - the research job as suspended by the policy for the prod job, the
#   reason, the memory to bring back, that it resumes by itself;
# - both jobs in the job table with their states, both projects (prod's
#   700 MiB reservation), the GPU's chart with an area for each job in its
#   project and prod's reservation line;
# - the event timeline: the research job's suspension with its latency, the
#   prod job's grant.
# /api/state at that moment is strict JSON of docs/tcgpud.md's schema. The
# screenshot is kept in the test log's directory (meson-logs/dashboard.png).
. "$(dirname "$0")/../sim/lib.sh"
. "$(dirname "$0")/../sim/tcgpud_lib.sh"
. "$(dirname "$0")/lib.sh"

CHROMIUM=$(command -v chromium || command -v chromium-browser || true)
[ -n "$CHROMIUM" ] || fail "chromium is not installed (scripts/setup.sh installs it)"
SHOT=$B/meson-logs/dashboard.png

preemption yes

curl -sf "http://127.0.0.1:$HTTP/api/state" >"$WORK/state.json" || fail "no /api/state"
python3 "$TCGPU_SOURCE_ROOT/tests/common/jsoncheck.py" \
    "$TCGPU_SOURCE_ROOT/docs/tcgpud.md:$TCGPU_SOURCE_ROOT/docs/cli.md" api-state <"$WORK/state.json" ||
    fail "/api/state does not follow docs/tcgpud.md"

# browser ARGS... : headless chromium on the dashboard, bounded in time,
# its profile in $WORK; nothing of it is left running afterwards.
browser() {
    timeout 90 "$CHROMIUM" --headless=new --no-sandbox --disable-gpu --disable-dev-shm-usage \
        --disable-crash-reporter --disable-breakpad --no-first-run --user-data-dir="$WORK/chromium" \
        --window-size=1400,1300 --virtual-time-budget=8000 "$@" "http://127.0.0.1:$HTTP/" \
        2>>"$WORK/chromium.log"
    local p
    for p in $(grep -l -- "$WORK/chromium" /proc/[0-9]*/cmdline 2>/dev/null | cut -d/ -f3); do
        kill -9 "$p" 2>/dev/null || true
    done
}

browser --dump-dom >"$WORK/dom.html" || fail "chromium failed: $(tail -n 5 "$WORK/chromium.log")"
[ -s "$WORK/dom.html" ] || fail "chromium gave no page: $(tail -n 5 "$WORK/chromium.log")"
mkdir -p "$(dirname "$SHOT")"
browser --screenshot="$SHOT" >/dev/null || fail "chromium took no screenshot: $(tail -n 5 "$WORK/chromium.log")"

python3 - "$WORK/dom.html" "$low" "$high" "$SHOT" <<'PY' || fail "the dashboard does not show the preemption (the DOM is in the log above)"
import html.parser, struct, sys

dom, low, high, shot = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]


class Page(html.parser.HTMLParser):
    """Each element with its attributes and the text inside it, in document order."""
    def __init__(self):
        super().__init__()
        self.stack, self.elements = [], []

    def handle_starttag(self, tag, attrs):
        e = {'tag': tag, 'attrs': dict(attrs), 'text': ''}
        self.elements.append(e)
        if tag not in ('br', 'meta', 'link', 'img', 'input'):
            self.stack.append(e)

    def handle_endtag(self, tag):
        while self.stack:
            if self.stack.pop()['tag'] == tag:
                break

    def handle_data(self, data):
        for e in self.stack:
            e['text'] += data


p = Page()
text = open(dom, encoding='utf-8').read()
p.feed(text)
bad = []


def find(pred):
    return [e for e in p.elements if pred(e)]


def expect(cond, what):
    if not cond:
        bad.append(what)


def by_id(i):
    f = find(lambda e: e['attrs'].get('id') == i)
    return f[0] if f else {'text': '', 'attrs': {}}


expect(by_id('status')['text'] == 'live', 'status %r, not live' % by_id('status')['text'])
# the suspended job: by the policy, for the prod job, why, memory, resumes by itself
susp = find(lambda e: e['tag'] == 'tr' and e['attrs'].get('data-pid') == low and
            e['attrs'].get('data-state') == 'suspended' and 'policy, for pid ' + high in e['text'])
expect(susp, 'the research job is not shown as suspended by the policy for pid %s' % high)
if susp:
    t = susp[0]['text']
    expect('reclaim' in t or 'priority' in t, 'no reason in %r' % t)
    expect('MiB' in t and 'by itself, when its memory fits' in t, 'memory / resume missing in %r' % t)
expect(find(lambda e: e['tag'] == 'tr' and e['attrs'].get('data-pid') == high and
            e['attrs'].get('data-state') == 'running'), 'the prod job is not shown running')
expect(find(lambda e: e['tag'] == 'tr' and e['attrs'].get('data-pid') == low and
            'by policy for ' + high in e['text']), 'the job table has no note on the research job')
for proj in ('research', 'prod'):
    expect(find(lambda e: e['tag'] == 'tr' and e['attrs'].get('data-project') == proj),
           'no row for project %s' % proj)
prod = find(lambda e: e['tag'] == 'tr' and e['attrs'].get('data-project') == 'prod')
expect(prod and '700 MiB on GPU 0' in prod[0]['text'], "prod's reservation not shown")
# the chart: an area per job in its project's group, as high as the job's memory, prod's reservation line
for pid, proj in ((high, 'prod'), (low, 'research')):
    area = find(lambda e: e['tag'] == 'path' and e['attrs'].get('data-pid') == pid and
                e['attrs'].get('data-project') == proj)
    expect(area and int(area[0]['attrs'].get('data-most', 0)) > 500 << 20,
           'no area of its 600 MiB for the %s job in the chart: %s' % (proj, area))
expect(find(lambda e: e['tag'] == 'line' and e['attrs'].get('data-reservation') == 'prod'),
       "no line for prod's reservation")
# the chart's title counts the chart's jobs, in English ("1 jobs" it said)
import re
titles = [re.search(r'\((\d+) (jobs?) in the last minutes\)', e['text'])
          for e in find(lambda e: e['attrs'].get('class') == 'title')]
titles = [t for t in titles if t]
areas = find(lambda e: e['tag'] == 'path' and e['attrs'].get('data-pid'))
expect(len(titles) == 1 and int(titles[0].group(1)) == len(areas) and
       titles[0].group(2) == ('job' if len(areas) == 1 else 'jobs'),
       'chart title %r for %d areas' % ([t.group(0) for t in titles], len(areas)))
# the timeline: the suspension with its latency, the grant
ev = find(lambda e: e['tag'] == 'tr' and e['attrs'].get('data-type') == 'suspended' and
          e['attrs'].get('data-pid') == low)
expect(ev and ' ms' in ev[0]['text'], 'no suspended event with its latency for the research job')
expect(find(lambda e: e['tag'] == 'tr' and e['attrs'].get('data-type') == 'granted' and
            e['attrs'].get('data-pid') == high), 'no granted event for the prod job')
# the screenshot is a real image of the page
with open(shot, 'rb') as f:
    head = f.read(24)
expect(head[:8] == b'\x89PNG\r\n\x1a\n', 'the screenshot is not a PNG')
if head[:8] == b'\x89PNG\r\n\x1a\n':
    w, h = struct.unpack('>II', head[16:24])
    expect(w >= 1000 and h >= 800, 'the screenshot is %dx%d' % (w, h))
for b in bad:
    print('FAIL:', b)
if bad:
    print(text[:20000])
sys.exit(1 if bad else 0)
PY
echo "screenshot of the dashboard during the preemption: $SHOT"
kill "$high"
note "the dashboard shows who was suspended, by whom, why, and the timeline"
