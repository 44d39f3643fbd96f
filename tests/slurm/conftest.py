"""A real one-node SLURM for the tests of this folder: ``munged``, ``slurmctld`` and ``slurmd``.

The session fixture ``slurm`` starts a SLURM of its own, as root: a fresh MUNGE key and
socket, a ``slurm.conf`` with free ports, its state, spool and logs, all in one temporary
folder. It never uses, nor stops, a ``munged`` or a SLURM already on the machine (a system
one, or another test run's): it stops exactly the processes it started, and removes its
folder. The client commands (``sbatch``, ``squeue``, ``scancel``, ``scontrol``, and
dask-jobqueue's calls of them) find it through ``SLURM_CONF``, set for the session.

The suite runs with ``pytest -n 2 --dist loadfile``, which keeps a file on one xdist worker:
each xdist worker that runs a file of this folder starts its own SLURM (at most two per run;
they do not clash: each has its own ports, socket and folders).

Where SLURM cannot be started (not root, the Debian packages ``slurm-wlm`` and ``munge``
not installed) the tests skip with one reason; with ``CI=true`` they fail instead.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

#: Seconds the node may take to be ``idle`` once the daemons started (seconds normally).
START_TIMEOUT = 60
#: Seconds a daemon may take to stop on SIGTERM before it is killed.
STOP_TIMEOUT = 15
#: Seconds the jobs left at the end may take to leave the queue once cancelled.
CANCEL_TIMEOUT = 30

#: The programs the fixture runs.
PROGRAMS = ("munged", "slurmctld", "slurmd", "sinfo", "sbatch", "squeue", "scancel", "scontrol")
#: The one partition, the default (named as docs/hpc.md's ``queue="normal"``): more
#: single-core jobs than cores run at once.
PARTITION = "normal"

_INSTALL = "apt-get install slurm-wlm munge"


def _which(program: str) -> str | None:
    """The path of ``program``: on PATH, or in the sbin folders (the daemons' place, which
    a user's PATH may lack)."""
    path = os.pathsep.join([os.environ.get("PATH", os.defpath), "/usr/sbin", "/sbin"])
    return shutil.which(program, path=path)


def slurm_unavailable() -> str | None:
    """Return why a SLURM cannot be started here (the one skip reason), or None."""
    missing = [p for p in PROGRAMS if _which(p) is None]
    if missing:
        return (f"slurm-wlm and munge are not installed ({', '.join(missing)} not found): "
                f"{_INSTALL}, as root")
    if os.geteuid() != 0:
        return "the SLURM tests start munged, slurmctld and slurmd, which needs root"
    return None


def in_ci() -> bool:
    """Whether this is a CI run (``CI=true``), where the SLURM tests must not skip."""
    return os.environ.get("CI", "").lower() == "true"


@dataclass
class Slurm:
    """The running one-node SLURM: its configuration, folder and logs."""

    #: The temporary folder that holds everything (removed at the end).
    root: Path
    #: ``slurm.conf``; ``SLURM_CONF`` names it for the session.
    conf: Path
    #: The node's name (the host name) and its CPUs.
    node: str
    cpus: int
    partition: str = PARTITION
    #: The daemons' logs, by program.
    logs: dict[str, Path] = field(default_factory=dict)

    @property
    def env(self) -> dict[str, str]:
        """An environment for a client command of this SLURM (a subprocess's ``env``)."""
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def run(self, *argv: str, timeout: float = 30) -> str:
        """Run a client command (``squeue``, ``scancel``, ...) and return its stdout."""
        done = subprocess.run(argv, env=self.env, capture_output=True, text=True,
                              timeout=timeout, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} exited with {done.returncode}: "
                               f"{done.stderr.strip()} (logs in {self.root / 'log'})")
        return done.stdout

    def jobs(self) -> dict[str, str]:
        """Return the jobs in the queue: job id -> state (``RUNNING``, ``PENDING``, ...)."""
        out = self.run("squeue", "--noheader", "--format=%i %T")
        return dict(line.split() for line in out.splitlines() if line.strip())

    def job_state(self, job: str) -> str:
        """Return a job's state (``RUNNING``, ``COMPLETED``, ``TIMEOUT``, ...; an ended job
        is known for ``MinJobAge``, 300 s)."""
        out = self.run("scontrol", "show", "job", job)
        return out.split("JobState=", 1)[1].split()[0]

    def node_state(self) -> str:
        """Return the node's state as ``sinfo`` gives it (``idle``, ``mix``, ``down*``, ...)."""
        return self.run("sinfo", "--noheader", "--Node", "--format=%t").strip()

    def dask_cluster(self, folder: Path, *, walltime: str = "00:10:00", **kwargs: Any) -> Any:
        """A dask-jobqueue ``SLURMCluster`` of one-core, one-worker jobs on this SLURM, its
        jobs' logs in ``folder / "logs"`` and their working folder ``folder``; the
        scheduler (in this process) and the workers meet on the loopback."""
        from dask_jobqueue import SLURMCluster

        return SLURMCluster(
            cores=1, processes=1, memory="1GB", walltime=walltime, queue=self.partition,
            python=sys.executable, log_directory=str(folder / "logs"),
            job_extra_directives=[f"--chdir={folder}"],
            scheduler_options={"host": "127.0.0.1", "dashboard_address": "127.0.0.1:0"},
            **kwargs)

    def wait_for(self, condition: Callable[[], object], what: str, timeout: float) -> None:
        """Poll ``condition()`` every 0.1 s for at most ``timeout`` s; else fail the test in
        one line naming ``what`` and the logs."""
        deadline = time.monotonic() + timeout
        while not condition():
            if time.monotonic() > deadline:
                try:
                    queue = str(self.jobs())
                except (RuntimeError, subprocess.TimeoutExpired) as err:
                    queue = str(err)
                pytest.fail(f"SLURM: {what} not within {timeout:g} s (logs in "
                            f"{self.root / 'log'}; queue: {queue})", pytrace=False)
            time.sleep(0.1)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _memory_mb() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) // 1024
    raise RuntimeError("no MemTotal in /proc/meminfo")


