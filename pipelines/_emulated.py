"""An emulated multi-host Dask cluster on this machine's kernel networking (issue 46, item 1).

Each host (the scheduler, which the client shares, and every worker) runs in a network
namespace of its own, with one veth pair to a Linux bridge that lives in a further "switch"
namespace. Every name starts with a prefix unique to the instance (``ds<pid>-<n>-``), and
the root namespace is never touched: no interface, address, route or qdisc is added there,
and traffic flows only between the instance's own private addresses (a /24 of 10.231.0.0/16
that overlaps none of the root namespace's). Each link's bandwidth is capped with a token
bucket (``tc qdisc ... tbf``) in both directions: on the host's end (what it sends) and on
the switch's end (what it receives). There is no added delay (the kernel has no ``netem``):
a message's time comes from its bytes over the slowest link it crosses and from queueing.

The hosts run real processes: ``dask scheduler`` bound to its address, and one
``dask worker`` (with its nanny) per worker namespace, named after its link; a client is
run in the scheduler's namespace with :meth:`EmulatedCluster.run`. Everything is torn down
by what started it, in reverse order and bounded: the processes (SIGTERM, then SIGKILL),
then the namespaces (deleting one removes its veth and qdiscs). Needs root; where the
namespaces cannot be made, :func:`unavailable` gives the one reason. A helper module of
the pipelines, not one of them (the leading underscore keeps it out of the list that
``tests/test_pipelines_load.py`` runs with ``--quick``).

Example, as root::

    from _emulated import EmulatedCluster  # this folder, as the pipelines import it

    links = {"w0": "1gbit", "w1": "1gbit", "w2": "20mbit"}
    with EmulatedCluster(links, scheduler_link="1gbit") as cluster:
        done = cluster.run([sys.executable, "script.py", cluster.scheduler_address])
"""

from __future__ import annotations

import functools
import ipaddress
import itertools
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from daskstraggle.errors import InvalidParameterError
from daskstraggle.latency.modifiers import parse_bandwidth

#: The scheduler's port (free in its own namespace).
SCHEDULER_PORT = 8786
#: Seconds the scheduler and every worker may take to be up (seconds normally).
START_TIMEOUT = 60.0
#: Seconds the processes may take to stop on SIGTERM before they are killed.
STOP_TIMEOUT = 10.0
#: Seconds one ``ip`` or ``tc`` command may take.
COMMAND_TIMEOUT = 10.0
#: The range the hosts' /24 is taken from (the first /24 that meets none of the root
#: namespace's networks).
ADDRESS_RANGE = ipaddress.IPv4Network("10.231.0.0/16")
#: The scheduler's host name (its namespace, and the key of its address).
SCHEDULER = "sched"
#: The token bucket's queue: the longest a packet may wait before it is dropped.
DEFAULT_LATENCY = "50ms"
#: The smallest bucket, in bytes: two full Ethernet frames. A message passes a bucket's
#: worth at line rate on an idle link, which the simulator's links do not model: the
#: smaller the bucket, the truer the cap (a 64 KiB bucket let a 10 Mbit/s link pass a
#: 16 KB reply at once, where the simulator charged it 13 ms). tbf splits the veth's
#: larger GSO segments to pass them.
MIN_BURST = 2 * 1514
#: The bucket holds at least this many seconds of the rate (what a 1 Gbit/s link needs to
#: reach its rate: a bucket of one segment refills faster than the queue is served).
BURST_SECONDS = 0.002

_INSTALL = "apt-get install iproute2, as root"
_NAME = re.compile(r"[a-z][a-z0-9]{0,9}")
_REGISTERED = re.compile(r"Register worker addr: (\S+) name: (\S+)")
_instances = itertools.count()


class EmulationError(RuntimeError):
    """A step of the emulated cluster's setup failed (the message names the step)."""


def _terminated(signum: int, frame: Any) -> None:
    """SIGTERM while a cluster is up: leave through its ``__exit__`` (exit status 143)."""
    raise SystemExit(128 + signum)


