"""Checks Grafana dashboards against a running Prometheus that scrapes a Pollux program.

Lint: valid JSON, unique panel ids, every metric a query names is one the program exports.
Live: every panel query, evaluated by Prometheus' HTTP API, returns a non-empty vector.
Usage: check_dashboards.py PROMETHEUS_URL DASHBOARD.json...
"""
import json
import re
import sys
import time
import urllib.parse
import urllib.request


def get(url, path, **params):
    q = urllib.parse.urlencode(params)
    with urllib.request.urlopen(f"{url}{path}?{q}", timeout=10) as r:
        body = json.load(r)
    if body.get("status") != "success":
        raise RuntimeError(f"{path} {params}: {body}")
    return body["data"]


def wait_for_samples(url, deadline_s=90):
    """Until Prometheus holds two scrapes of the program (rate() needs two samples)."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        try:
            r = get(url, "/api/v1/query", query="count_over_time(pollux_scenario_passed[5m])")
            if r["result"] and float(r["result"][0]["value"][1]) >= 2:
                return
        except OSError:
            pass  # Prometheus still starting
        time.sleep(0.5)
    targets = get(url, "/api/v1/targets")
    sys.exit(f"FAIL: no two scrapes of the program within {deadline_s} s; targets: {targets}")


def main():
    url, files = sys.argv[1], sys.argv[2:]
    wait_for_samples(url)
    exported = set(get(url, "/api/v1/label/__name__/values"))
    failures, checked = [], 0
    for path in files:
        with open(path) as f:
            d = json.load(f)  # invalid JSON fails here, naming the file
        ids = [p["id"] for p in d["panels"]]
        if len(ids) != len(set(ids)):
            failures.append(f"{path}: duplicate panel ids {ids}")
        for p in d["panels"]:
            for t in p.get("targets", []):
                expr = t["expr"]
                for name in set(re.findall(r"\bpollux_[a-z0-9_]+", expr)):
                    if name not in exported:
                        failures.append(f"{path} panel {p['id']} ({p['title']}): {name} is not exported")
                q = (expr.replace("$__rate_interval", "1m").replace('"$instance"', '".*"'))
                r = get(url, "/api/v1/query", query=q)
                checked += 1
                if r["resultType"] != "vector" or not r["result"]:
                    failures.append(f"{path} panel {p['id']} ({p['title']}): no data for {q}")
    for f in failures:
        print("FAIL:", f)
    print(f"{checked} panel queries evaluated by Prometheus, {len(failures)} failures")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
