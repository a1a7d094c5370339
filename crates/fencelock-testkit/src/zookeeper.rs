//! ZooKeeper servers from Debian's `zookeeper` package (3.8): one standalone server, or the
//! members of a static ensemble, each a `java ... QuorumPeerMain zoo.cfg` child process with its
//! own data directory and loopback ports, never the packaged service.

use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

use crate::ports::free_port;
use crate::process::{retry_addr_in_use, ServerProcess, STOP_GRACE};

/// The server's jar; its manifest's `Class-Path` names the jars it needs.
const DEFAULT_JAR: &str = "/usr/share/java/zookeeper.jar";
/// A logger binding, so that the server's log says something (without one it logs nothing).
const LOG_BINDING: &str = "/usr/share/java/slf4j-simple.jar";
const INSTALL_HINT: &str = "apt-get install zookeeper default-jre-headless libslf4j-java";
/// ZooKeeper's time unit. Sessions may last 2 to 120 ticks (set below), so tests can ask for a
/// session timeout of 1 s or of a minute.
const TICK_MS: u64 = 500;
/// A JVM start and, for an ensemble, an election, on a loaded machine.
const START_TIMEOUT: Duration = Duration::from_secs(60);
/// One four-letter-word probe.
const PROBE_TIMEOUT: Duration = Duration::from_millis(1000);

/// One ZooKeeper server process: a standalone server ([`ZooKeeper::start`]) or a member of a
/// [`ZooKeeperEnsemble`].
///
/// Control methods take `&self`. Dropping it kills and reaps the process; a standalone server
/// also removes its directory.
#[derive(Debug)]
pub struct ZooKeeper {
    id: usize,
    client_port: u16,
    cfg: PathBuf,
    process: ServerProcess,
    /// The temporary directory of a standalone server (an ensemble owns its own).
    _dir: Option<tempfile::TempDir>,
}

impl ZooKeeper {
    /// Starts a standalone server and waits until it serves clients.
    ///
    /// # Errors
    ///
    /// Fails when java or the zookeeper package is missing, or the server does not serve within
    /// 60 s.
    pub fn start() -> io::Result<ZooKeeper> {
        retry_addr_in_use(5, || {
            let dir = tempfile::Builder::new().prefix("fencelock-zk-").tempdir()?;
            let port = free_port()?;
            let mut zk = ZooKeeper::configure(dir.path(), 1, port, "")?;
            zk._dir = Some(dir);
            zk.spawn()?;
            zk.wait_serving()?;
            Ok(zk)
        })
    }

    /// Writes the member's configuration (`servers`: the `server.N=` lines of an ensemble,
    /// empty for a standalone server).
    fn configure(dir: &Path, id: usize, client_port: u16, servers: &str) -> io::Result<ZooKeeper> {
        let data = dir.join(format!("zk{id}"));
        std::fs::create_dir_all(&data)?;
        std::fs::write(data.join("myid"), format!("{id}\n"))?;
        let cfg = dir.join(format!("zk{id}.cfg"));
        let text = format!(
            "tickTime={TICK_MS}\n\
             initLimit=20\n\
             syncLimit=10\n\
             dataDir={}\n\
             clientPort={client_port}\n\
             clientPortAddress=127.0.0.1\n\
             minSessionTimeout={}\n\
             maxSessionTimeout={}\n\
             admin.enableServer=false\n\
             4lw.commands.whitelist=ruok,srvr,stat,cons,dump,wchp,wchc\n\
             {servers}",
            data.display(),
            2 * TICK_MS,
            120 * TICK_MS,
        );
        std::fs::write(&cfg, text)?;
        let log = dir.join(format!("zk{id}.log"));
        Ok(ZooKeeper {
            id,
            client_port,
            cfg,
            process: ServerProcess::new(format!("zookeeper {id} on port {client_port}"), log),
            _dir: None,
        })
    }

    pub(crate) fn member(
        dir: &Path,
        id: usize,
        client_port: u16,
        servers: &str,
    ) -> io::Result<ZooKeeper> {
        ZooKeeper::configure(dir, id, client_port, servers)
    }