def parse_rate(rate: str | float) -> float:
    """Return a link rate in bits per second.

    Parameters
    ----------
    rate : str or float
        A number of bits per second, or a tc rate string: a number and a unit among
        ``bit``, ``kbit``, ``mbit``, ``gbit``, ``tbit`` (SI), ``kibit``... (IEC) and the
        bytes-per-second ``bps``, ``kbps``, ``mbps``... (as tc reads them), case-insensitive,
        read by :func:`daskstraggle.latency.modifiers.parse_bandwidth` (which gives bytes
        per second, and refuses a string below 8 bit/s).

    Returns
    -------
    bits : float
        The rate in bits per second, positive.

    Raises
    ------
    ValueError
        If ``rate`` is not positive, or a string without one of those units (a bare
        number in a string is refused: tc would read it as bytes per second).

    Examples
    --------
    >>> parse_rate("20mbit"), parse_rate("1Gbit"), parse_rate("1mbps"), parse_rate(5e6)
    (20000000.0, 1000000000.0, 8000000.0, 5000000.0)
    """
    if isinstance(rate, bool) or not isinstance(rate, (str, int, float)):
        raise TypeError(f"The 'rate' of a link must be a tc rate string or bits per second. "
                        f"Got {type(rate).__name__} instead.")
    if isinstance(rate, str):
        try:  # the latency model's reading of a tc rate, in bytes per second
            return 8 * parse_bandwidth(rate, name="rate")
        except InvalidParameterError:
            raise ValueError(f"The 'rate' of a link must be a positive number and a tc unit "
                             f"(e.g. '20mbit', '1gbit', '10kbps'). Got {rate!r} instead."
                             ) from None
    if not 0 < rate < float("inf"):
        raise ValueError(f"The 'rate' of a link must be positive and finite. Got {rate!r} "
                         f"instead.")
    return float(rate)


def burst_bytes(bits: float) -> int:
    """Return the token bucket size, in bytes, for a link of ``bits`` per second.

    Parameters
    ----------
    bits : float
        The link's rate in bits per second.

    Returns
    -------
    burst : int
        :data:`BURST_SECONDS` of the rate, and at least :data:`MIN_BURST`.

    Examples
    --------
    >>> burst_bytes(20e6), burst_bytes(1e9)
    (5000, 250000)
    """
    return max(MIN_BURST, int(bits / 8 * BURST_SECONDS))


def pick_subnet(taken: Iterable[ipaddress.IPv4Network | ipaddress.IPv4Interface]
                ) -> ipaddress.IPv4Network:
    """Return the first /24 of :data:`ADDRESS_RANGE` that meets none of ``taken``.

    Parameters
    ----------
    taken : iterable of IPv4Network or IPv4Interface
        The networks in use (the root namespace's, :func:`root_networks`).

    Returns
    -------
    subnet : IPv4Network
        A /24 that overlaps none of them.

    Raises
    ------
    EmulationError
        If every /24 of the range is taken.

    Examples
    --------
    >>> import ipaddress
    >>> pick_subnet([ipaddress.IPv4Network("10.231.0.0/23")])
    IPv4Network('10.231.2.0/24')
    """
    networks = [t.network if isinstance(t, ipaddress.IPv4Interface) else t for t in taken]
    for subnet in ADDRESS_RANGE.subnets(new_prefix=24):
        if not any(subnet.overlaps(net) for net in networks):
            return subnet
    raise EmulationError(f"pick a subnet failed: every /24 of {ADDRESS_RANGE} is in use")


def plan_addresses(workers: Sequence[str], subnet: ipaddress.IPv4Network
                   ) -> dict[str, ipaddress.IPv4Interface]:
    """Return each host's address in ``subnet``: the scheduler's first, then the workers'.

    Parameters
    ----------
    workers : sequence of str
        The workers' names, in order.
    subnet : IPv4Network
        The hosts' network (a /24, :func:`pick_subnet`).

    Returns
    -------
    addresses : dict of str to IPv4Interface
        :data:`SCHEDULER` and each worker's name to its address with the prefix length.

    Raises
    ------
    EmulationError
        If ``subnet`` has fewer addresses than hosts.

    Examples
    --------
    >>> import ipaddress
    >>> plan = plan_addresses(["w0", "w1"], ipaddress.IPv4Network("10.231.0.0/24"))
    >>> {host: str(address) for host, address in plan.items()}
    {'sched': '10.231.0.1/24', 'w0': '10.231.0.2/24', 'w1': '10.231.0.3/24'}
    """
    hosts = [SCHEDULER, *workers]
    free = list(itertools.islice(subnet.hosts(), len(hosts)))
    if len(free) < len(hosts):
        raise EmulationError(f"plan the addresses failed: {subnet} has {len(free)} host "
                             f"addresses for {len(hosts)} hosts")
    return {host: ipaddress.IPv4Interface(f"{address}/{subnet.prefixlen}")
            for host, address in zip(hosts, free, strict=True)}


