"""ZooKeeper on loopback: a standalone server (``ZooKeeperServer``) and a three-server
ensemble (``ZooKeeperEnsemble``), both from Debian's ZooKeeper 3.8 jars.

A standalone server may be secured as a production Pulsar cluster's is
(``ZooKeeperSecurity``): TLS on a ``secureClientPort`` beside the plain client port (which
a test uses to plant data), and SASL logins (DIGEST-MD5 users of a JAAS ``Server``
section), with which BookKeeper's ``zkEnableSecurity`` creates its znodes.
"""

from __future__ import annotations

import re
import shutil
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Self

from local_stack.server_process import (
    FAST_JVM_OPTIONS,
    LOOPBACK,
    LocalStackError,
    ServerProcess,
    Startable,
    free_port,
    java_executable,
)

DEBIAN_JAR_DIR = Path("/usr/share/java")

# The jars of Debian's `zookeeper` package that a standalone server needs (Netty for its
# client port, metrics-core for mntr, commons-* for its config parsing and file handling).
ZOOKEEPER_JARS = (
    "zookeeper.jar",
    "zookeeper-jute.jar",
    "slf4j-api.jar",
    "slf4j-simple.jar",
    "netty-handler.jar",
    "netty-common.jar",
    "netty-buffer.jar",
    "netty-transport.jar",
    "netty-codec.jar",
    "netty-resolver.jar",
    "netty-transport-native-epoll.jar",
    "netty-transport-native-unix-common.jar",
    "metrics-core.jar",
    "commons-io.jar",
    "commons-cli.jar",
)

# The four-letter words a local ZooKeeper answers (``ZooKeeperServer.four_letter_word``).
FOUR_LETTER_WORDS = "srvr,ruok,mntr,cons"
SASL_PROVIDER = "org.apache.zookeeper.server.auth.SASLAuthenticationProvider"
X509_PROVIDER = "org.apache.zookeeper.server.auth.X509AuthenticationProvider"
NETTY_FACTORY = "org.apache.zookeeper.server.NettyServerCnxnFactory"


@dataclass(frozen=True)
class ZooKeeperSecurity:
    """What secures a local server, as a production ensemble is secured.

    * TLS (``keystore`` set): a ``secureClientPort`` served by Netty with this PKCS12
      keystore and truststore (``ssl.*`` of zoo.cfg); ``client_auth`` is ``ssl.clientAuth``
      (``need``: a client must present a certificate the truststore's CA signed). The plain
      client port stays, so a test can plant data. A truststore must be made by
      ``keytool -importcert``: OpenSSL 3's certificate-only PKCS12 files read as empty in
      Java.
    * SASL (``sasl_users``): ``SASLAuthenticationProvider`` with a JAAS ``Server`` section
      of ``DigestLoginModule`` users; a client that logs in as ``bookkeeper`` is
      ``sasl:bookkeeper`` in ACLs.
    """

    keystore: Path | None = None
    keystore_password: str = ""
    truststore: Path | None = None
    truststore_password: str = ""
    client_auth: str = "need"
    sasl_users: Mapping[str, str] = field(default_factory=dict)