    pub(crate) fn spawn(&self) -> io::Result<()> {
        let jar = std::env::var("FENCELOCK_ZOOKEEPER_JAR").unwrap_or_else(|_| DEFAULT_JAR.into());
        if !Path::new(&jar).exists() {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("{jar} not found: {INSTALL_HINT}"),
            ));
        }
        let mut classpath = jar;
        if Path::new(LOG_BINDING).exists() {
            classpath = format!("{classpath}:{LOG_BINDING}");
        }
        let mut cmd = Command::new("java");
        cmd.arg("-Xmx256m")
            .arg("-XX:+UseSerialGC")
            .arg("-Dzookeeper.admin.enableServer=false")
            .arg("-Dorg.slf4j.simpleLogger.defaultLogLevel=info")
            .arg("-Dorg.slf4j.simpleLogger.showDateTime=true")
            .arg("-cp")
            .arg(classpath)
            .arg("org.apache.zookeeper.server.quorum.QuorumPeerMain")
            .arg(&self.cfg);
        self.process.spawn(&mut cmd, INSTALL_HINT)
    }

    /// Waits until the server answers `srvr` with a mode (standalone, leader or follower): it
    /// serves clients.
    pub(crate) fn wait_serving(&self) -> io::Result<()> {
        self.process.wait_ready(START_TIMEOUT, || self.serving())
    }

    /// Whether the server serves clients now (a member without a quorum does not).
    pub fn serving(&self) -> bool {
        self.four_letter("srvr")
            .is_ok_and(|text| text.contains("Mode:"))
    }

    /// The server's mode: `"standalone"`, `"leader"` or `"follower"`; `None` when it does not
    /// serve.
    pub fn mode(&self) -> Option<String> {
        let text = self.four_letter("srvr").ok()?;
        text.lines()
            .find_map(|l| l.strip_prefix("Mode: "))
            .map(|m| m.trim().to_string())
    }

    /// Sends a four-letter word (`srvr`, `cons`, `dump`, `ruok`, `stat`, `wchp`: the watched
    /// paths and their sessions, `wchc`) and returns the answer.
    ///
    /// # Errors
    ///
    /// Fails when the server does not answer within a second.
    pub fn four_letter(&self, word: &str) -> io::Result<String> {
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, self.client_port));
        let mut stream = TcpStream::connect_timeout(&addr, PROBE_TIMEOUT)?;
        stream.set_read_timeout(Some(PROBE_TIMEOUT))?;
        stream.set_write_timeout(Some(PROBE_TIMEOUT))?;
        stream.write_all(word.as_bytes())?;
        let mut text = String::new();
        stream.read_to_string(&mut text)?;
        Ok(text)
    }

    /// The member's id (1 for a standalone server).
    pub fn id(&self) -> usize {
        self.id
    }

    /// The client port.
    pub fn port(&self) -> u16 {
        self.client_port
    }

    /// `127.0.0.1:<client port>`.
    pub fn host_port(&self) -> String {
        format!("127.0.0.1:{}", self.client_port)
    }

    /// `zk://127.0.0.1:<client port>`, fencelock's URL of this server alone.
    pub fn url(&self) -> String {
        format!("zk://{}", self.host_port())
    }

    /// The pid while a process exists.
    pub fn pid(&self) -> Option<u32> {
        self.process.pid()
    }

    /// Stops the server gracefully (SIGTERM, then SIGKILL after a grace period).
    ///
    /// # Errors
    ///
    /// As the signal and the wait.
    pub fn stop(&self) -> io::Result<()> {
        self.process.terminate(libc::SIGTERM, STOP_GRACE)
    }

    /// SIGKILLs the server and reaps it.
    ///
    /// # Errors
    ///
    /// As the signal and the wait.
    pub fn kill(&self) -> io::Result<()> {
        self.process.kill()
    }

    /// Starts the server again on the same port and data directory (its data survives), and
    /// waits until it serves (for a member: until the ensemble has a quorum with it).
    ///
    /// # Errors
    ///
    /// As [`ZooKeeper::start`].
    pub fn restart(&self) -> io::Result<()> {
        self.process.kill()?;
        self.spawn()?;
        self.wait_serving()
    }

    /// Starts the stopped member again without waiting for it to serve.
    ///
    /// # Errors
    ///
    /// As the spawn.
    pub fn restart_no_wait(&self) -> io::Result<()> {
        self.process.kill()?;
        self.spawn()
    }

    /// SIGSTOP: the process holds its connections and answers nothing.
    ///
    /// # Errors
    ///
    /// When the process is not running.
    pub fn pause(&self) -> io::Result<()> {
        self.process.signal(libc::SIGSTOP)
    }

    /// SIGCONT after [`ZooKeeper::pause`].
    ///
    /// # Errors
    ///
    /// When the process is not running.
    pub fn resume(&self) -> io::Result<()> {
        self.process.signal(libc::SIGCONT)
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        self.process.log()
    }
}

/// A static ZooKeeper ensemble of N members on loopback ports.
///
/// Dropping it kills every member and removes the directory.
#[derive(Debug)]
pub struct ZooKeeperEnsemble {
    members: Vec<ZooKeeper>,
    _dir: tempfile::TempDir,
}

impl ZooKeeperEnsemble {
    /// Starts `n` members (3 or 5 for a quorum that survives a loss) and waits until every
    /// member serves (a leader was elected and the followers synced).
    ///
    /// # Errors
    ///
    /// As [`ZooKeeper::start`].
    pub fn start(n: usize) -> io::Result<ZooKeeperEnsemble> {
        retry_addr_in_use(5, || {
            let dir = tempfile::Builder::new()
                .prefix("fencelock-zkens-")
                .tempdir()?;
            let mut servers = String::new();
            let mut clients = Vec::new();
            for id in 1..=n {
                let (quorum, election, client) = (free_port()?, free_port()?, free_port()?);
                servers.push_str(&format!("server.{id}=127.0.0.1:{quorum}:{election}\n"));
                clients.push(client);
            }
            let members = clients
                .iter()
                .enumerate()
                .map(|(i, port)| ZooKeeper::member(dir.path(), i + 1, *port, &servers))
                .collect::<io::Result<Vec<_>>>()?;
            for m in &members {
                m.spawn()?;
            }
            let ensemble = ZooKeeperEnsemble { members, _dir: dir };
            for m in &ensemble.members {
                m.wait_serving()?;
            }
            Ok(ensemble)
        })
    }

    /// Member `i` (0-based).
    pub fn member(&self, i: usize) -> &ZooKeeper {
        &self.members[i]
    }

    /// Every member.
    pub fn members(&self) -> &[ZooKeeper] {
        &self.members
    }

    /// `zk://host:port,host:port,...`: fencelock's URL of the whole ensemble.
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self.members.iter().map(ZooKeeper::host_port).collect();
        format!("zk://{}", hosts.join(","))
    }

    /// The index of the current leader, waiting up to 60 s for one.
    ///
    /// # Errors
    ///
    /// When no member says it leads within 60 s.
    pub fn leader(&self) -> io::Result<usize> {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Some(i) = self
                .members
                .iter()
                .position(|m| m.mode().as_deref() == Some("leader"))
            {
                return Ok(i);
            }
            if Instant::now() >= deadline {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "no ZooKeeper member leads after 60 s",
                ));
            }
            thread::sleep(Duration::from_millis(100));
        }
    }
}
