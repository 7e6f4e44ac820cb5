"""Each skip of the README's test command says why in one line, and what to do about it: the live
tests name the server they need, how to start it and the variable to set."""

import os
import re
import subprocess
import sys

from conftest import ROOT


def test_each_live_skip_says_which_server_to_start_and_the_variable_to_set():
    env = {k: v for k, v in os.environ.items() if not k.startswith("LIVE_")}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0", "tests/live"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:]
    skipped = [line for line in done.stdout.splitlines() if line.startswith("SKIPPED [")]
    assert skipped, done.stdout[-2000:]
    for line in skipped:
        assert re.search(r"no [\w-]+ is running: start it \(.*tests/live/serve_\w+\.sh --background\), then set "
                         r"LIVE_\w+_URL=http://127\.0\.0\.1:\d+/v1$", line), line
    total = int(re.search(r"(\d+) skipped", done.stdout)[1])
    assert sum(int(re.match(r"SKIPPED \[(\d+)\]", line)[1]) for line in skipped) == total