class ZooKeeperServer(ServerProcess):
    """A standalone ZooKeeper 3.8 from Debian's jars, on 127.0.0.1 only.

    Settings that differ from ZooKeeper's defaults, and why:

    * ``forceSync=no``: no fsync per write. Data still reaches the OS on every commit, so it
      survives ``stop()``/``restart()`` (which is what tests need), and tests run far faster.
    * ``minSessionTimeout=1000``: tests may use short sessions to see expiry quickly.
    * ``maxClientCnxns=0``: every test opens its own clients from 127.0.0.1; the default
      limit of 60 per address would turn a slow leak into confusing connection errors.
    * 4lw ``srvr,ruok,mntr,cons``: ``ruok`` is the readiness probe, ``cons`` lists the
      client sessions (which server a client is on), the others help debugging.
    """

    name = "ZooKeeper"
    log_name = "zookeeper.log"
    main_class: ClassVar[str] = "org.apache.zookeeper.server.ZooKeeperServerMain"

    def __init__(
        self,
        data_dir: Path | str,
        port: int | None = None,
        log_dir: Path | str | None = None,
        *,
        jar_dir: Path = DEBIAN_JAR_DIR,
        heap: str = "256m",
        start_timeout: float = 60.0,
        security: ZooKeeperSecurity | None = None,
    ) -> None:
        self.data_dir = Path(data_dir)
        self.jar_dir = Path(jar_dir)
        self.heap = heap
        self.security = security
        self.secure_port = free_port() if security and security.keystore else None
        super().__init__(port, Path(log_dir) if log_dir else self.data_dir / "logs", start_timeout)

    @property
    def hosts(self) -> str:
        """The connect string for kazoo and ``LEDGERGC_ZK_HOSTS``: ``127.0.0.1:PORT``."""
        return f"{LOOPBACK}:{self.port}"

    @property
    def secure_hosts(self) -> str:
        """The TLS port's connect string (``ZooKeeperSecurity`` with a keystore)."""
        if self.secure_port is None:
            raise LocalStackError(f"{self.name} on {self.hosts} has no secureClientPort")
        return f"{LOOPBACK}:{self.secure_port}"

    @property
    def jaas_path(self) -> Path:
        return self.data_dir / "jaas.conf"

    def _ports(self) -> list[int]:
        return [self.port] + ([self.secure_port] if self.secure_port else [])

    def _pick_new_ports(self) -> None:
        super()._pick_new_ports()
        if self.secure_port is not None:
            self.secure_port = free_port()

    @property
    def config_path(self) -> Path:
        """The generated zoo.cfg (rewritten at each start, so a new port is picked up)."""
        return self.data_dir / "zoo.cfg"

    def _prepare(self) -> None:
        missing = [jar for jar in ZOOKEEPER_JARS if not (self.jar_dir / jar).is_file()]
        if missing:
            raise LocalStackError(
                f"ZooKeeper jars missing from {self.jar_dir}: {', '.join(missing)}; install "
                "Debian's package: apt-get install zookeeper (bin/setup does it)"
            )
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text("\n".join([*self._config_lines(), ""]))
        if self.security and self.security.sasl_users:
            users = "\n".join(
                f'  user_{name}="{password}"' for name, password in self.security.sasl_users.items()
            )
            self.jaas_path.write_text(
                f"Server {{\n  org.apache.zookeeper.server.auth.DigestLoginModule required\n"
                f"{users};\n}};\n"
            )

    def _security_lines(self) -> list[str]:
        """zoo.cfg's TLS and SASL lines (``ZooKeeperSecurity``)."""
        security = self.security
        if security is None:
            return []
        lines = []
        providers = []
        if security.keystore is not None:
            lines += [
                f"serverCnxnFactory={NETTY_FACTORY}",
                f"secureClientPort={self.secure_port}",
                f"secureClientPortAddress={LOOPBACK}",
                f"ssl.keyStore.location={Path(security.keystore).resolve()}",
                f"ssl.keyStore.password={security.keystore_password}",
                "ssl.keyStore.type=PKCS12",
                f"ssl.clientAuth={security.client_auth}",
            ]
            if security.truststore is not None:
                lines += [
                    f"ssl.trustStore.location={Path(security.truststore).resolve()}",
                    f"ssl.trustStore.password={security.truststore_password}",
                    "ssl.trustStore.type=PKCS12",
                ]
            # A TLS client's certificate is its x509 identity (what Netty's handshake check
            # asks this provider for when client certificates are asked for).
            providers.append(X509_PROVIDER)
        if security.sasl_users:
            providers.append(SASL_PROVIDER)
        lines += [f"authProvider.{n}={provider}" for n, provider in enumerate(providers, 1)]
        return lines

    def _config_lines(self) -> list[str]:
        """zoo.cfg's lines (an ensemble member adds its peers)."""
        return [
            "# Generated by include/local_stack for a throwaway local server.",
            "tickTime=500",
            "minSessionTimeout=1000",
            "maxSessionTimeout=60000",
            f"dataDir={self.data_dir.resolve()}",
            f"clientPort={self.port}",
            f"clientPortAddress={LOOPBACK}",
            "maxClientCnxns=0",
            "admin.enableServer=false",
            f"4lw.commands.whitelist={FOUR_LETTER_WORDS}",
            "forceSync=no",
            # KiB; the default 64 MiB per transaction log is pointless here.
            "preAllocSize=4096",
            *self._security_lines(),
        ]

    def _command(self) -> list[str]:
        java = java_executable()
        classpath = ":".join(str(self.jar_dir / jar) for jar in ZOOKEEPER_JARS)
        return [
            java,
            f"-Xmx{self.heap}",
            # A short-lived test server: start fast, stay small.
            *FAST_JVM_OPTIONS,
            "-Djava.awt.headless=true",
            "-Dzookeeper.admin.enableServer=false",
            f"-Dzookeeper.4lw.commands.whitelist={FOUR_LETTER_WORDS}",
            "-Dzookeeper.forceSync=no",
            "-Dzookeeper.jmx.log4j.disable=true",
            *(
                [f"-Djava.security.auth.login.config={self.jaas_path.resolve()}"]
                if self.security and self.security.sasl_users
                else []
            ),
            "-cp",
            classpath,
            self.main_class,
            str(self.config_path),
        ]

    def four_letter_word(self, word: str, timeout: float = 2.0) -> str:
        """Send a 4lw command (``ruok``, ``srvr``, ``mntr``) and return the answer."""
        with socket.create_connection((LOOPBACK, self.port), timeout=timeout) as sock:
            sock.sendall(word.encode("ascii"))
            chunks = []
            while chunk := sock.recv(4096):
                chunks.append(chunk)
        return b"".join(chunks).decode(errors="replace")

    def _is_ready(self) -> bool:
        # "imok" only says the process runs; "srvr" answers "not currently serving" until
        # the server accepts sessions.
        try:
            return self.four_letter_word("ruok") == "imok" and "Mode:" in self.four_letter_word(
                "srvr"
            )
        except OSError:
            return False