def write_config(root: Path, *, node: str, cpus: int, memory_mb: int) -> Path:
    """Write a one-node ``slurm.conf`` under ``root`` (with free ports) and return its path.

    No accounting, no cgroups: processes are tracked by their parent (linuxproc), tasks
    are not bound, cores are the consumable (memory is not), and the partition lets up
    to 8 jobs share a core (``OverSubscribe=FORCE:8``), so more one-core jobs than cores
    run at once.
    """
    lines = [
        "ClusterName=daskstraggle-test",
        f"SlurmctldHost={node}(127.0.0.1)",
        f"SlurmctldPort={_free_port()}",
        f"SlurmdPort={_free_port()}",
        "SlurmUser=root",
        "SlurmdUser=root",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        f"AuthInfo=socket={root / 'munge.socket'}",
        f"StateSaveLocation={root / 'state'}",
        f"SlurmdSpoolDir={root / 'spool'}",
        f"SlurmctldPidFile={root / 'slurmctld.pid'}",
        f"SlurmdPidFile={root / 'slurmd.pid'}",
        "MailProg=/bin/true",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core",
        "SchedulerType=sched/backfill",
        "ReturnToService=2",
        "AccountingStorageType=accounting_storage/none",
        "JobAcctGatherType=jobacct_gather/none",
        "MpiDefault=none",
        # a job cancelled or at its walltime is killed 5 s after its SIGTERM, not 30 s
        "KillWait=5",
        f"NodeName={node} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory={memory_mb} State=UNKNOWN",
        f"PartitionName={PARTITION} Nodes={node} Default=YES MaxTime=INFINITE State=UP "
        "OverSubscribe=FORCE:8",
    ]
    for sub in ("state", "spool", "log", "jobs"):
        (root / sub).mkdir()
    conf = root / "slurm.conf"
    conf.write_text("\n".join(lines) + "\n")
    return conf


class _Daemons:
    """The processes the fixture started, stopped in reverse order."""

    def __init__(self) -> None:
        self.procs: list[tuple[str, subprocess.Popen[bytes]]] = []

    def start(self, name: str, argv: list[str], log: Path) -> subprocess.Popen[bytes]:
        with open(log, "ab") as out:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out,
                                    stderr=subprocess.STDOUT, start_new_session=True)
        self.procs.append((name, proc))
        return proc

    def check_alive(self) -> None:
        for name, proc in self.procs:
            if proc.poll() is not None:
                raise _DaemonDied(name, proc.returncode)

    def stop(self) -> None:
        for _, proc in reversed(self.procs):
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=STOP_TIMEOUT)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=STOP_TIMEOUT)
        self.procs.clear()


class _DaemonDied(Exception):
    def __init__(self, name: str, code: int | None) -> None:
        super().__init__(name, code)
        self.name, self.code = name, code


