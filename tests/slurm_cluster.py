"""A one-node SLURM cluster on 127.0.0.1, started and stopped by the tests (tests/test_slurm.py).

Debian's packages, as a small lab cluster runs them: munged (authentication), MariaDB and
slurmdbd (accounting: `sacct`, which submitit polls for job states, needs it), slurmctld (the
controller) and slurmd (the one compute node), each in the foreground as a child of the test
process, with every file (configs, state, spool, logs, sockets) in one temporary folder. Nothing
is installed or written elsewhere; commands (`sbatch`, `squeue`, `scancel`) find this cluster
through SLURM_CONF, which `env` gives.

    apt-get install -y slurm-wlm slurmdbd munge mariadb-server    (as root; .ci/run does it)
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

# What the cluster needs on the PATH (Debian: slurm-wlm, slurmdbd, munge, mariadb-server).
PROGRAMS = ("munged", "mungekey", "mariadb-install-db", "mariadbd", "mariadb", "slurmdbd",
            "slurmctld", "slurmd", "sbatch", "squeue", "scancel", "sacct", "sacctmgr", "sinfo")
NODE = "gradexp-node"
CLUSTER = "gradexp"
DB_PASSWORD = "gradexp"  # a throw-away database that listens on 127.0.0.1 during one test run


def missing_programs() -> list[str]:
    return [name for name in PROGRAMS if shutil.which(name) is None]


def real_memory_mb() -> int:
    """Most of this machine's memory, in MB: jobs ask for memory (sbatch --mem), and SLURM's
    default for a node is 1 MB; slurmd drains a node that claims more than it has."""
    with open("/proc/meminfo") as handle:
        total_kb = int(next(line for line in handle if line.startswith("MemTotal")).split()[1])
    return max(1, int(total_kb / 1024 * 0.8))


def wait_until(done: Callable[[], bool], timeout: float, what: str,
               alive: Callable[[], str | None] = lambda: None) -> None:
    """Poll `done` until it holds; `alive` names a daemon that died meanwhile (then stop)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if done():
            return
        dead = alive()
        if dead:
            raise RuntimeError(f"{what}: {dead}")
        time.sleep(0.2)
    raise RuntimeError(f"{what}: not within {timeout:.0f} s")