class EnsembleMember(ZooKeeperServer):
    """One server of a ``ZooKeeperEnsemble``: ``QuorumPeerMain`` with a ``myid`` file and
    the ``server.N=127.0.0.1:peerPort:electionPort`` lines of every member.

    It serves (``srvr`` says ``Mode: leader`` or ``Mode: follower``) only once the
    ensemble has a leader and this server has synced with it; ``restart()`` brings it back
    on the same ports and data, and it rejoins as a follower.
    """

    main_class = "org.apache.zookeeper.server.quorum.QuorumPeerMain"

    def __init__(
        self,
        data_dir: Path | str,
        myid: int,
        ports: Mapping[int, tuple[int, int, int]],
        log_dir: Path | str | None = None,
        *,
        heap: str = "128m",
        start_timeout: float = 90.0,
    ) -> None:
        self.myid = myid
        self.quorum = dict(ports)  # myid -> (client port, peer port, election port)
        super().__init__(data_dir, ports[myid][0], log_dir, heap=heap, start_timeout=start_timeout)
        self.name = f"ZooKeeper server.{myid}"  # type: ignore[misc]

    @property
    def log_path(self) -> Path:
        return self.log_dir / f"zookeeper-{self.myid}.log"

    def _ports(self) -> list[int]:
        return list(self.quorum[self.myid])

    def _prepare(self) -> None:
        super()._prepare()
        (self.data_dir / "myid").write_text(f"{self.myid}\n")

    def _config_lines(self) -> list[str]:
        return [
            *super()._config_lines(),
            # Ticks: followers get 5 s to connect and sync, 2.5 s to answer a ping.
            "initLimit=10",
            "syncLimit=5",
            # A member that is down must not hold up a new election for long (ms).
            "cnxTimeout=1000",
            "standaloneEnabled=false",
            "reconfigEnabled=false",
            *(
                f"server.{sid}={LOOPBACK}:{peer}:{election}"
                for sid, (_, peer, election) in sorted(self.quorum.items())
            ),
        ]

    def mode(self) -> str | None:
        """``leader``, ``follower``, or None while not serving (or stopped)."""
        try:
            answer = self.four_letter_word("srvr")
        except OSError:
            return None
        for line in answer.splitlines():
            if line.startswith("Mode:"):
                return line.split(":", 1)[1].strip()
        return None

    def session_ids(self) -> set[str]:
        """The ids (``0x...``) of the client sessions connected to this server now."""
        try:
            answer = self.four_letter_word("cons")
        except OSError:
            return set()
        return set(re.findall(r"sid=(0x[0-9a-f]+)", answer))

    def _is_ready(self) -> bool:
        return self.mode() in ("leader", "follower")


