#!/usr/bin/env python3
"""check_dashboards.py against a fake Prometheus that is still starting: its first answers are
the plain-text "503 Service Unavailable" a real one serves until its storage is open (CI once
failed on that body: it is not JSON). The checker must wait them out, and still report a
refused query (JSON error body) as a failure rather than a start-up."""
import http.server
import importlib.util
import json
import os
import threading
import unittest
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "check_dashboards.py")
spec = importlib.util.spec_from_file_location("check_dashboards", SCRIPT)
cd = importlib.util.module_from_spec(spec)
spec.loader.exec_module(cd)


class StartingPrometheus(http.server.BaseHTTPRequestHandler):
    not_ready_answers = 0  # how many requests still get the start-up 503
    served_503 = 0

    def do_GET(self):
        cls = StartingPrometheus
        if cls.not_ready_answers > 0:
            cls.not_ready_answers -= 1
            cls.served_503 += 1
            self.send_response(503)
            self.send_header("Content-Type", "text/plain")
            self.end_headers()
            self.wfile.write(b"Service Unavailable")
            return
        if "broken(" in urllib.parse.unquote(self.path):
            body, status = {"status": "error", "error": "parse error"}, 400
        else:  # two samples of everything: what wait_for_samples waits for
            body, status = {"status": "success", "data": {"resultType": "vector", "result": [
                {"metric": {}, "value": [0, "2"]}]}}, 200
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


class CheckDashboardsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), StartingPrometheus)
        threading.Thread(target=cls.server.serve_forever, daemon=True).start()
        cls.url = f"http://127.0.0.1:{cls.server.server_address[1]}"

    @classmethod
    def tearDownClass(cls):
        cls.server.shutdown()
        cls.server.server_close()

    def test_waits_out_the_start_up_503(self):
        StartingPrometheus.not_ready_answers, StartingPrometheus.served_503 = 3, 0
        cd.wait_for_samples(self.url, deadline_s=30)
        self.assertEqual(StartingPrometheus.served_503, 3)

    def test_start_up_503_is_an_os_error_naming_the_status(self):
        StartingPrometheus.not_ready_answers = 1
        with self.assertRaisesRegex(OSError, "HTTP 503, not JSON: b'Service Unavailable'"):
            cd.get(self.url, "/api/v1/query", query="up")

    def test_refused_query_is_a_failure_not_a_start_up(self):
        StartingPrometheus.not_ready_answers = 0
        failures = []
        self.assertIsNone(cd.query(self.url, "broken(up)", "panel 1", failures))
        self.assertEqual(len(failures), 1)
        self.assertIn("parse error", failures[0])


if __name__ == "__main__":
    unittest.main()