class SlurmCluster:
    """Start with `start()`, stop with `stop()`; `env` is what a command needs to reach it."""

    def __init__(self, folder: Path, ports: list[int], cpus: int | None = None):
        self.folder = folder
        self.ctld_port, self.slurmd_port, self.dbd_port, self.db_port = ports
        self.cpus = cpus or os.cpu_count() or 1
        self.daemons: dict[str, subprocess.Popen] = {}
        self.outputs: list = []  # the daemons' stdout files, closed when they stop
        self.conf = folder / "slurm.conf"
        self.env = {**os.environ, "SLURM_CONF": str(self.conf)}

    # ---------------------------------------------------------------- start
    def start(self) -> None:
        folder = self.folder
        for sub in ("munge", "state", "spool", "log", "db"):
            (folder / sub).mkdir(parents=True, exist_ok=True)
        folder.chmod(0o700)  # munged refuses keys and sockets in folders others may write
        self._start_munge()
        self._start_database()
        self._write_configs()
        self._spawn("slurmdbd", ["slurmdbd", "-D"])
        # The cluster is known to the accounting once slurmdbd answers sacctmgr.
        wait_until(self._registered, 60, "slurmdbd did not register the cluster", self._dead)
        self._spawn("slurmctld", ["slurmctld", "-D", "-f", str(self.conf)])
        self._spawn("slurmd", ["slurmd", "-D", "-f", str(self.conf), "-N", NODE])
        wait_until(lambda: self.output(["sinfo", "-h", "-n", NODE, "-o", "%T"]).strip()
                   in ("idle", "mixed", "allocated"), 60, "the node did not come up", self._dead)

    def _start_munge(self) -> None:
        munge = self.folder / "munge"
        subprocess.run(["mungekey", "--create", "--keyfile", str(munge / "munge.key")],
                       check=True, capture_output=True)
        self.munge_socket = munge / "munge.sock"
        self._spawn("munged", [
            "munged", "--foreground", "--force", f"--key-file={munge / 'munge.key'}",
            f"--socket={self.munge_socket}", f"--pid-file={munge / 'munged.pid'}",
            f"--seed-file={munge / 'munged.seed'}",
            f"--log-file={self.folder / 'log' / 'munged.log'}"])
        wait_until(self.munge_socket.exists, 30, "munged did not start", self._dead)

    def _start_database(self) -> None:
        data = self.folder / "db"
        self.db_socket = self.folder / "mysql.sock"
        subprocess.run(["mariadb-install-db", f"--datadir={data}", "--user=root",
                        "--auth-root-authentication-method=socket", "--skip-test-db"],
                       check=True, capture_output=True)
        self._spawn("mariadbd", [
            "mariadbd", "--no-defaults", f"--datadir={data}", f"--socket={self.db_socket}",
            f"--port={self.db_port}", "--bind-address=127.0.0.1", "--user=root",
            f"--pid-file={self.folder / 'mysql.pid'}", "--innodb-buffer-pool-size=32M",
            f"--log-error={self.folder / 'log' / 'mariadb.log'}"])
        create = (f"CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY '{DB_PASSWORD}';"
                  " GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';")
        wait_until(lambda: self._quiet(["mariadb", f"--socket={self.db_socket}", "-u", "root",
                                        "-e", create]) == 0,
                   60, "MariaDB did not start", self._dead)

    def _write_configs(self) -> None:
        folder, log = self.folder, self.folder / "log"
        dbd = folder / "slurmdbd.conf"  # slurmdbd reads it beside slurm.conf (SLURM_CONF)
        dbd.write_text(f"""\
AuthType=auth/munge
AuthInfo=socket={self.munge_socket}
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort={self.dbd_port}
SlurmUser=root
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort={self.db_port}
StorageUser=slurm
StoragePass={DB_PASSWORD}
StorageLoc=slurm_acct_db
PidFile={folder / 'slurmdbd.pid'}
LogFile={log / 'slurmdbd.log'}
""")
        dbd.chmod(0o600)  # slurmdbd refuses a config others can read (it holds a password)
        self.conf.write_text(f"""\
ClusterName={CLUSTER}
SlurmctldHost=localhost(127.0.0.1)
SlurmUser=root
SlurmdUser=root
SlurmctldPort={self.ctld_port}
SlurmdPort={self.slurmd_port}
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={self.munge_socket}
StateSaveLocation={folder / 'state'}
SlurmdSpoolDir={folder / 'spool'}
SlurmctldPidFile={folder / 'slurmctld.pid'}
SlurmdPidFile={folder / 'slurmd.pid'}
SlurmctldLogFile={log / 'slurmctld.log'}
SlurmdLogFile={log / 'slurmd.log'}
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort={self.dbd_port}
AccountingStoragePass={self.munge_socket}
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
NodeName={NODE} NodeHostname={os.uname().nodename} NodeAddr=127.0.0.1 CPUs={self.cpus} \
RealMemory={real_memory_mb()} State=UNKNOWN
PartitionName=debug Nodes={NODE} Default=YES MaxTime=INFINITE State=UP
""")

    # ---------------------------------------------------------------- use
    def output(self, command: list[str]) -> str:
        done = subprocess.run(command, env=self.env, capture_output=True, text=True, timeout=60)
        return done.stdout if done.returncode == 0 else ""

    def jobs(self) -> list[str]:
        """The ids of this cluster's jobs that are pending or running."""
        return self.output(["squeue", "-h", "-o", "%i"]).split()

    def _registered(self) -> bool:
        self._quiet(["sacctmgr", "-i", "add", "cluster", CLUSTER])
        return CLUSTER in self.output(["sacctmgr", "-n", "-P", "list", "cluster",
                                       "format=cluster"]).split()

    def _quiet(self, command: list[str]) -> int:
        return subprocess.run(command, env=self.env, capture_output=True,
                              timeout=60).returncode

    def logs(self) -> str:
        """The daemons' logs' last lines, for a failing test's message."""
        parts = []
        for path in sorted((self.folder / "log").glob("*.log")):
            lines = path.read_text(errors="replace").splitlines()[-15:]
            parts.append(f"--- {path.name}\n" + "\n".join(lines))
        return "\n".join(parts)

    # ---------------------------------------------------------------- stop
    def _spawn(self, name: str, command: list[str]) -> None:
        out = open(self.folder / "log" / f"{name}.out", "w")  # noqa: SIM115 - closed in stop
        self.outputs.append(out)
        self.daemons[name] = subprocess.Popen(command, env=self.env, stdout=out,
                                              stderr=subprocess.STDOUT,
                                              stdin=subprocess.DEVNULL)

    def _dead(self) -> str | None:
        for name, process in self.daemons.items():
            if process.poll() is not None:
                tail = (self.folder / "log" / f"{name}.out").read_text(errors="replace")
                return f"{name} exited ({process.returncode}): {tail[-1500:]}"
        return None

    def stop(self) -> None:
        """Cancel what still runs, then stop the daemons, newest first, each by its process."""
        if "slurmctld" in self.daemons and self.daemons["slurmctld"].poll() is None:
            for job in self.jobs():
                self._quiet(["scancel", job])
            try:
                wait_until(lambda: not self.jobs(), 60, "jobs still running")
            except RuntimeError:
                pass  # stopping slurmd ends them too
        for name in reversed(list(self.daemons)):
            process = self.daemons[name]
            if process.poll() is None:
                process.terminate()
                try:
                    process.wait(30)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait(10)
        for out in self.outputs:
            out.close()
