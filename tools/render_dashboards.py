#!/usr/bin/env python3
"""Pollux's Grafana dashboards without Grafana: every panel evaluated against a Prometheus,
drawn as static HTML (inline SVG, no script), one page per dashboard plus an index.

  tools/render_dashboards.py --prometheus http://127.0.0.1:9090 --out /tmp/dash \\
      [--range auto|15m] [--end UNIX_TIME] [--var instance=127.0.0.1:9464] [--png] dashboards/*.json

--range auto (the default) starts at Prometheus' first sample of `up` in the last 6 hours, so
a finished run fills the page. Template variables are All (`.*`) unless set with --var; `$__rate_interval` is Grafana's
max(step + scrape interval, 4 x scrape interval) (--scrape-interval, default 1s). Panels:
timeseries (lines, axes with units), state-timeline (a band per series coloured by value),
stat and gauge (the last value of each series). --png also writes DASHBOARD.png with headless
Chromium (tools/setup.sh installs it). Writes summary.json: per dashboard and panel, how many
series came back (0: no data) and any query error. Exit status 1 if a query failed.
"""
import argparse
import html
import json
import math
import os
import re
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

COLOURS = ["#7eb26d", "#eab839", "#6ed0e0", "#ef843c", "#e24d42", "#1f78c1", "#ba43a9",
           "#705da0", "#508642", "#cca300", "#447ebc", "#c15c17"]
ROW_PX = 30  # Grafana's grid: 24 columns, rows of 30 px
VAR_RE = re.compile(r"\$(?:\{(\w+)(?::\w+)?\}|(\w+))")


def parse_duration(text):
    m = re.fullmatch(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)?", text)
    if not m:
        raise argparse.ArgumentTypeError(f"expected a duration like 30s, 15m or 2h, got {text!r}")
    scale = {"ms": 1e-3, "s": 1, "m": 60, "h": 3600, "d": 86400}[m.group(2) or "s"]
    return float(m.group(1)) * scale


def prom_get(url, path, **params):
    q = urllib.parse.urlencode(params)
    try:
        with urllib.request.urlopen(f"{url}{path}?{q}", timeout=30) as r:
            body = json.load(r)
    except urllib.error.HTTPError as e:  # a refused query: Prometheus says why in the body
        body = json.load(e)
    if body.get("status") != "success":
        raise RuntimeError(body.get("error", str(body)))
    return body["data"]


def substitute(expr, variables, rate_interval):
    expr = expr.replace("${__rate_interval}", rate_interval).replace("$__rate_interval",
                                                                      rate_interval)

    def value(m):
        name = m.group(1) or m.group(2)
        if name.startswith("__"):
            return m.group(0)
        return variables.get(name, ".*")
    return VAR_RE.sub(value, expr)


def legend(fmt, labels):
    if not fmt:
        return "{" + ", ".join(f'{k}="{v}"' for k, v in sorted(labels.items())
                               if k != "__name__") + "}"
    return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: labels.get(m.group(1), ""), fmt)


# --- Units, as Grafana names them ----------------------------------------------------------

def si(value, unit, base=1000, prefixes=("", "k", "M", "G", "T", "P")):
    for i, p in enumerate(prefixes):
        if abs(value) < base ** (i + 1) or i == len(prefixes) - 1:
            v = value / base ** i
            return f"{v:.3g}{' ' if unit or p else ''}{p}{unit}".strip()
    return str(value)


def format_value(value, unit, decimals=None):
    if value is None or math.isnan(value):
        return "-"
    if math.isinf(value):
        return "∞" if value > 0 else "-∞"
    if unit == "percent":
        return f"{value:.3g}%"
    if unit == "percentunit":
        return f"{100 * value:.3g}%"
    if unit == "s":
        for scale, name in ((1, "s"), (1e-3, "ms"), (1e-6, "µs"), (1e-9, "ns")):
            if abs(value) >= scale or scale == 1e-9:
                return f"{value / scale:.3g} {name}" if value else "0 s"
    if unit == "bytes":
        return si(value, "B", 1024, ("", "Ki", "Mi", "Gi", "Ti"))
    if unit == "Bps":
        return si(value, "B/s")
    if unit in ("ops", "iops", "reqps"):
        return si(value, {"ops": "ops/s", "iops": "io/s", "reqps": "req/s"}[unit])
    if decimals is not None:
        return f"{value:.{decimals}f}"
    return si(value, "")


def nice_ticks(lo, hi, count=5):
    if hi <= lo:
        hi = lo + 1
    raw = (hi - lo) / count
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    first = math.floor(lo / step) * step
    ticks, v = [], first
    while not ticks or ticks[-1] < hi - step * 1e-9:  # the last tick at or above hi
        ticks.append(round(v, 12))
        v += step
    return ticks