def _start(root: Path, daemons: _Daemons) -> Slurm:
    node = socket.gethostname().split(".")[0]
    cpus = os.cpu_count() or 1
    conf = write_config(root, node=node, cpus=cpus, memory_mb=_memory_mb())
    slurm = Slurm(root=root, conf=conf, node=node, cpus=cpus)
    logs = slurm.logs = {p: root / "log" / f"{p}.log" for p in ("munged", "slurmctld", "slurmd")}

    def fail(what: str, log: Path) -> None:
        pytest.fail(f"SLURM did not start: {what}; see {log}", pytrace=False)

    # MUNGE: a key of our own (128 random bytes, mode 0600, as mungekey makes it)
    key = root / "munge.key"
    fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(os.urandom(128))
    munge_socket = root / "munge.socket"
    daemons.start("munged", [
        _which("munged"), "--foreground", "--force", f"--socket={munge_socket}",
        f"--key-file={key}",
        f"--pid-file={root / 'munged.pid'}", f"--seed-file={root / 'munged.seed'}",
    ], logs["munged"])
    deadline = time.monotonic() + START_TIMEOUT
    while not munge_socket.exists():
        try:
            daemons.check_alive()
        except _DaemonDied as died:
            fail(f"munged exited with {died.code}", logs["munged"])
        if time.monotonic() > deadline:
            fail(f"munged made no socket within {START_TIMEOUT} s", logs["munged"])
        time.sleep(0.05)

    # in the foreground (-D) each logs to its stdout, which goes to its log file
    daemons.start("slurmctld", [_which("slurmctld"), "-D", "-f", str(conf)], logs["slurmctld"])
    daemons.start("slurmd", [_which("slurmd"), "-D", "-f", str(conf), "-N", node], logs["slurmd"])

    last = ""
    deadline = time.monotonic() + START_TIMEOUT
    while last != "idle":
        try:
            daemons.check_alive()
        except _DaemonDied as died:
            fail(f"{died.name} exited with {died.code}", logs[died.name])
        if time.monotonic() > deadline:
            fail(f"the node was not idle within {START_TIMEOUT} s (sinfo: {last!r})",
                 logs["slurmctld"])
        try:
            last = slurm.node_state()
        except (RuntimeError, subprocess.TimeoutExpired) as err:  # slurmctld not up yet
            last = str(err)
        if last != "idle":
            time.sleep(0.1)
    return slurm


def _cancel_all(slurm: Slurm) -> None:
    """Cancel every job left in the queue (this SLURM's only: its SLURM_CONF) and wait,
    bounded, for the queue to empty, so that slurmd stops with no job running."""
    try:
        left = slurm.jobs()
        if left:
            slurm.run("scancel", *left)
        deadline = time.monotonic() + CANCEL_TIMEOUT
        while slurm.jobs() and time.monotonic() < deadline:
            time.sleep(0.1)
    except (RuntimeError, subprocess.TimeoutExpired):
        pass  # the daemons are stopped next anyway


@pytest.fixture(scope="session")
def slurm(request: pytest.FixtureRequest) -> Iterator[Slurm]:
    """A one-node SLURM started for the session (see this module); ``SLURM_CONF`` names
    it while the session runs. Skips where it cannot start (fails with ``CI=true``). Its
    folder is removed at the end, unless a test failed: the messages name its logs."""
    reason = slurm_unavailable()
    if reason is not None:
        if in_ci():
            pytest.fail(f"CI=true and SLURM cannot be started: {reason}", pytrace=False)
        pytest.skip(reason)
    # a short path: the MUNGE socket's must fit in 108 bytes
    root = Path(tempfile.mkdtemp(prefix="daskstraggle-slurm-", dir="/tmp"))
    os.chmod(root, 0o755)  # the MUNGE socket is reached by every user's jobs
    daemons = _Daemons()
    saved = os.environ.get("SLURM_CONF")
    slurm = None
    try:
        slurm = _start(root, daemons)
        os.environ["SLURM_CONF"] = str(slurm.conf)
        yield slurm
    finally:
        if slurm is not None:
            _cancel_all(slurm)
        daemons.stop()
        if saved is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = saved
        # a failed start, or a failed test, keeps the folder: the messages name its logs
        if slurm is not None and not request.session.testsfailed:
            shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def slurm_reason() -> str | None:
    """Why SLURM cannot be started here (the tests' one skip reason), or None."""
    return slurm_unavailable()
