#!/usr/bin/env python3
"""tools/chaos-campaign's local mode against a fake pollux-scenario: the summary, failing seeds
with their replay commands, campaign.json, and --replay-every, which must fail a seed whose
second run is not the first (and only the seeds it replays)."""
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
CAMPAIGN = os.path.join(HERE, "chaos-campaign")

# Writes report.json as the runner does. FAKE_WOBBLY: seeds whose trace differs run to run;
# FAKE_FAILING: seeds that fail (exit 1, a FAILED: line); FAKE_SILENT: seeds that write no report.
FAKE_RUNNER = textwrap.dedent("""\
    #!/usr/bin/env python3
    import json, os, sys, uuid
    a = sys.argv[1:]
    seed, report = int(a[a.index("--seed") + 1]), a[a.index("--report") + 1]
    def seeds(name):
        return {int(s) for s in os.environ.get(name, "").split(",") if s}
    failing = seed in seeds("FAKE_FAILING")
    trace = uuid.uuid4().hex[:16] if seed in seeds("FAKE_WOBBLY") else f"{seed * 7919:016x}"
    if seed not in seeds("FAKE_SILENT"):
        os.makedirs(report, exist_ok=True)
        with open(os.path.join(report, "report.json"), "w") as f:
            json.dump({"seed": seed, "trace_hash": trace, "trace_records": 100 + seed,
                       "passed": not failing, "ios": 1000 + seed}, f)
    if failing:
        print("FAILED: oracle violations: 1 (= 0)")
        sys.exit(1)
    """)


class ChaosCampaign(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp()
        self.runner = os.path.join(self.dir, "pollux-scenario")
        with open(self.runner, "w") as f:
            f.write(FAKE_RUNNER)
        os.chmod(self.runner, 0o755)
        self.out = os.path.join(self.dir, "out")

    def campaign(self, *args, **env):
        e = dict(os.environ, POLLUX_SCENARIO=self.runner, **env)
        r = subprocess.run([sys.executable, CAMPAIGN, *args, "--jobs", "2", "--out", self.out],
                           capture_output=True, text=True, env=e)
        return r

    def results(self):
        with open(os.path.join(self.out, "campaign.json")) as f:
            return {r["seed"]: r for r in json.load(f)["results"]}

    def test_deterministic_seeds_pass_their_replays(self):
        r = self.campaign("1-6", "--replay-every", "2")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("6 run, 6 passed, 0 failed", r.stdout)
        self.assertIn("3 replayed", r.stdout)
        res = self.results()
        self.assertEqual([s for s in res if res[s]["replayed"]], [2, 4, 6])
        self.assertEqual(os.listdir(self.out), ["campaign.json"])  # passing seeds keep nothing

    def test_a_replay_that_diverges_fails_its_seed(self):
        r = self.campaign("1-6", "--replay-every", "2", FAKE_WOBBLY="3,4")
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        res = self.results()
        self.assertFalse(res[4]["passed"])
        self.assertIn("replay diverged: trace_hash", res[4]["reason"])
        self.assertNotIn("trace_records", res[4]["reason"])  # only what differs is named
        self.assertIn("chaos --seed 4 ", res[4]["replay"])
        self.assertTrue(res[3]["passed"])  # not replayed: nothing to compare
        self.assertIn("seed 4: replay diverged", r.stdout)
        self.assertTrue(os.path.isdir(os.path.join(self.out, "seed4-replay")))  # both kept

    def test_a_failing_seed_keeps_its_reason_and_replays_the_same(self):
        r = self.campaign("1-4", "--replay-every", "1", FAKE_FAILING="2")
        self.assertEqual(r.returncode, 1)
        res = self.results()
        self.assertEqual(res[2]["reason"], "FAILED: oracle violations: 1 (= 0)")
        self.assertEqual([s for s in res if not res[s]["passed"]], [2])

    def test_a_run_without_a_report_cannot_be_compared(self):
        r = self.campaign("1-2", "--replay-every", "1", FAKE_SILENT="1")
        self.assertEqual(r.returncode, 1)
        self.assertIn("a run wrote no report", self.results()[1]["reason"])

    def test_without_the_flag_nothing_is_replayed(self):
        r = self.campaign("1-4", FAKE_WOBBLY="1,2,3,4")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertNotIn("replayed", r.stdout)

    def test_bad_replay_flags_are_usage_errors(self):
        for args in (["--replay-every", "-1"], ["--replay-every", "2", "--bazel"]):
            r = self.campaign("1-4", *args)
            self.assertEqual(r.returncode, 2, args)
            self.assertIn("--replay-every", r.stderr)


if __name__ == "__main__":
    unittest.main()