# --- Drawing ---------------------------------------------------------------------------------

def svg_timeseries(series, unit, start, end, width, height):
    """series: [(name, [(t, v)...])] -> an SVG line chart with axes, ticks and units."""
    left, right, top, bottom = 64, 8, 8, 22
    w, h = width - left - right, height - top - bottom
    values = [v for _, pts in series for _, v in pts if math.isfinite(v)]
    lo, hi = (min(values + [0]), max(values + [0])) if values else (0, 1)
    ticks = nice_ticks(lo, hi if hi > lo else lo + 1)
    lo, hi = ticks[0], ticks[-1]

    def x(t):
        return left + (t - start) / (end - start) * w

    def y(v):
        return top + h - (v - lo) / (hi - lo) * h
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}">']
    for v in ticks:
        out.append(f'<line x1="{left}" x2="{left + w}" y1="{y(v):.1f}" y2="{y(v):.1f}" '
                   'stroke="#333"/>')
        out.append(f'<text x="{left - 4}" y="{y(v) + 4:.1f}" text-anchor="end" '
                   f'class="tick">{html.escape(format_value(v, unit))}</text>')
    span = end - start
    tstep = next(s for s in (5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 21600,
                             43200, 86400) if span / s <= 8)
    t = math.ceil(start / tstep) * tstep
    while t <= end:
        label = time.strftime("%H:%M:%S" if tstep < 60 else "%H:%M", time.localtime(t))
        out.append(f'<line x1="{x(t):.1f}" x2="{x(t):.1f}" y1="{top}" y2="{top + h}" '
                   'stroke="#2a2a2a"/>')
        out.append(f'<text x="{x(t):.1f}" y="{height - 6}" text-anchor="middle" '
                   f'class="tick">{label}</text>')
        t += tstep
    for i, (_, pts) in enumerate(series):
        colour = COLOURS[i % len(COLOURS)]
        runs, run = [], []
        for tt, v in pts:  # a gap (NaN or a missing step) breaks the line
            if math.isfinite(v):
                run.append(f"{x(tt):.1f},{y(v):.1f}")
            elif run:
                runs.append(run)
                run = []
        if run:
            runs.append(run)
        dash = ' stroke-dasharray="6 3"' if i >= len(COLOURS) else ""
        for r in runs:
            if len(r) == 1:
                cx, cy = r[0].split(",")
                out.append(f'<circle cx="{cx}" cy="{cy}" r="2" fill="{colour}"/>')
            else:
                out.append(f'<polyline fill="none" stroke="{colour}" stroke-width="1.5"{dash} '
                           f'points="{" ".join(r)}"/>')
    out.append("</svg>")
    return "".join(out)


def colour_scale(frac):
    """Green -> yellow -> red, as Grafana's continuous-GrYlRd."""
    frac = min(max(frac, 0.0), 1.0)
    if frac < 0.5:
        r, g = int(115 + 2 * frac * (234 - 115)), int(191 + 2 * frac * (184 - 191))
    else:
        r, g = int(234 + (2 * frac - 1) * (226 - 234)), int(184 + (2 * frac - 1) * (77 - 184))
    return f"rgb({r},{g},66)"


def svg_state_timeline(series, unit, start, end, width, height, vmin, vmax):
    left, top, bottom = 140, 4, 4
    w = width - left - 8
    rows = max(len(series), 1)
    rh = max(min((height - top - bottom) / rows, 28), 6)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" '
           f'height="{int(top + bottom + rh * rows)}">']
    for i, (name, pts) in enumerate(series):
        yy = top + i * rh
        if rh >= 9:  # too many rows for a label each: the tooltip names them
            out.append(f'<text x="{left - 6}" y="{yy + rh / 2 + 4:.1f}" text-anchor="end" '
                       f'class="tick">{html.escape(name[:22])}</text>')
        for j, (t, v) in enumerate(pts):
            if not math.isfinite(v):
                continue
            t2 = pts[j + 1][0] if j + 1 < len(pts) else end
            x1 = left + (t - start) / (end - start) * w
            x2 = left + (t2 - start) / (end - start) * w
            frac = (v - vmin) / (vmax - vmin) if vmax > vmin else 0
            out.append(f'<rect x="{x1:.1f}" y="{yy:.1f}" width="{max(x2 - x1, 0.5):.1f}" '
                       f'height="{rh * 0.9:.1f}" fill="{colour_scale(frac)}">'
                       f'<title>{html.escape(name)}: {html.escape(format_value(v, unit))}'
                       '</title></rect>')
    out.append("</svg>")
    return "".join(out)


# --- Panels ----------------------------------------------------------------------------------

