#!/usr/bin/env python3
"""render_dashboards.py against a fake Prometheus: the queries it sends (variables, rate
interval, range and step), what it draws for each panel type, units, gaps, and a refused query
(named on the page, exit status 1)."""
import http.server
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import threading
import unittest
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "render_dashboards.py")
spec = importlib.util.spec_from_file_location("render_dashboards", SCRIPT)
rd = importlib.util.module_from_spec(spec)
spec.loader.exec_module(rd)

END = 1_764_000_000.0


class FakePrometheus(http.server.BaseHTTPRequestHandler):
    queries = []

    def do_GET(self):
        url = urllib.parse.urlparse(self.path)
        q = dict(urllib.parse.parse_qsl(url.query))
        FakePrometheus.queries.append((url.path, q))
        if "broken(" in q.get("query", ""):
            body, status = {"status": "error", "error": "parse error: unknown function"}, 400
        elif url.path == "/api/v1/query":
            body, status = {"status": "success", "data": {"resultType": "vector", "result": [
                {"metric": {"device": "nvme0"}, "value": [END, "1.25"]}]}}, 200
        else:  # query_range: one series, a missing step in the middle
            start, step = float(q["start"]), float(q["step"])
            values = [[start + i * step, str(i)] for i in range(5) if i != 2]
            body, status = {"status": "success", "data": {"resultType": "matrix", "result": [
                {"metric": {"reactor": "0", "core": "3"}, "values": values}]}}, 200
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


def dashboard(panels):
    return {"uid": "test-dash", "title": "Test", "panels": panels,
            "templating": {"list": [{"name": "instance", "type": "query"}]}}


def panel(pid, kind, expr, unit="short", legend="{{reactor}}"):
    return {"id": pid, "type": kind, "title": f"panel {pid}",
            "gridPos": {"x": 0, "y": pid * 8, "w": 12, "h": 8},
            "fieldConfig": {"defaults": {"unit": unit}},
            "targets": [{"refId": "A", "expr": expr, "legendFormat": legend}]}


class RenderTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = http.server.HTTPServer(("127.0.0.1", 0), FakePrometheus)
        threading.Thread(target=cls.server.serve_forever, daemon=True).start()
        cls.url = f"http://127.0.0.1:{cls.server.server_address[1]}"

    @classmethod
    def tearDownClass(cls):
        cls.server.shutdown()
        cls.server.server_close()

    def run_renderer(self, panels, *extra):
        FakePrometheus.queries = []
        tmp = tempfile.mkdtemp()
        path = os.path.join(tmp, "d.json")
        with open(path, "w") as f:
            json.dump(dashboard(panels), f)
        out = os.path.join(tmp, "out")
        r = subprocess.run([sys.executable, SCRIPT, "--prometheus", self.url, "--out", out,
                            "--end", str(END), "--range", "100s", *extra, path],
                           capture_output=True, text=True)
        with open(os.path.join(out, "test-dash.html")) as f:
            page = f.read()
        with open(os.path.join(out, "summary.json")) as f:
            summary = json.load(f)["test-dash"]
        return r, page, summary

    def test_every_panel_type_is_drawn_from_its_queries(self):
        r, page, summary = self.run_renderer([
            panel(0, "timeseries", 'rate(x{instance=~"$instance"}[$__rate_interval])', "percent"),
            panel(1, "state-timeline", 'y{instance=~"${instance}"}', "percentunit"),
            panel(2, "stat", "z", "s", "{{device}}")], "--var", "instance=host:1")
        self.assertEqual(r.returncode, 0, r.stderr)
        ranges = [q for p, q in FakePrometheus.queries if p == "/api/v1/query_range"]
        self.assertEqual(len(ranges), 2)
        # Variables substituted, $__rate_interval = max(step + scrape, 4 x scrape) = 4s.
        self.assertEqual(ranges[0]["query"], 'rate(x{instance=~"host:1"}[4s])')
        self.assertEqual(ranges[1]["query"], 'y{instance=~"host:1"}')
        self.assertEqual(float(ranges[0]["start"]), END - 100)
        self.assertEqual(float(ranges[0]["step"]), 1.0)
        instant = [q for p, q in FakePrometheus.queries if p == "/api/v1/query"]
        self.assertEqual(float(instant[0]["time"]), END)
        self.assertEqual([p["series"] for p in summary["panels"]], [1, 1, 1])
        # The gap at the missing step splits the line in two; the legend uses legendFormat.
        self.assertEqual(page.count("<polyline"), 2)  # points 0-1, then 3-4
        self.assertEqual(page.count("<circle"), 0)
        self.assertIn(">0</span>", page)
        self.assertIn("<rect", page)
        self.assertIn('<div class="big">1.25 s</div>', page)
        self.assertIn("host:1", page)  # the variables chosen are printed

    def test_a_refused_query_is_named_and_fails_the_run(self):
        r, page, summary = self.run_renderer([panel(0, "timeseries", "broken(x)"),
                                              panel(1, "timeseries", "ok")])
        self.assertEqual(r.returncode, 1)
        self.assertIn("query failed: parse error: unknown function", page)
        self.assertEqual(summary["panels"][0]["error"], "parse error: unknown function")
        self.assertEqual(summary["panels"][1]["series"], 1)

    def test_units_and_ticks(self):
        self.assertEqual(rd.format_value(0.25, "percentunit"), "25%")
        self.assertEqual(rd.format_value(42.5, "percent"), "42.5%")
        self.assertEqual(rd.format_value(0.0025, "s"), "2.5 ms")
        self.assertEqual(rd.format_value(3e-6, "s"), "3 µs")
        self.assertEqual(rd.format_value(2048, "bytes"), "2 KiB")
        self.assertEqual(rd.format_value(583300, "ops"), "583 kops/s")
        self.assertEqual(rd.format_value(float("nan"), "short"), "-")
        self.assertEqual(rd.nice_ticks(0, 9), [0, 2, 4, 6, 8, 10])
        self.assertEqual(rd.nice_ticks(0, 8), [0, 2, 4, 6, 8])
        self.assertEqual(rd.nice_ticks(0, 0.003), [0, 0.001, 0.002, 0.003])
        self.assertEqual(rd.legend("{{a}}-{{b}}", {"a": "x", "b": "y"}), "x-y")
        self.assertEqual(rd.substitute('f{r=~"$reactor"}[$__rate_interval]', {}, "4s"),
                         'f{r=~".*"}[4s]')


if __name__ == "__main__":
    unittest.main()
