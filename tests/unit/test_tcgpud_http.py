#!/usr/bin/env python3
"""tcgpud's HTTP endpoint (tools/tcgpud/http.c), with a real tcgpud on loopback.

- /metrics is the Prometheus text format: every family has HELP and TYPE
  before its samples, names and labels are well-formed, histogram buckets
  are cumulative and end at +Inf = _count, and the families docs/tcgpud.md
  lists are all there (per-project ones with their project), also in the
  textfile, which holds the same families; every per-GPU series carries the
  GPU's UUID as the driver gives it (label UUID, as NVIDIA's DCGM exporter
  names it, so that the series join), and none when tcgpud could not ask
  the driver;
- /api/state is strict JSON of docs/tcgpud.md's `api-state` schema;
- / is the page, with its Content-Security-Policy; its script and style load;
- the endpoint is read-only: POST is 405 (with Allow), a GET with a body
  413, an unknown path 404, HEAD has no body;
- with dashboard = no, / and /api/state are 404 and /metrics still served;
- 100 idle connections do not stall tcgpud: its socket answers meanwhile;
- a taken port: tcgpud says so and exits 1.

usage: test_tcgpud_http.py TCGPUD GPUCKPT SIMCUDA_LIB SIMCUDA_SMI
"""
import http.client
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time

tcgpud, gpuckpt, simcuda, smi = sys.argv[1:5]
os.environ["SIMCUDA_SHM"] = "/simcuda-t-tcgpud-http-%d" % os.getpid()
src = os.environ["TCGPU_SOURCE_ROOT"]
failures = 0
tmp = tempfile.mkdtemp(prefix="tcgpud-http-")
procs = []


def check(cond, msg):
    global failures
    if not cond:
        print("FAIL:", msg)
        failures += 1


def start(name, dashboard, port=0, driver=simcuda):
    ini = os.path.join(tmp, name + ".ini")
    with open(ini, "w") as f:
        f.write("[daemon]\nsocket = %s/%s.sock\nstate_file = %s/%s.state\nmetrics = %s/%s.prom\n"
                "http = 127.0.0.1:%d\ndashboard = %s\n\n[gpu 0]\ncapacity = 1G\n\n"
                "[project prod]\npriority = 100\nreservation = 256M on 0\nmembers = *\n\n"
                "[project 2024]\nmembers = *\n" % (tmp, name, tmp, name, tmp, name, port,
                                                    "yes" if dashboard else "no"))
    log = open(os.path.join(tmp, name + ".log"), "w+")
    p = subprocess.Popen([tcgpud, "--config", ini], stdout=log, stderr=subprocess.STDOUT,
                         env=dict(os.environ, TCGPU_REAL_LIBCUDA=driver))
    procs.append(p)
    deadline = time.time() + 20
    while time.time() < deadline:
        log.seek(0)
        m = re.search(r"http://127\.0\.0\.1:(\d+)/", log.read())
        if m:
            return p, int(m.group(1)), log
        if p.poll() is not None:
            break
        time.sleep(0.05)
    log.seek(0)
    raise SystemExit("FAIL: tcgpud did not serve HTTP: " + log.read())


def get(port, path, method="GET", body=None, headers=None):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    c.request(method, path, body=body, headers=headers or {})
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, dict((k.lower(), v) for k, v in r.getheaders()), data


SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\.)*"'
                    r'(,[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\.)*")*)?\})? (-?[0-9.e+-]+|\+Inf|NaN)$')


def parse_exposition(text, what):
    """{family: {"type": t, "samples": [(name, labels, value)]}}, checking the format."""
    fams, cur = {}, None
    for line in text.splitlines():
        if line.startswith("# HELP "):
            cur = line.split()[2]
            fams.setdefault(cur, {"type": None, "samples": []})
            continue
        if line.startswith("# TYPE "):
            _, _, name, t = line.split(" ", 3)
            check(name == cur, "%s: TYPE %s without its HELP first" % (what, name))
            fams[name]["type"] = t
            continue
        m = SAMPLE.match(line)
        check(m is not None, "%s: malformed sample line %r" % (what, line))
        if not m:
            continue
        name = m.group(1)
        base = re.sub(r"_(bucket|sum|count)$", "", name) if fams.get(cur, {}).get("type") == "histogram" else name
        check(base == cur, "%s: sample %s outside its family %s" % (what, name, cur))
        labels = dict(re.findall(r'([a-zA-Z_]\w*)="((?:[^"\\]|\\.)*)"', m.group(3) or ""))
        fams[cur]["samples"].append((name, labels, float(m.group(5))))
    return fams