def evaluate(panel, args, variables, start, end, step):
    """[(name, [(t, v)...])], or raises RuntimeError with Prometheus' reason."""
    rate_interval = f"{int(max(step + args.scrape_interval, 4 * args.scrape_interval))}s"
    series = []
    instant = panel["type"] in ("stat", "gauge")
    for target in panel.get("targets", []):
        expr = substitute(target["expr"], variables, rate_interval)
        if instant:
            data = prom_get(args.prometheus, "/api/v1/query", query=expr, time=end)
            for s in data["result"]:
                series.append((legend(target.get("legendFormat"), s["metric"]),
                               [(end, float(s["value"][1]))]))
        else:
            data = prom_get(args.prometheus, "/api/v1/query_range", query=expr, start=start,
                            end=end, step=step)
            for s in data["result"]:
                pts = [(float(t), float(v)) for t, v in s["values"]]
                filled, k = [], 0  # missing steps become gaps
                t = start
                while t <= end + 1e-9:
                    if k < len(pts) and abs(pts[k][0] - t) < step / 2:
                        filled.append(pts[k])
                        k += 1
                    else:
                        filled.append((t, float("nan")))
                    t += step
                series.append((legend(target.get("legendFormat"), s["metric"]), filled))
    return series


def render_panel(panel, series, error, start, end):
    unit = panel.get("fieldConfig", {}).get("defaults", {}).get("unit", "short")
    defaults = panel.get("fieldConfig", {}).get("defaults", {})
    g = panel.get("gridPos", {"x": 0, "y": 0, "w": 12, "h": 8})
    width, height = int(g["w"] / 24 * 1380), g["h"] * ROW_PX
    style = (f"grid-column:{g['x'] + 1}/span {g['w']};grid-row:{g['y'] + 1}/span {g['h']}")
    desc = html.escape(panel.get("description", ""))
    body = ""
    if error:
        body = f'<div class="err">query failed: {html.escape(error)}</div>'
    elif not series:
        body = '<div class="nodata">No data</div>'
    elif panel["type"] in ("stat", "gauge"):
        body = '<div class="stats">' + "".join(
            f'<div class="stat"><div class="big">'
            f'{html.escape(format_value(pts[-1][1], unit, defaults.get("decimals")))}</div>'
            f'<div class="name">{html.escape(name)}</div></div>' for name, pts in series) + "</div>"
    elif panel["type"] == "state-timeline":
        body = svg_state_timeline(series, unit, start, end, width - 16, height - 40,
                                  defaults.get("min", 0), defaults.get("max", 1))
    else:
        chart_h = height - 40 - 18 * min(len(series), 4)
        body = svg_timeseries(series, unit, start, end, width - 16, max(chart_h, 60))
        body += '<div class="legend">' + "".join(
            f'<span><i style="background:{COLOURS[i % len(COLOURS)]}"></i>'
            f'{html.escape(name)}</span>' for i, (name, _) in enumerate(series)) + "</div>"
    return (f'<div class="panel {panel["type"]}" style="{style}" title="{desc}">'
            f'<div class="title">{html.escape(panel.get("title", ""))}</div>{body}</div>')


CSS = """
body{background:#111217;color:#ccccdc;font:13px sans-serif;margin:0;padding:12px}
h1{font-size:18px;margin:0 0 4px} .sub{color:#8e8e8e;margin-bottom:10px}
.grid{display:grid;grid-template-columns:repeat(24,1fr);grid-auto-rows:30px;gap:6px;width:1380px}
.panel{background:#181b1f;border:1px solid #2c3235;border-radius:3px;padding:6px;overflow:hidden}
.title{font-weight:600;margin-bottom:4px}.tick{fill:#8e8e8e;font:10px sans-serif}
.legend span{margin-right:10px;white-space:nowrap;font-size:11px}
.legend i{display:inline-block;width:10px;height:3px;margin-right:4px;vertical-align:middle}
.nodata,.err{color:#8e8e8e;text-align:center;margin-top:20%}.err{color:#e24d42}
.stats{display:flex;flex-wrap:wrap;gap:12px}.big{font-size:26px;color:#73bf69}
.name{font-size:11px;color:#8e8e8e}
"""