def root_networks() -> list[ipaddress.IPv4Interface]:
    """Return the IPv4 addresses of this (the root) namespace, read with ``ip -4 addr``.

    Returns
    -------
    addresses : list of IPv4Interface
        Each address with its prefix length.
    """
    out = _command(["ip", "-4", "-o", "addr", "show"], step="ip -4 addr").stdout
    return [ipaddress.IPv4Interface(m) for m in re.findall(r"\binet (\S+)", out)]


def _command(argv: Sequence[str], *, step: str) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` (bounded); raise :class:`EmulationError` naming ``step`` if it fails."""
    try:
        done = subprocess.run(list(argv), capture_output=True, text=True,
                              timeout=COMMAND_TIMEOUT, check=False)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise EmulationError(f"{step} failed: {err}") from err
    if done.returncode != 0:
        message = " ".join(done.stderr.split()) or f"exit status {done.returncode}"
        hint = " (root needed)" if os.geteuid() != 0 else ""
        raise EmulationError(f"{step} failed: {message}{hint}")
    return done


def check_environment() -> str | None:
    """Return why an emulated cluster cannot be made here, or None if it can.

    Tries, in order: root, the ``ip`` and ``tc`` programs, then a throw-away namespace
    holding a veth pair, a bridge and a ``tbf`` qdisc (deleted again).

    Returns
    -------
    reason : str or None
        One line saying what is missing and how to fix it, or None.

    See Also
    --------
    unavailable : The same, tried once per process.
    """
    if os.geteuid() != 0:
        return ("the emulated cluster creates network namespaces, veth pairs and tc qdiscs, "
                "which needs root")
    missing = [p for p in ("ip", "tc") if shutil.which(p) is None]
    if missing:
        return f"iproute2 is not installed ({', '.join(missing)} not found): {_INSTALL}"
    namespace = f"ds{os.getpid()}-probe{next(_instances)}"
    try:
        _command(["ip", "netns", "add", namespace], step="ip netns add")
    except EmulationError as err:
        return f"network namespaces cannot be made here: {err}"
    try:
        _command(["ip", "-n", namespace, "link", "add", "name", "p0", "type", "veth",
                  "peer", "name", "p1"], step="ip link add type veth")
        _command(["ip", "-n", namespace, "link", "add", "name", "br0", "type", "bridge"],
                 step="ip link add type bridge")
        _command(["tc", "-n", namespace, "qdisc", "add", "dev", "p0", "root", "tbf", "rate",
                  "1mbit", "burst", str(MIN_BURST), "latency", DEFAULT_LATENCY],
                 step="tc qdisc add tbf")
    except EmulationError as err:
        return f"a bridged, rate-capped link cannot be made here: {err}"
    finally:
        subprocess.run(["ip", "netns", "del", namespace], capture_output=True,
                       timeout=COMMAND_TIMEOUT, check=False)
    return None


@functools.cache
def unavailable() -> str | None:
    """Return why an emulated cluster cannot be made here (the one skip reason), or None.

    :func:`check_environment`, tried once per process and cached.

    Returns
    -------
    reason : str or None
        One line saying what is missing and how to fix it, or None.
    """
    return check_environment()


def _check_names(links: Mapping[str, object]) -> None:
    """Raise ValueError unless ``links`` names at least one worker, each a valid name."""
    if not links:
        raise ValueError("The 'links' parameter of EmulatedCluster must name at least one "
                         "worker. Got an empty mapping instead.")
    for name in links:
        if not isinstance(name, str) or not _NAME.fullmatch(name) or name == SCHEDULER:
            raise ValueError(f"The 'links' parameter of EmulatedCluster must have worker "
                             f"names of lower-case letters and digits, at most 10, starting "
                             f"with a letter, other than {SCHEDULER!r}. Got {name!r} instead.")


def _stop(processes: Sequence[subprocess.Popen[bytes]]) -> None:
    """SIGTERM ``processes`` at once, then SIGKILL those still running after
    :data:`STOP_TIMEOUT` seconds."""
    for process in processes:
        if process.poll() is None:
            process.terminate()
    deadline = time.monotonic() + STOP_TIMEOUT
    for process in processes:
        try:
            process.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=STOP_TIMEOUT)


class EmulatedCluster:
    """A Dask cluster of hosts in network namespaces joined by rate-capped links.

    A context manager: entering it builds the network and starts the processes (waiting
    until every worker registered with the scheduler); leaving it, or a failure while it
    is entered, stops the processes and deletes the namespaces.

    Parameters
    ----------
    links : mapping of str to str, float or None
        Each worker's name (lower-case letters and digits, at most 10, starting with a
        letter; also its Dask name) to its link's rate: a tc rate string (``"1gbit"``,
        ``"20mbit"``) or bits per second; None leaves the link uncapped.
    scheduler_link : str, float or None, default=None
        The scheduler's (and so the client's) link rate; None: uncapped.
    threads : int, default=1
        Threads of each worker (``--nthreads``).
    latency : str, default="50ms"
        The token buckets' queue, tc's ``latency``: how long a packet may wait before it
        is dropped.
    env : mapping of str to str or None, default=None
        The processes' environment; None: this process's.
    python : str, default=sys.executable
        The Python that runs the scheduler and the workers.
    start_timeout : float, default=START_TIMEOUT
        Seconds the scheduler and the workers may take to be up.

    Attributes
    ----------
    prefix : str
        The namespaces' prefix, ``ds<pid>-<n>``: ``<prefix>-sched``, ``<prefix>-<worker>``
        and ``<prefix>-switch``.
    addresses : dict of str to IPv4Interface
        Each host's address (set on entering).
    scheduler_address : str
        ``tcp://<scheduler address>:8786``.

    Raises
    ------
    EmulationError
        On entering, if a step of the setup fails (the message names it).

    Examples
    --------
    >>> with EmulatedCluster({"w0": "1gbit", "w1": "20mbit"}) as cluster:  # doctest: +SKIP
    ...     done = cluster.run(["python", "-c", "print('hello from the scheduler host')"])
    """

    def __init__(self, links: Mapping[str, str | float | None], *,
                 scheduler_link: str | float | None = None, threads: int = 1,
                 latency: str = DEFAULT_LATENCY, env: Mapping[str, str] | None = None,
                 python: str = sys.executable, start_timeout: float = START_TIMEOUT) -> None:
        _check_names(links)
        if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
            raise ValueError(f"The 'threads' parameter of EmulatedCluster must be a positive "
                             f"int. Got {threads!r} instead.")
        self.rates = {name: None if rate is None else parse_rate(rate)
                      for name, rate in [(SCHEDULER, scheduler_link), *links.items()]}
        self.workers = list(links)
        self.threads = threads
        self.latency = latency
        self.env = dict(os.environ if env is None else env)
        self.python = python
        self.start_timeout = start_timeout
        self.prefix = f"ds{os.getpid()}-{next(_instances)}"
        self.addresses: dict[str, ipaddress.IPv4Interface] = {}
        self._namespaces: list[str] = []
        self._processes: list[tuple[str, subprocess.Popen[bytes]]] = []
        self._sigterm: Any = None  # the SIGTERM handler before __enter__
        self._folder: Path | None = None

    # --- names -----------------------------------------------------------------------

    def namespace(self, host: str) -> str:
        """Return the network namespace of ``host`` (:data:`SCHEDULER` or a worker's name)."""
        return f"{self.prefix}-{host}"

    @property
    def switch(self) -> str:
        """The namespace that holds the bridge."""
        return f"{self.prefix}-switch"

    @property
    def scheduler_address(self) -> str:
        """The scheduler's address, ``tcp://<ip>:8786``, reachable from its namespace."""
        return f"tcp://{self.addresses[SCHEDULER].ip}:{SCHEDULER_PORT}"

    def log(self, host: str) -> Path:
        """Return the log file of ``host``'s Dask process (kept until the cluster closes)."""
        if self._folder is None:
            raise EmulationError("the cluster is not running: enter it first")
        return self._folder / f"{host}.log"

    # --- lifecycle -------------------------------------------------------------------

    def __enter__(self) -> EmulatedCluster:
        """Build the network, start the processes and wait for every worker. Until
        :meth:`__exit__`, SIGTERM (``timeout``, ``kill``) ends the program through it
        (from the main thread): the cluster is torn down, not left behind."""
        self._sigterm = None
        if threading.current_thread() is threading.main_thread():
            self._sigterm = signal.signal(signal.SIGTERM, _terminated)
        try:
            self._start()
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        """Stop the processes and delete the namespaces."""
        try:
            self.close()
        finally:
            if self._sigterm is not None:
                signal.signal(signal.SIGTERM, self._sigterm)
                self._sigterm = None

    def _start(self) -> None:
        self._folder = Path(tempfile.mkdtemp(prefix=f"{self.prefix}-"))
        self.addresses = plan_addresses(self.workers, pick_subnet(root_networks()))
        self._add_namespace(self.switch)
        self._ip(self.switch, "link", "set", "lo", "up")
        self._ip(self.switch, "link", "add", "name", "br0", "type", "bridge")
        self._ip(self.switch, "link", "set", "br0", "up")
        for host in self.addresses:
            self._add_host(host)
        self._spawn(SCHEDULER, ["-m", "distributed.cli.dask_scheduler",
                                "--host", str(self.addresses[SCHEDULER].ip),
                                "--port", str(SCHEDULER_PORT), "--no-dashboard"])
        for name in self.workers:
            self._spawn(name, ["-m", "distributed.cli.dask_worker", self.scheduler_address,
                               "--host", str(self.addresses[name].ip), "--name", name,
                               "--nthreads", str(self.threads), "--nanny", "--no-dashboard",
                               "--death-timeout", str(self.start_timeout),
                               "--local-directory", str(self._folder / name)])
        self._wait_for_workers()

    def _add_namespace(self, namespace: str) -> None:
        _command(["ip", "netns", "add", namespace], step="ip netns add")
        self._namespaces.append(namespace)

    def _ip(self, namespace: str, *args: str) -> None:
        _command(["ip", "-n", namespace, *args], step=f"ip {' '.join(args[:2])}")

    def _cap(self, namespace: str, device: str, bits: float) -> None:
        _command(["tc", "-n", namespace, "qdisc", "replace", "dev", device, "root", "tbf",
                  "rate", f"{bits:.0f}bit", "burst", str(burst_bytes(bits)),
                  "latency", self.latency], step="tc qdisc add tbf")

    def _add_host(self, host: str) -> None:
        """Make ``host``'s namespace, its veth to the bridge, its address and its caps."""
        namespace, port = self.namespace(host), f"p-{host}"
        self._add_namespace(namespace)
        self._ip(namespace, "link", "set", "lo", "up")
        # made in the switch namespace, the peer moved to the host's: nothing in the root one
        self._ip(self.switch, "link", "add", "name", port, "type", "veth",
                 "peer", "name", "eth0", "netns", namespace)
        self._ip(self.switch, "link", "set", port, "master", "br0", "up")
        self._ip(namespace, "addr", "add", str(self.addresses[host]), "dev", "eth0")
        self._ip(namespace, "link", "set", "eth0", "up")
        if self.rates[host] is not None:
            self.set_rate(host, self.rates[host])

    def set_rate(self, host: str, rate: str | float | None) -> None:
        """Cap ``host``'s link at ``rate`` in both directions, now (also while it runs).

        Parameters
        ----------
        host : str
            :data:`SCHEDULER` or a worker's name.
        rate : str, float or None
            A tc rate string or bits per second (:func:`parse_rate`); None: uncapped.

        Raises
        ------
        ValueError
            If ``host`` is not one of the cluster's hosts, or ``rate`` is not a rate.
        EmulationError
            If ``tc`` fails (the cluster is not running).
        """
        if host not in self.rates:
            raise ValueError(f"The 'host' parameter of EmulatedCluster.set_rate must be one "
                             f"of {sorted(self.rates)}. Got {host!r} instead.")
        bits = None if rate is None else parse_rate(rate)
        # what the host sends, then what it receives
        for namespace, device in ((self.namespace(host), "eth0"), (self.switch, f"p-{host}")):
            if bits is None:  # fails harmlessly on a link that has no cap
                subprocess.run(["tc", "-n", namespace, "qdisc", "del", "dev", device, "root"],
                               capture_output=True, timeout=COMMAND_TIMEOUT, check=False)
            else:
                self._cap(namespace, device, bits)
        self.rates[host] = bits

    def _spawn(self, host: str, args: list[str]) -> None:
        assert self._folder is not None
        with open(self.log(host), "ab") as out:
            try:
                process = subprocess.Popen(
                    ["ip", "netns", "exec", self.namespace(host), self.python, *args],
                    stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                    env=self.env, start_new_session=True)
            except OSError as err:
                raise EmulationError(f"start dask on {host} failed: {err}") from err
        self._processes.append((host, process))

    def _registered(self) -> set[str]:
        text = self.log(SCHEDULER).read_text(errors="replace")
        return {name for _, name in _REGISTERED.findall(text)}

    def _wait_for_workers(self) -> None:
        deadline = time.monotonic() + self.start_timeout
        while not set(self.workers) <= self._registered():
            for host, process in self._processes:
                if process.poll() is not None:
                    raise EmulationError(f"dask on {host} failed: exited with "
                                         f"{process.returncode} ({self._last_line(host)})")
            if time.monotonic() > deadline:
                late = sorted(set(self.workers) - self._registered())
                raise EmulationError(f"start the workers failed: {', '.join(late)} not "
                                     f"registered within {self.start_timeout:g} s "
                                     f"({self._last_line(late[0])})")
            time.sleep(0.1)

    def _last_line(self, host: str) -> str:
        lines = self.log(host).read_text(errors="replace").strip().splitlines()
        return f"its log's last line: {lines[-1]}" if lines else "its log is empty"

    def run(self, argv: Sequence[str], *, timeout: float = 120,
            **kwargs: Any) -> subprocess.CompletedProcess[str]:
        """Run a command in the scheduler's namespace (a client) and return its outcome.

        Parameters
        ----------
        argv : sequence of str
            The command, e.g. ``[sys.executable, "-m", "daskstraggle", "pca", ...,
            "--scheduler", cluster.scheduler_address]``.
        timeout : float, default=120
            Seconds before the command is killed (:class:`subprocess.TimeoutExpired`).
        **kwargs
            More arguments of :func:`subprocess.run` (``env``, ``cwd``, ``input``...).

        Returns
        -------
        done : subprocess.CompletedProcess of str
            Its exit status, stdout and stderr (text, captured; no check of the status).
        """
        options: dict[str, Any] = {"capture_output": True, "text": True, "check": False,
                                   **kwargs}
        return subprocess.run(["ip", "netns", "exec", self.namespace(SCHEDULER), *argv],
                              timeout=timeout, **options)

    def run_json(self, module: str, function: str, args: Sequence[str], *, timeout: float,
                 what: str, **kwargs: Any) -> Any:
        """Call ``function(argv)`` of the pipeline ``module`` (a file beside this one) in a
        Python client in the scheduler's namespace (:meth:`run`), ``argv`` the scheduler's
        address and ``args``; return the JSON of the last line it printed.

        Raises
        ------
        RuntimeError
            If the client failed (the message names ``what`` and ends its stderr).
        """
        here = str(Path(__file__).resolve().parent)
        code = (f"import sys; sys.path.insert(0, {here!r}); import {module}; "
                f"{module}.{function}(sys.argv[1:])")
        done = self.run([sys.executable, "-c", code, self.scheduler_address, *args],
                        timeout=timeout, **kwargs)
        if done.returncode != 0:
            raise RuntimeError(f"{what} failed: {done.stderr.strip()[-2000:]}")
        return json.loads(done.stdout.strip().splitlines()[-1])

    def close(self) -> None:
        """Stop the processes, then delete the namespaces, in reverse order (bounded).

        Idempotent. The workers get SIGTERM, then SIGKILL after :data:`STOP_TIMEOUT`, and
        only then the scheduler (a worker that loses its scheduler first takes seconds
        to give up on it); any process still in one of the namespaces (a worker left by
        its nanny, a client of :meth:`run`) is killed before the namespace is deleted.
        """
        _stop([p for host, p in self._processes if host != SCHEDULER])
        _stop([p for host, p in self._processes if host == SCHEDULER])
        self._processes.clear()
        for namespace in reversed(self._namespaces):
            self._kill_inside(namespace)
            subprocess.run(["ip", "netns", "del", namespace], capture_output=True,
                           timeout=COMMAND_TIMEOUT, check=False)
        self._namespaces.clear()
        if self._folder is not None:
            shutil.rmtree(self._folder, ignore_errors=True)
            self._folder = None

    @staticmethod
    def _kill_inside(namespace: str) -> None:
        """SIGKILL every process left in ``namespace`` (all started from this cluster)."""
        done = subprocess.run(["ip", "netns", "pids", namespace], capture_output=True,
                              text=True, timeout=COMMAND_TIMEOUT, check=False)
        for pid in done.stdout.split():
            try:
                os.kill(int(pid), signal.SIGKILL)
            except ProcessLookupError:
                pass
