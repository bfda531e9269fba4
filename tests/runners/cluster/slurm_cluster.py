"""A real two-node Slurm cluster on this machine, for the tests (Debian's slurm-wlm 22.05 and munge).

`start_cluster()` writes, in a fresh folder under the temp dir (short: munge's socket path must fit
a Unix socket name):

- a munge key and a `munged` of its own (`--socket` in the folder; the Slurm commands find it
  through slurm.conf's `AuthInfo=socket=...`);
- slurm.conf: `slurmctld` on a free loopback port, `SlurmUser=root`, its state in the folder;
  nodes n1 and n2 in the default partition `test`, and n1 to n4 in the partition `wide` (for a
  bisection, which needs four nodes), all `NodeAddr=127.0.0.1`, each its own `Port=` (free) and spool folder
  (`SlurmdSpoolDir=.../spool/%n`), `ProctrackType=proctrack/linuxproc` and `TaskPlugin=task/none`
  (no cgroups), no accounting (a finished job stays in `scontrol show job` for `MinJobAge`),
  credentials that expire after 5 s (`cred_expire`: a requeued job starts again that much later;
  the default is 120 s);
- a TaskProlog giving each node's tasks a temp dir and a device-lock folder of the node's own, as
  on a real node's local disk (the two nodes share this machine's /tmp otherwise);

then starts `munged -F`, `slurmctld -D` and one `slurmd -D -N <node>` per node, and waits until
`sinfo` shows every node idle. Clients and jobs find the cluster through `SLURM_CONF`
(`cluster.env`; jobs get it from the submitting environment).

`stop_cluster()` cancels every job, stops the daemons (`scontrol shutdown`, then munged), kills
what is left of ours (a process whose command line, environment, working directory or open files
name the folder: the daemons, slurmstepd, the jobs' processes), removes the folder and returns what
it had to kill or could not remove, so that the fixture fails on it.
"""
from __future__ import annotations

import os
import random
import re
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENTS = ("sbatch", "srun", "scontrol", "sinfo", "squeue", "scancel")
NODES = ("n1", "n2")  # the default partition's
WIDE_NODES = ("n1", "n2", "n3", "n4")  # the partition WIDE_PARTITION's
WIDE_PARTITION = "wide"
CPUS_PER_NODE = 2
START_TIMEOUT_S = 30.0
TERMINAL_STATES = frozenset({"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY",
                             "PREEMPTED", "BOOT_FAIL", "DEADLINE"})


def missing_programs() -> list[str]:
    """The Slurm and munge programs this machine lacks."""
    return [name for name in (*DAEMONS, *CLIENTS) if shutil.which(name) is None]


def skip_reason() -> str | None:
    """Why the real-Slurm tests cannot run here, or None."""
    missing = missing_programs()
    if missing:
        return (f"Slurm is not installed ({', '.join(missing)} missing): "
                "apt-get install slurm-wlm munge (.ci/run does)")
    if os.geteuid() != 0:
        return "the test cluster runs its daemons as root (SlurmUser=root)"
    return None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def first_job_id(jobs: int = 64) -> int:
    """A first job id whose rendezvous ports (20000 + id mod 20000, the collective script's) are free
    now for the next `jobs` jobs: a random start, so that two clusters on one host rarely meet."""
    for _ in range(100):
        start = random.randrange(1000, 19000 - jobs)
        if all(_port_free(20000 + start + i) for i in range(jobs)):
            return start
    raise RuntimeError("no free range of rendezvous ports in 21000-39000")


def slurm_conf(root: Path, *, ctld_port: int, node_ports: Mapping[str, int], first_job: int,
               default_nodes: Sequence[str]) -> str:
    host = socket.gethostname().split(".")[0]
    nodes = "\n".join(
        f"NodeName={name} NodeAddr=127.0.0.1 NodeHostname={host} Port={port} CPUs={CPUS_PER_NODE} State=UNKNOWN"
        for name, port in node_ports.items())
    return f"""# a test cluster of rooflab's (tests/runners/cluster/slurm_cluster.py)
ClusterName=rooflab{secrets.token_hex(3)}
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={root}/munge/socket,cred_expire=5
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool/%n
SlurmctldPidFile={root}/run/slurmctld.pid
SlurmdPidFile={root}/run/slurmd-%n.pid
SlurmctldLogFile={root}/log/slurmctld.log
SlurmdLogFile={root}/log/slurmd-%n.log
TaskProlog={root}/task_prolog.sh
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
MailProg=/bin/true
ReturnToService=2
SchedulerType=sched/backfill
SchedulerParameters=batch_sched_delay=0,sched_min_interval=0
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
JobAcctGatherType=jobacct_gather/none
FirstJobId={first_job}
MinJobAge=3600
KillWait=30
{nodes}
PartitionName=test Nodes={",".join(default_nodes)} Default=YES MaxTime=INFINITE State=UP
PartitionName={WIDE_PARTITION} Nodes={",".join(node_ports)} MaxTime=INFINITE State=UP
"""