def render_dashboard(path, args, variables, start, end, step):
    with open(path) as f:
        d = json.load(f)
    panels, summary, failed = [], [], False
    for p in sorted(d["panels"], key=lambda p: (p.get("gridPos", {}).get("y", 0),
                                                p.get("gridPos", {}).get("x", 0))):
        error = None
        try:
            series = evaluate(p, args, variables, start, end, step)
        except (RuntimeError, OSError) as e:
            series, error, failed = [], str(e), True
        summary.append({"id": p["id"], "title": p.get("title", ""), "type": p["type"],
                        "series": len(series), "error": error})
        panels.append(render_panel(p, series, error, start, end))
    when = (f"{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(start))} to "
            f"{time.strftime('%H:%M:%S', time.localtime(end))} (step {step:g} s)")
    chosen = ", ".join(f"{k}={v}" for k, v in variables.items()) or "every variable All"
    page = (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(d['title'])}"
            f"</title><style>{CSS}</style></head><body><h1>{html.escape(d['title'])}</h1>"
            f"<div class='sub'>{html.escape(when)} · {html.escape(args.prometheus)} · "
            f"{html.escape(chosen)} · <a href='index.html' style='color:#6e9fff'>all dashboards"
            f"</a></div><div class='grid'>{''.join(panels)}</div></body></html>")
    name = d.get("uid") or os.path.splitext(os.path.basename(path))[0]
    out = os.path.join(args.out, f"{name}.html")
    with open(out, "w") as f:
        f.write(page)
    rows = max((p.get("gridPos", {}).get("y", 0) + p.get("gridPos", {}).get("h", 8)
                for p in d["panels"]), default=8)
    return name, d["title"], out, summary, failed, 90 + rows * (ROW_PX + 6)


def screenshot(page, png, height):
    subprocess.run(["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                    "--force-device-scale-factor=1", f"--window-size=1410,{height}",
                    f"--screenshot={os.path.abspath(png)}", f"file://{os.path.abspath(page)}"],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prometheus", required=True, help="base URL, e.g. http://127.0.0.1:9090")
    ap.add_argument("--out", required=True, help="directory for the pages (created)")
    ap.add_argument("--range", default="auto",
                    help="how far back from --end: a duration (15m), or auto (default): from the "
                         "first sample of up in the last 6 h")
    ap.add_argument("--end", type=float, default=None, help="Unix time (default: now)")
    ap.add_argument("--step", type=parse_duration, default=None,
                    help="resolution (default: range / 300, at least 1 s)")
    ap.add_argument("--scrape-interval", type=parse_duration, default=1.0,
                    help="Prometheus' scrape interval, for $__rate_interval (default 1s)")
    ap.add_argument("--var", action="append", default=[], metavar="NAME=REGEX",
                    help="a template variable's value (default: All)")
    ap.add_argument("--png", action="store_true", help="also DASHBOARD.png (headless Chromium)")
    ap.add_argument("dashboards", nargs="+")
    args = ap.parse_args()
    variables = {}
    for v in args.var:
        if "=" not in v:
            ap.error(f"--var {v!r}: expected NAME=REGEX")
        k, val = v.split("=", 1)
        variables[k] = val
    end = args.end if args.end is not None else time.time()
    if args.range == "auto":
        try:
            first = prom_get(args.prometheus, "/api/v1/query", time=end,
                             query="min(min_over_time(timestamp(up)[6h:1s]))")["result"]
        except (RuntimeError, OSError) as e:
            sys.exit(f"render_dashboards: {args.prometheus}: {e}")
        if not first:
            sys.exit(f"render_dashboards: {args.prometheus} has no samples of up in the last 6 h")
        start = min(float(first[0]["value"][1]), end - 10)
    else:
        try:
            start = end - parse_duration(args.range)
        except argparse.ArgumentTypeError as e:
            ap.error(f"--range: {e}")
    step = args.step or max(1.0, round((end - start) / 300))
    os.makedirs(args.out, exist_ok=True)
    index, summaries, failed = [], {}, False
    for path in args.dashboards:
        name, title, page, summary, bad, height = render_dashboard(path, args, variables, start,
                                                                   end, step)
        failed |= bad
        summaries[name] = {"title": title, "page": os.path.basename(page), "panels": summary}
        empty = sum(1 for p in summary if p["series"] == 0)
        print(f"{page}: {len(summary)} panels, {empty} without data"
              + (", some queries FAILED" if bad else ""))
        index.append(f"<li><a href='{os.path.basename(page)}'>{html.escape(title)}</a> — "
                     f"{len(summary)} panels, {empty} without data</li>")
        if args.png:
            png = os.path.join(args.out, f"{name}.png")
            screenshot(page, png, height)
            summaries[name]["png"] = os.path.basename(png)
    with open(os.path.join(args.out, "index.html"), "w") as f:
        f.write(f"<!doctype html><html><head><meta charset='utf-8'><style>{CSS}</style></head>"
                f"<body><h1>Pollux dashboards</h1><ul>{''.join(index)}</ul></body></html>")
    with open(os.path.join(args.out, "summary.json"), "w") as f:
        json.dump(summaries, f, indent=1)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