class ZooKeeperEnsemble(Startable):
    """A ZooKeeper ensemble of ``size`` servers (default three) on 127.0.0.1: what a
    deployment's metadata store looks like, with a quorum that survives one server down.

    Each member has its own data dir, log and client, peer and election ports (picked
    free); ``hosts`` lists every client port, as ``LEDGERGC_ZK_HOSTS`` does in a
    deployment. ``start()`` returns once a leader is elected and every member serves;
    ``members[i].stop()`` / ``.restart()`` take one server down and bring it back.
    """

    def __init__(
        self,
        base_dir: Path | str,
        log_dir: Path | str | None = None,
        *,
        size: int = 3,
        heap: str = "128m",
        start_timeout: float = 90.0,
    ) -> None:
        self.base_dir = Path(base_dir)
        self.log_dir = Path(log_dir) if log_dir else self.base_dir / "logs"
        self.size = size
        self.heap = heap
        self.start_timeout = start_timeout
        self.members = self._new_members()

    def __repr__(self) -> str:
        return f"<ZooKeeperEnsemble {self.hosts}, logs {self.log_dir}>"

    def _new_members(self) -> list[EnsembleMember]:
        taken: set[int] = set()

        def pick() -> int:
            port = free_port()
            while port in taken:
                port = free_port()
            taken.add(port)
            return port

        ports = {sid: (pick(), pick(), pick()) for sid in range(1, self.size + 1)}
        return [
            EnsembleMember(
                self.base_dir / f"server-{sid}",
                sid,
                ports,
                self.log_dir,
                heap=self.heap,
                start_timeout=self.start_timeout,
            )
            for sid in ports
        ]

    @property
    def hosts(self) -> str:
        """Every member's client address: ``127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3``."""
        return ",".join(member.hosts for member in self.members)

    def start(self) -> Self:
        """Start every member (their JVMs start in parallel) and wait until all serve."""
        for attempt in (1, 2, 3):
            try:
                for member in self.members:
                    member.launch()
                for member in self.members:
                    member.finish_start()
                break
            except LocalStackError:
                lost = any(member._ports_lost() for member in self.members)
                self.stop()
                # Another process may have taken a port between the pick and the bind:
                # every member's config names every port, so all are picked again.
                if attempt == 3 or not lost:
                    raise
                for member in self.members:
                    shutil.rmtree(member.data_dir, ignore_errors=True)
                self.members = self._new_members()
        if self.leader() is None:
            self.stop()
            raise LocalStackError(f"ZooKeeper ensemble has no leader; logs in {self.log_dir}")
        return self

    def leader(self) -> EnsembleMember | None:
        """The member that says it leads, if any."""
        return next((m for m in self.members if m.mode() == "leader"), None)

    def member_with_session(self, session_id: int) -> EnsembleMember | None:
        """The member a client session (kazoo's ``client_id[0]``) is connected to."""
        wanted = f"0x{session_id:x}"
        return next((m for m in self.members if wanted in m.session_ids()), None)

    def stop(self) -> None:
        """Stop every member (idempotent)."""
        for member in self.members:
            member.stop()
