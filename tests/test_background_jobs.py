"""tests/_background.py: the subprocess tests run beside the suite give the same verdicts."""

from __future__ import annotations

import sys

import pytest
from _background import BackgroundJobs

PRINT_ENV = "import os, sys; print(os.environ.get('BG_A'), os.environ.get('BG_B')); sys.exit(3)"


def test_jobs_run_in_order_with_their_environment_and_folder(monkeypatch):
    monkeypatch.setenv("BG_B", "removed")
    jobs = BackgroundJobs({
        "a": {"argv": [sys.executable, "-c", PRINT_ENV], "env": {"BG_A": "{tmp}/x",
                                                                 "BG_B": None}},
        "b": {"argv": [sys.executable, "{tmp}/b.py", "{tmp}"],
              "files": {"b.py": "import sys; print(sys.argv[1])"}},
    })
    try:
        a, b = jobs.result("a"), jobs.result("b")
    finally:
        jobs.close()
    value, removed = a.stdout.split()
    assert a.returncode == 3 and value.endswith("/x") and "background-test-" in value
    assert removed == "None"
    assert b.returncode == 0 and "background-test-" in b.stdout


def test_a_job_past_its_timeout_is_killed_and_its_test_fails_in_one_line():
    jobs = BackgroundJobs({"slow": {"argv": [sys.executable, "-c", "import time; "
                                             "time.sleep(60)"], "timeout": 0.5}})
    try:
        with pytest.raises(RuntimeError, match=r"did not end within 0.5 s"):
            jobs.result("slow")
    finally:
        jobs.close()