TASK_PROLOG = """#!/bin/bash
# Each node's own temp dir and device-lock folder (a real node has its own /tmp): TaskProlog's
# `export` lines set the task's environment.
node_dir={root}/nodes/$SLURMD_NODENAME
mkdir -p "$node_dir/tmp" "$node_dir/locks"
echo "export TMPDIR=$node_dir/tmp"
echo "export ROOFLAB_LOCK_DIR=$node_dir/locks"
"""


@dataclass
class SlurmCluster:
    root: Path
    conf: Path
    nodes: tuple[str, ...]
    env: dict[str, str]  # the environment of clients and submissions: SLURM_CONF
    daemons: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def run(self, *args: str, check: bool = True, timeout: float = 30.0,
            env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(list(args), env=dict(env or self.env), capture_output=True, text=True,
                              timeout=timeout)
        if check and done.returncode != 0:
            raise RuntimeError(f"{' '.join(args)}: exit code {done.returncode}\n{done.stdout}{done.stderr}")
        return done

    def job(self, job_id: str) -> dict[str, str]:
        """`scontrol show job` of one job (an array task as `<id>_<task>`), field by field."""
        line = self.run("scontrol", "show", "job", "-o", job_id).stdout.strip()
        return parse_fields(line.splitlines()[0] if line else "")

    def jobs(self) -> list[str]:
        """Job ids of every job the controller holds that has not ended."""
        out = self.run("squeue", "-h", "-o", "%i").stdout
        return [line.strip() for line in out.splitlines() if line.strip()]

    def state(self, job_id: str) -> str:
        return self.job(job_id).get("JobState", "")

    def wait(self, job_id: str, states: frozenset[str] = TERMINAL_STATES, timeout_s: float = 120.0) -> dict[str, str]:
        """Wait until the job is in one of `states`; its fields. The controller is asked every 0.2 s
        at first, then less often (up to once a second): an `scontrol` costs ~8 ms of CPU with the
        controller's and munged's share, and a wait for a night's last job lasts a minute or more."""
        deadline = time.monotonic() + timeout_s
        pause = 0.2
        while True:
            fields = self.job(job_id)
            if fields.get("JobState") in states:
                return fields
            if time.monotonic() > deadline:
                raise TimeoutError(f"job {job_id} still {fields.get('JobState')} after {timeout_s:.0f} s:\n"
                                   f"{fields}\n{self.logs()}")
            time.sleep(pause)
            pause = min(1.0, pause * 1.25)

    def logs(self) -> str:
        """The daemons' logs' tails, for a failing test's message."""
        parts = []
        for path in sorted((self.root / "log").glob("*")):
            lines = path.read_text(errors="replace").splitlines()[-15:]
            parts.append(f"--- {path.name}\n" + "\n".join(lines))
        return "\n".join(parts)


_FIELD = re.compile(r"(?:^|\s)([A-Za-z][A-Za-z0-9_:/]*)=")


def parse_fields(line: str) -> dict[str, str]:
    """`A=1 B=x y C=2` (scontrol's one-line form) -> {A: "1", B: "x y", C: "2"}."""
    marks = list(_FIELD.finditer(line))
    out = {}
    for i, mark in enumerate(marks):
        end = marks[i + 1].start() if i + 1 < len(marks) else len(line)
        out[mark.group(1)] = line[mark.end():end].strip()
    return out


def _write_files(root: Path, nodes: Sequence[str], default_nodes: Sequence[str]) -> tuple[Path, int]:
    for sub in ("state", "run", "log", "munge", *(f"spool/{n}" for n in nodes)):
        (root / sub).mkdir(parents=True, exist_ok=True)
    (root / "munge").chmod(0o755)  # munged wants its socket's folder open to all
    key = root / "munge" / "munge.key"
    key.write_bytes(secrets.token_bytes(1024))
    key.chmod(0o600)
    prolog = root / "task_prolog.sh"
    prolog.write_text(TASK_PROLOG.format(root=root))
    prolog.chmod(0o755)
    ctld_port = free_port()
    ports = {name: free_port() for name in nodes}
    conf = root / "slurm.conf"
    conf.write_text(slurm_conf(root, ctld_port=ctld_port, node_ports=ports, first_job=first_job_id(),
                               default_nodes=default_nodes))
    return conf, ctld_port


def _spawn(cluster: SlurmCluster, name: str, argv: list[str]) -> None:
    with open(cluster.root / "log" / f"{name}.out", "wb") as out:
        cluster.daemons[name] = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                                 env=cluster.env, start_new_session=True)