def check_histogram(fams, name, what):
    f = fams.get(name)
    check(f and f["type"] == "histogram", "%s: %s is not a histogram" % (what, name))
    if not f:
        return
    buckets = [(s[1]["le"], s[2]) for s in f["samples"] if s[0] == name + "_bucket"]
    counts = [v for _, v in buckets]
    check(counts == sorted(counts), "%s: %s buckets are not cumulative: %s" % (what, name, buckets))
    check(buckets and buckets[-1][0] == "+Inf", "%s: %s has no +Inf bucket" % (what, name))
    total = [s[2] for s in f["samples"] if s[0] == name + "_count"]
    check(total and buckets and total[0] == buckets[-1][1], "%s: %s +Inf != _count" % (what, name))


WANT = {
    "tcgpud_build_info": "gauge", "tcgpud_start_time_seconds": "gauge",
    "tcgpud_last_update_timestamp_seconds": "gauge", "tcgpud_device_memory_capacity_bytes": "gauge",
    "tcgpud_device_memory_used_bytes": "gauge", "tcgpud_jobs": "gauge", "tcgpud_project_jobs": "gauge",
    "tcgpud_project_memory_used_bytes": "gauge", "tcgpud_project_reservation_bytes": "gauge",
    "tcgpud_project_memory_borrowed_bytes": "gauge", "tcgpud_preemptions_total": "counter",
    "tcgpud_refused_requests_total": "counter", "tcgpud_events_total": "counter",
    "tcgpud_suspend_latency_seconds": "histogram", "tcgpud_resume_latency_seconds": "histogram",
    "tcgpud_grant_wait_seconds": "histogram",
}


# The families with a GPU's labels (device, UUID).
PER_GPU = [n for n in WANT if n.startswith(("tcgpud_device_", "tcgpud_project_memory_",
                                            "tcgpud_project_reservation_"))]


def check_metrics(text, what, uuid):
    """uuid: GPU 0's UUID text, or None where tcgpud cannot know it."""
    fams = parse_exposition(text, what)
    for name in PER_GPU:
        got = {(s[1].get("device"), s[1].get("UUID")) for s in fams.get(name, {"samples": []})["samples"]}
        check(got == {("0", uuid)}, "%s: %s's GPU labels %s, expected device 0 with UUID %s"
              % (what, name, got, uuid))
    for name, t in WANT.items():
        check(name in fams and fams[name]["type"] == t, "%s: no %s %s" % (what, t, name))
    for h in [n for n, t in WANT.items() if t == "histogram"]:
        check_histogram(fams, h, what)
    res = [s for s in fams.get("tcgpud_project_reservation_bytes", {"samples": []})["samples"]
           if s[1].get("project") == "prod" and s[1].get("device") == "0"]
    check(res and res[0][2] == 256 * 1048576, "%s: prod's reservation: %s" % (what, res))
    check(any(s[1].get("project") == "2024" for s in fams["tcgpud_project_jobs"]["samples"]),
          "%s: no series for project 2024" % what)
    types = {s[1].get("type") for s in fams["tcgpud_events_total"]["samples"]}
    check({"denied", "waiting", "suspend-failed"} <= types, "%s: event counters %s" % (what, types))
    return fams


