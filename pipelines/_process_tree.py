"""Run a command as a user would and sample its process tree's memory (``genotype_pca.py``).

A helper module of the pipeline ``genotype_pca.py`` (imported from this folder): the command's
wall time from launch to exit, its output, and the peak RSS of every process of its tree,
sampled with psutil, sorted into the main process and Dask's worker processes.
"""

from __future__ import annotations

import subprocess
import threading
import time
from pathlib import Path
from typing import Any

GNU_TIME = Path("/usr/bin/time")


class TreeSampler(threading.Thread):
    """Sample the RSS of a process and all its descendants every ``interval`` seconds."""

    def __init__(self, pid: int, interval: float) -> None:
        super().__init__(daemon=True)
        self.pid = pid
        self.interval = interval
        self.peak: dict[int, int] = {}
        self.cmdline: dict[int, str] = {}
        self.total_peak = 0
        self._stop_event = threading.Event()

    def run(self) -> None:
        import psutil

        try:
            root = psutil.Process(self.pid)
        except psutil.NoSuchProcess:
            return
        while not self._stop_event.is_set():
            try:
                procs = [root, *root.children(recursive=True)]
            except psutil.NoSuchProcess:
                break
            total = 0
            for p in procs:
                try:
                    rss = p.memory_info().rss
                    # a child of /usr/bin/time seen between fork and exec still shows the
                    # time command line: read it again until it has its own
                    if self.cmdline.get(p.pid, str(GNU_TIME)).startswith(str(GNU_TIME)):
                        self.cmdline[p.pid] = " ".join(p.cmdline())[:300]
                except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                    continue
                total += rss
                self.peak[p.pid] = max(self.peak.get(p.pid, 0), rss)
            self.total_peak = max(self.total_peak, total)
            self._stop_event.wait(self.interval)

    def stop(self) -> None:
        self._stop_event.set()
        self.join()

    def summary(self) -> dict[str, Any]:
        """Peak RSS in MB by role: the main process, each worker, helpers (ignored)."""
        main, workers = 0.0, []
        for pid, peak in self.peak.items():
            cmd = self.cmdline.get(pid, "")
            mb = peak / 2**20
            if "resource_tracker" in cmd or cmd.startswith(str(GNU_TIME)):
                continue
            if "multiprocessing" in cmd and ("spawn_main" in cmd or "forkserver" in cmd):
                workers.append(mb)
            else:
                main = max(main, mb)
        return {"main_mb": main, "workers_mb": sorted(workers, reverse=True),
                "worker_max_mb": max(workers) if workers else None,
                "tree_total_mb": self.total_peak / 2**20}


def run_command(cmd: list[str], *, cfg: dict[str, Any], gnu_time: bool = False,
                env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run ``cmd`` to its end; wall time, stdout, the process tree's peak RSS."""
    full = [str(GNU_TIME), "-v", *cmd] if gnu_time and GNU_TIME.exists() else list(cmd)
    t0 = time.perf_counter()
    proc = subprocess.Popen(full, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env)
    sampler = TreeSampler(proc.pid, cfg["sample_interval_s"])
    sampler.start()
    try:
        out, err = proc.communicate(timeout=cfg["timeout_s"])
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        err += f"\n(timeout after {cfg['timeout_s']} s)"
    wall = time.perf_counter() - t0
    sampler.stop()
    result = {"cmd": cmd, "wall_s": wall, "returncode": proc.returncode,
              "memory": sampler.summary(), "stdout": out[-4000:], "stderr": err[-4000:]}
    if full[0] == str(GNU_TIME):
        for line in err.splitlines():
            if "Maximum resident set size" in line:
                result["memory"]["time_max_rss_mb"] = int(line.split(":")[1]) / 1024
    return result


def check_ok(run: dict[str, Any], what: str) -> None:
    if run["returncode"] != 0:
        raise RuntimeError(f"{what} failed (exit {run['returncode']}): "
                           f"{' '.join(map(str, run['cmd']))}\n{run['stderr'][-2000:]}")