def start_cluster(nodes: Sequence[str] = NODES, wide: Sequence[str] = WIDE_NODES) -> SlurmCluster:
    """Write the cluster's files, start its daemons, wait for its nodes to be idle (see the module):
    `nodes` in the default partition, `wide` (with them or not) in WIDE_PARTITION."""
    root = Path(tempfile.mkdtemp(prefix="rl-slurm-"))
    root.chmod(0o755)
    default_nodes, nodes = tuple(nodes), tuple(dict.fromkeys((*nodes, *wide)))
    conf, _ = _write_files(root, nodes, default_nodes)
    env = dict(os.environ, SLURM_CONF=str(conf))
    cluster = SlurmCluster(root=root, conf=conf, nodes=tuple(nodes), env=env)
    try:
        m = root / "munge"
        _spawn(cluster, "munged", ["munged", "-F", f"--socket={m}/socket", f"--key-file={m}/munge.key",
                                   f"--pid-file={m}/munged.pid", f"--seed-file={m}/seed", f"--log-file={m}/log"])
        _wait_for(lambda: (m / "socket").exists(), "munged's socket", cluster)
        _spawn(cluster, "slurmctld", ["slurmctld", "-D", "-f", str(conf)])
        for node in nodes:
            _spawn(cluster, f"slurmd-{node}", ["slurmd", "-D", "-N", node, "-f", str(conf)])
        _wait_for(lambda: _all_idle(cluster), "every node idle in sinfo", cluster)
    except BaseException:
        stop_cluster(cluster)
        raise
    return cluster


def _all_idle(cluster: SlurmCluster) -> bool:
    for name, daemon in cluster.daemons.items():
        if daemon.poll() is not None:
            raise RuntimeError(f"{name} exited with code {daemon.returncode}\n{cluster.logs()}")
    done = cluster.run("sinfo", "-h", "-N", "-o", "%N %t", check=False)
    states = dict(line.split() for line in done.stdout.splitlines() if len(line.split()) == 2)
    return done.returncode == 0 and all(states.get(n) == "idle" for n in cluster.nodes)


def _wait_for(ready: object, what: str, cluster: SlurmCluster) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while not ready():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise RuntimeError(f"test cluster: no {what} after {START_TIMEOUT_S:.0f} s\n{cluster.logs()}")
        time.sleep(0.1)


def owned_processes(root: Path) -> list[tuple[int, str]]:
    """(pid, command) of every process that names `root` in its command line, environment, working
    directory or open files: the cluster's daemons, slurmstepd (its log), the jobs (SLURM_CONF)."""
    mark, found = str(root), []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
            if mark in cmd or mark.encode() in (entry / "environ").read_bytes() or _names(entry, mark):
                found.append((int(entry.name), cmd or "?"))
        except OSError:  # gone meanwhile, or a kernel thread
            continue
    return found


def _names(entry: Path, mark: str) -> bool:
    links = [entry / "cwd", *(entry / "fd").iterdir()]
    for link in links:
        try:
            if os.readlink(link).startswith(mark):
                return True
        except OSError:
            continue
    return False


def stop_cluster(cluster: SlurmCluster) -> list[str]:
    """Cancel every job, stop the daemons, kill and report what is left, remove the folder; the
    problems found (empty when everything stopped of itself)."""
    problems: list[str] = []
    _cancel_jobs(cluster, problems)
    ctld = cluster.daemons.get("slurmctld")
    if ctld is not None and ctld.poll() is None:
        cluster.run("scontrol", "shutdown", check=False)
    for name, daemon in cluster.daemons.items():
        if name == "munged":
            continue
        _end(name, daemon, problems)
    munged = cluster.daemons.get("munged")
    if munged is not None:
        munged.terminate()
        _end("munged", munged, problems)
    deadline = time.monotonic() + 10.0
    left = owned_processes(cluster.root)
    while left and time.monotonic() < deadline:
        time.sleep(0.2)
        left = owned_processes(cluster.root)
    for pid, cmd in left:
        problems.append(f"left behind: pid {pid} {cmd}")
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    shutil.rmtree(cluster.root, ignore_errors=True)
    if cluster.root.exists():
        problems.append(f"could not remove {cluster.root}")
    return problems


def _cancel_jobs(cluster: SlurmCluster, problems: list[str]) -> None:
    ctld = cluster.daemons.get("slurmctld")
    if ctld is None or ctld.poll() is not None:
        return
    ids = cluster.jobs() if _alive(cluster) else []
    if not ids:
        return
    cluster.run("scancel", *ids, check=False)
    deadline = time.monotonic() + 45.0  # KillWait (30 s) and a little
    while cluster.jobs() and time.monotonic() < deadline:
        time.sleep(0.2)
    if cluster.jobs():
        problems.append(f"jobs still there after scancel: {', '.join(cluster.jobs())}")


def _alive(cluster: SlurmCluster) -> bool:
    return cluster.run("squeue", "-h", check=False).returncode == 0


def _end(name: str, daemon: subprocess.Popen[bytes], problems: list[str]) -> None:
    try:
        daemon.wait(timeout=20)
    except subprocess.TimeoutExpired:
        problems.append(f"{name} (pid {daemon.pid}) did not stop of itself; killed")
        daemon.kill()
        daemon.wait(timeout=10)