try:
    daemon, port, log = start("on", True)
    time.sleep(0.7)                                   # one tick: the first textfile

    st, h, body = get(port, "/metrics")
    check(st == 200 and h["content-type"].startswith("text/plain; version=0.0.4"), "/metrics: %d %s" % (st, h))
    check(h.get("cache-control") == "no-store" and h.get("x-content-type-options") == "nosniff",
          "/metrics headers: %s" % h)
    r = subprocess.run([smi, "--query-gpu=uuid", "--format=csv,noheader", "-i", "0"], capture_output=True)
    uuid = r.stdout.decode().strip()
    check(r.returncode == 0 and uuid.startswith("GPU-"), "simcuda-smi's UUID of GPU 0: %r" % uuid)
    check_metrics(body.decode(), "/metrics", uuid)
    with open(os.path.join(tmp, "on.prom")) as f:
        fams = check_metrics(f.read(), "textfile", uuid)
    check(set(fams) == set(parse_exposition(body.decode(), "again")), "textfile and /metrics differ")

    st, h, body = get(port, "/api/state")
    check(st == 200 and h["content-type"] == "application/json", "/api/state: %d %s" % (st, h))
    r = subprocess.run([sys.executable, os.path.join(src, "tests/common/jsoncheck.py"),
                        os.path.join(src, "docs/tcgpud.md") + ":" + os.path.join(src, "docs/cli.md"),
                        "api-state"], input=body, capture_output=True)
    check(r.returncode == 0, "/api/state against docs/tcgpud.md: %s" % r.stderr.decode())
    check(b'"name":"2024"' in body, "project 2024 is not a string in /api/state")

    st, h, body = get(port, "/")
    check(st == 200 and h["content-type"].startswith("text/html") and b"/dashboard.js" in body, "/: %d" % st)
    csp = h.get("content-security-policy", "")
    check("default-src 'none'" in csp and "script-src 'self'" in csp and "frame-ancestors 'none'" in csp,
          "/: CSP %r" % csp)
    for path, kind in (("/dashboard.js", "text/javascript"), ("/dashboard.css", "text/css")):
        st, h, body = get(port, path)
        check(st == 200 and h["content-type"].startswith(kind) and len(body) > 100, "%s: %d" % (path, st))
    st, h, body = get(port, "/healthz")
    check(st == 200 and body == b"ok\n", "/healthz: %d %r" % (st, body))

    st, h, body = get(port, "/metrics", method="POST", body=b"x=1")
    check(st == 405 and h.get("allow") == "GET, HEAD", "POST: %d %s" % (st, h))
    st, h, body = get(port, "/api/state", method="DELETE")
    check(st == 405, "DELETE: %d" % st)
    st, h, body = get(port, "/metrics", body=b"a body", headers={"Content-Length": "6"})
    check(st == 413, "GET with a body: %d" % st)
    st, h, body = get(port, "/etc/passwd")
    check(st == 404, "unknown path: %d" % st)
    st, h, body = get(port, "/metrics", method="HEAD")
    check(st == 200 and body == b"", "HEAD: %d, %d bytes" % (st, len(body)))

    # idle connections do not stall the daemon
    idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(100)]
    t0 = time.time()
    r = subprocess.run([gpuckpt, "ps", "--daemon"], env=dict(os.environ, TCGPU_DAEMON_SOCKET=tmp + "/on.sock"),
                       capture_output=True, timeout=20)
    check(r.returncode == 0 and time.time() - t0 < 5, "ps with 100 idle HTTP connections: exit %d in %.1f s"
          % (r.returncode, time.time() - t0))
    for s in idle:
        s.close()

    # the same port again: refused, said, exit 1
    second, _, _ = None, None, None
    ini2 = os.path.join(tmp, "clash.ini")
    with open(ini2, "w") as f:
        f.write("[daemon]\nsocket = %s/clash.sock\nstate_file = %s/clash.state\nhttp = 127.0.0.1:%d\n"
                % (tmp, tmp, port))
    r = subprocess.run([tcgpud, "--config", ini2], capture_output=True, timeout=20)
    check(r.returncode == 1 and b"cannot listen" in r.stderr, "a taken port: exit %d: %s"
          % (r.returncode, r.stderr.decode()))

    off, port_off, _ = start("off", False, driver=os.path.join(tmp, "no-libcuda.so.1"))
    st, _, _ = get(port_off, "/")
    check(st == 404, "dashboard = no: / is %d" % st)
    st, _, _ = get(port_off, "/api/state")
    check(st == 404, "dashboard = no: /api/state is %d" % st)
    st, _, body = get(port_off, "/metrics")
    check(st == 200 and b"tcgpud_build_info" in body, "dashboard = no: /metrics %d" % st)
    check_metrics(body.decode(), "without a driver", None)
finally:
    for p in procs:
        p.terminate()
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        os.unlink("/dev/shm" + os.environ["SIMCUDA_SHM"])
    except FileNotFoundError:
        pass

if failures:
    print("%d check(s) failed" % failures)
    sys.exit(1)
print("tcgpud's HTTP endpoint: all checks passed")
