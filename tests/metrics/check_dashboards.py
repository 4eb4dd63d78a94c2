"""Checks Grafana dashboards against a running Prometheus that scrapes a Pollux program.

Lint: valid JSON, unique panel ids, every metric a query names is one the program exports,
every template variable a query uses ($name, ${name}) is defined in the dashboard's templating.
Live: every panel query, evaluated by Prometheus' HTTP API, returns a non-empty vector (a
variable in a `=~"$name"` matcher stands for all values: `.*`); every query variable's
label_values(selector, label) finds series that carry the label.
Usage: check_dashboards.py PROMETHEUS_URL DASHBOARD.json...
"""
import json
import re
import sys
import time
import urllib.error
import urllib.parse
import urllib.request


def get(url, path, **params):
    q = urllib.parse.urlencode(params)
    try:
        with urllib.request.urlopen(f"{url}{path}?{q}", timeout=10) as r:
            body = json.load(r)
    except urllib.error.HTTPError as e:  # a bad query: Prometheus says why in the body
        raw = e.read()
        try:
            body = json.loads(raw)
        except ValueError:
            # Not the API's answer: until its storage is open Prometheus serves every API path
            # a plain-text "503 Service Unavailable". An OSError, as when it does not listen yet.
            raise OSError(f"{path}: HTTP {e.code}, not JSON: {raw[:200]!r}") from None
    if body.get("status") != "success":
        raise RuntimeError(f"{path} {params}: {body}")
    return body["data"]


def wait_for_samples(url, deadline_s=90):
    """Until Prometheus holds two scrapes of every program it scrapes (rate() needs two)."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        try:
            r = get(url, "/api/v1/query", query="count_over_time(pollux_scenario_passed[5m])")
            every = get(url, "/api/v1/query", query="min(count_over_time(up[5m]))")
            if (r["result"] and float(r["result"][0]["value"][1]) >= 2 and every["result"]
                    and float(every["result"][0]["value"][1]) >= 2):
                return
        except OSError:
            pass  # Prometheus still starting: not listening, or not ready (503)
        time.sleep(0.5)
    targets = get(url, "/api/v1/targets")
    sys.exit(f"FAIL: no two scrapes of the program within {deadline_s} s; targets: {targets}")


# Grafana's built-in variables ($__rate_interval, $__interval, $__range, ...) need no definition.
VAR_RE = re.compile(r"\$(?:\{(\w+)(?::\w+)?\}|(\w+))")
MATCH_ALL_RE = re.compile(r'=~"\$(?:\{\w+(?::\w+)?\}|\w+)"')
LABEL_VALUES_RE = re.compile(r"^\s*label_values\((?:(.*),)?\s*(\w+)\s*\)\s*$", re.S)


def variables_used(text):
    return {a or b for a, b in VAR_RE.findall(text)} - {""}


def undefined_variables(text, defined):
    return sorted(v for v in variables_used(text) if not v.startswith("__") and v not in defined)


def substitute(expr):
    """A query as Prometheus would get it with every variable set to All."""
    expr = expr.replace("${__rate_interval}", "1m").replace("$__rate_interval", "1m")
    return MATCH_ALL_RE.sub('=~".*"', expr)


def query(url, q, where, failures):
    """The result vector of an instant query, or None (a failure noted) if Prometheus refused it."""
    try:
        r = get(url, "/api/v1/query", query=q)
    except RuntimeError as e:
        failures.append(f"{where}: {e}")
        return None
    if r["resultType"] != "vector":
        failures.append(f"{where}: a {r['resultType']}, not a vector, for {q}")
        return None
    return r["result"]


def check_variable(url, path, v, defined, failures):
    """A query variable: label_values(selector, label) must name defined variables only and
    find series with the label (evaluated as count by (label) (selector))."""
    text = v.get("query", "")
    text = text.get("query", "") if isinstance(text, dict) else text  # newer Grafana form
    where = f"{path} variable {v['name']}"
    for name in undefined_variables(text, defined):
        failures.append(f"{where}: uses undefined variable ${name}")
    m = LABEL_VALUES_RE.match(text)
    if not m:
        failures.append(f"{where}: expected label_values(selector, label), got {text!r}")
        return 0
    selector, label = (m.group(1) or "").strip(), m.group(2)
    if not selector:
        failures.append(f"{where}: label_values({label}) without a metric selector")
        return 0
    q = f"count by ({label}) ({substitute(selector)})"
    r = query(url, q, where, failures)
    if r is not None and not any(s["metric"].get(label) for s in r):
        failures.append(f"{where}: no series with label {label} for {q}")
    return 1


def main():
    url, files = sys.argv[1], sys.argv[2:]
    wait_for_samples(url)
    exported = set(get(url, "/api/v1/label/__name__/values"))
    failures, checked, variables_checked = [], 0, 0
    for path in files:
        with open(path) as f:
            d = json.load(f)  # invalid JSON fails here, naming the file
        ids = [p["id"] for p in d["panels"]]
        if len(ids) != len(set(ids)):
            failures.append(f"{path}: duplicate panel ids {ids}")
        variables = d.get("templating", {}).get("list", [])
        defined = {v["name"] for v in variables}
        for v in variables:
            if v.get("type") == "query":
                variables_checked += check_variable(url, path, v, defined, failures)
        for p in d["panels"]:
            where = f"{path} panel {p['id']} ({p['title']})"
            uids = [p.get("datasource", {}).get("uid", "")]
            uids += [t.get("datasource", {}).get("uid", "") for t in p.get("targets", [])]
            for name in undefined_variables(" ".join(uids), defined):
                failures.append(f"{where}: data source uses undefined variable ${name}")
            for t in p.get("targets", []):
                expr = t["expr"]
                for name in undefined_variables(expr, defined):
                    failures.append(f"{where}: uses undefined variable ${name}")
                for name in set(re.findall(r"\bpollux_[a-z0-9_]+", expr)):
                    if name not in exported:
                        failures.append(f"{where}: {name} is not exported")
                q = substitute(expr)
                r = query(url, q, where, failures)
                checked += 1
                if r is not None and not r:
                    failures.append(f"{where}: no data for {q}")
    for f in failures:
        print("FAIL:", f)
    print(f"{variables_checked} template variable queries evaluated by Prometheus")
    print(f"{checked} panel queries evaluated by Prometheus, {len(failures)} failures")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
