#!/usr/bin/env python3
"""Canned Pollux metrics for pollux-top's end-to-end test.

Serves GET /metrics on 127.0.0.1 at a free port, which it writes to the file named by argv[1].
Counters grow with each request so that two scrapes give rates. Stops by itself after 60 s.
"""
import http.server
import os
import sys
import time

TEMPLATE = """\
# HELP pollux_reactor_busy_seconds_total Time the reactor spent in busy iterations
# TYPE pollux_reactor_busy_seconds_total counter
pollux_reactor_busy_seconds_total{{reactor="0",core="0"}} {busy0}
pollux_reactor_idle_seconds_total{{reactor="0",core="0"}} {idle0}
pollux_reactor_iterations_total{{reactor="0",core="0"}} {iters}
pollux_reactor_threads{{reactor="0",core="0"}} 2
pollux_reactor_busy_seconds_total{{reactor="1",core="3"}} {busy1}
pollux_reactor_idle_seconds_total{{reactor="1",core="3"}} {idle1}
pollux_reactor_iterations_total{{reactor="1",core="3"}} {iters}
pollux_reactor_threads{{reactor="1",core="3"}} 1
pollux_thread_busy_seconds_total{{reactor="0",thread="app"}} {busy0}
pollux_thread_idle_seconds_total{{reactor="0",thread="app"}} {idle0}
pollux_thread_messages_total{{reactor="0",thread="app"}} {iters}
pollux_thread_info{{reactor="0",thread="app",cpumask="0x9"}} 1
pollux_process_info{{program="canned"}} 1
process_start_time_seconds 1764000000
pollux_poller_runs_total{{reactor="0",thread="app",poller="nvme_poll"}} {iters}
pollux_poller_busy_runs_total{{reactor="0",thread="app",poller="nvme_poll"}} {half}
pollux_poller_busy_seconds_total{{reactor="0",thread="app",poller="nvme_poll"}} {busy0}
pollux_poller_period_seconds{{reactor="0",thread="app",poller="nvme_poll"}} 0
pollux_poller_paused{{reactor="0",thread="app",poller="nvme_poll"}} 0
pollux_poller_runs_total{{reactor="0",thread="app",poller="hotplug"}} {tens}
pollux_poller_busy_runs_total{{reactor="0",thread="app",poller="hotplug"}} 0
pollux_poller_busy_seconds_total{{reactor="0",thread="app",poller="hotplug"}} 0
pollux_poller_period_seconds{{reactor="0",thread="app",poller="hotplug"}} 0.0005
pollux_poller_paused{{reactor="0",thread="app",poller="hotplug"}} 0
pollux_poller_runs_total{{reactor="0",thread="app",poller="stats"}} 3
pollux_poller_period_seconds{{reactor="0",thread="app",poller="stats"}} 1
pollux_poller_paused{{reactor="0",thread="app",poller="stats"}} 1
pollux_scenario_io_latency_seconds_bucket{{scenario="s",le="+Inf"}} 3
this line is malformed
"""


class Handler(http.server.BaseHTTPRequestHandler):
    scrapes = 0

    def do_GET(self):
        if self.path == "/other":  # an exporter without event-framework metrics
            body = b"# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total 1.5\n"
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        if self.path != "/metrics":
            self.send_error(404)
            return
        Handler.scrapes += 1
        n = Handler.scrapes
        body = TEMPLATE.format(busy0=0.25 * n, idle0=0.75 * n, busy1=0.5 * n, idle1=0.5 * n,
                               iters=1000 * n, half=500 * n, tens=10 * n).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def main():
    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    server.timeout = 0.5
    with open(sys.argv[1] + ".tmp", "w") as f:
        f.write(str(server.server_address[1]))
    os.rename(sys.argv[1] + ".tmp", sys.argv[1])  # The port file appears whole.
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        server.handle_request()


if __name__ == "__main__":
    main()
