//! Where the nodes and the lock settings come from: `--nodes`, else `FENCELOCK_NODES`, else a
//! config file, else the dev set of `fencelock up`.
//!
//! Every setting is resolved here, once per invocation, in one order: its flag, else its
//! environment variable (`FENCELOCK_TTL`, `FENCELOCK_NODE_TIMEOUT`, read by clap into the same
//! field as the flag; `FENCELOCK_WAIT`, read by [`wait_mode`] so that `--no-wait` overrides
//! it), else the config file, else the default. The settings of nodes a command started itself
//! come from [`Settings::for_local_nodes`].

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::cli::{parse_duration, Global};
use crate::devset;
use crate::exit::Failure;
pub(crate) use crate::node::TlsFiles;

/// Default time to live of the lock keys: the library's.
pub(crate) const DEFAULT_TTL: Duration = fencelock::Config::DEFAULT_TTL;
/// Default per-node request timeout: the library's (tens of milliseconds, as the article says).
pub(crate) const DEFAULT_NODE_TIMEOUT: Duration = fencelock::Config::DEFAULT_NODE_TIMEOUT;

/// Where the node list came from, for messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Source {
    Flag,
    Env,
    ConfigFile(PathBuf),
    DevSet(PathBuf),
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::Flag => f.write_str("--nodes"),
            Source::Env => f.write_str("FENCELOCK_NODES"),
            Source::ConfigFile(path) => write!(f, "config file {}", path.display()),
            Source::DevSet(path) => write!(f, "the dev set ({})", path.display()),
        }
    }
}

/// The resolved settings of one invocation.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub(crate) nodes: Vec<String>,
    pub(crate) source: Source,
    pub(crate) ttl: Duration,
    pub(crate) node_timeout: Duration,
    pub(crate) drift_factor: Option<f64>,
    pub(crate) fencing: bool,
    /// Restart quarantine; `None` leaves the library's default.
    pub(crate) quarantine: Option<bool>,
    /// `--allow-long-ttl`: a TTL above a day was asked for explicitly.
    pub(crate) long_ttl: bool,
    /// `--connect-timeout`; `None` leaves the library's default.
    pub(crate) connect_timeout: Option<Duration>,
    /// The TLS files (`--tls-ca`, `--tls-cert`, `--tls-key`).
    pub(crate) tls: TlsFiles,
    /// Who holds the locks this command takes (host, pid, `--label`); `None` with --no-holder.
    pub(crate) holder: Option<fencelock::Holder>,
}

impl Settings {
    /// A library config for these settings.
    pub(crate) fn lock_config(&self, fencing: bool) -> fencelock::Config {
        let mut config = fencelock::Config::new(&self.nodes)
            .with_ttl(self.ttl)
            .with_node_timeout(self.node_timeout)
            .with_fencing(fencing || self.fencing)
            .with_long_ttl(self.long_ttl)
            .with_tls(self.tls.config());
        if let Some(holder) = &self.holder {
            config = config.with_holder(holder.clone());
        }
        if let Some(timeout) = self.connect_timeout {
            config = config.with_connect_timeout(timeout);
        }
        if let Some(drift) = self.drift_factor {
            config = config.with_drift_factor(drift);
        }
        if let Some(quarantine) = self.quarantine {
            config = config.with_quarantine(quarantine);
        }
        config
    }

    /// A library client for these settings.
    ///
    /// # Errors
    ///
    /// A [`Failure`] with exit code 2 if the library refuses the configuration (a bad URL, ...).
    pub(crate) async fn client(&self, fencing: bool) -> Result<fencelock::Client, Failure> {
        tracing::info!(
            nodes = self.nodes.len(),
            from = %self.source,
            ttl = ?self.ttl,
            node_timeout = ?self.node_timeout,
            quarantine = ?self.quarantine,
            "settings resolved"
        );
        let client = fencelock::Client::new(self.lock_config(fencing))
            .map_err(|err| Failure::usage(format!("{err} (nodes from {})", self.source)))?;
        warm_up(&client, self.node_timeout).await;
        Ok(client)
    }
}

/// How long the warm-up waits at least for the nodes still connecting once a quorum is up.
const LATE_CONNECTIONS: std::time::Duration = std::time::Duration::from_millis(300);

/// Opens the connections before the first real round: this process lives for one command, so
/// without it every command would spend part of its first per-node timeout connecting.
async fn warm_up(client: &fencelock::Client, node_timeout: std::time::Duration) {
    let n = client.nodes().len();
    // Redis nodes only: an etcd cluster is one voter, whatever its members.
    if n > 1 && n.is_multiple_of(2) && client.quorum() > 1 {
        eprintln!(
            "fencelock: warning: {n} nodes, an even count: a quorum of {} tolerates no more failed nodes than {} would; use 3 or 5 (`fencelock doctor` says the same)",
            client.quorum(),
            n - 1
        );
    }
    // A quorum is enough to start: a node that does not answer (paused) would otherwise add the
    // whole connect timeout to every command.
    let mut votes = client.connect_quorum().await;
    // The nodes still connecting get a little longer: a node that refuses our credentials
    // answers as fast as the others, but on a loaded machine its refusal can come after the
    // quorum's connections, later than one node timeout (50 ms by default) after them. A
    // paused node costs a command that much, not the connect timeout.
    if votes
        .iter()
        .any(|v| matches!(v.outcome, fencelock::VoteOutcome::Pending))
    {
        let grace = node_timeout.max(LATE_CONNECTIONS);
        if let Ok(all) = tokio::time::timeout(grace, client.connect()).await {
            votes = all;
        }
    }
    tracing::info!(%votes, "connected");
    // A node that refuses our credentials would go unnoticed while the others grant; when none
    // grants, the command's error names the refusal instead.
    if votes.granted() > 0 {
        for vote in votes.iter() {
            if let fencelock::VoteOutcome::Failed(e) = &vote.outcome {
                if e.needs_config_change() {
                    eprintln!("fencelock: warning: {}: {e}; {}", vote.node, e.hint());
                }
            }
        }
    }
}

/// The config file's keys. Unknown keys are refused so that a typo does not pass silently.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    nodes: Option<Vec<String>>,
    ttl: Option<String>,
    node_timeout: Option<String>,
    connect_timeout: Option<String>,
    drift_factor: Option<f64>,
    fencing: Option<bool>,
    quarantine: Option<bool>,
    tls_ca: Option<PathBuf>,
    tls_cert: Option<PathBuf>,
    tls_key: Option<PathBuf>,
}

/// Resolves the settings from the global options, the environment and the files.
///
/// # Errors
///
/// A usage [`Failure`] (exit 2) for an unreadable or invalid config file, an empty node list, or
/// no nodes from any source.
pub(crate) fn resolve(global: &Global) -> Result<Settings, Failure> {
    let (file, file_path) = load_config_file(global.config.as_deref())?;
    let path = file_path.as_deref();
    let ttl = match global.ttl {
        Some(ttl) => ttl,
        None => file_duration("ttl", &file.ttl, path)?.unwrap_or(DEFAULT_TTL),
    };
    check_ttl(ttl, global, path)?;
    let node_timeout = match global.node_timeout {
        Some(t) => t,
        None => {
            file_duration("node_timeout", &file.node_timeout, path)?.unwrap_or(DEFAULT_NODE_TIMEOUT)
        }
    };
    let connect_timeout = match global.connect_timeout {
        Some(t) => Some(t),
        None => file_duration("connect_timeout", &file.connect_timeout, path)?,
    };
    // Relative paths in the file are taken from the working directory, as on the command line.
    let tls = TlsFiles {
        ca: global.tls_ca.clone().or(file.tls_ca.clone()),
        cert: global.tls_cert.clone().or(file.tls_cert.clone()),
        key: global.tls_key.clone().or(file.tls_key.clone()),
    };
    let (nodes, source) = resolve_nodes(global, &file, file_path.as_ref())?;
    let quarantine = if global.no_quarantine {
        Some(false)
    } else {
        // The dev set needs no exception: `up` marks its nodes new, so they count at once.
        file.quarantine
    };
    Ok(Settings {
        nodes,
        source,
        ttl,
        node_timeout,
        drift_factor: file.drift_factor,
        fencing: file.fencing.unwrap_or(false),
        quarantine,
        long_ttl: global.allow_long_ttl,
        connect_timeout,
        tls,
        holder: holder(global),
    })
}

/// A duration of the config file at `path` (`None` when the key is not set).
fn file_duration(
    key: &str,
    value: &Option<String>,
    path: Option<&Path>,
) -> Result<Option<Duration>, Failure> {
    value
        .as_deref()
        .map(|text| {
            parse_duration(text).map_err(|e| {
                Failure::usage(format!(
                    "config file {}: key {key}: {e}",
                    path.map_or("?".into(), |p| p.display().to_string())
                ))
            })
        })
        .transpose()
}

/// The node list and where it came from: `--nodes`, else `FENCELOCK_NODES`, else the config
/// file, else the dev set of `fencelock up`.
fn resolve_nodes(
    global: &Global,
    file: &FileConfig,
    file_path: Option<&PathBuf>,
) -> Result<(Vec<String>, Source), Failure> {
    let (nodes, source) = if !global.nodes.is_empty() {
        // `--nodes` splits at every comma; a Sentinel URL's list of Sentinels is put back.
        let list = fencelock::NodeAddr::split_list(&global.nodes.join(","));
        (clean_list(&list), Source::Flag)
    } else if let Ok(env) = std::env::var("FENCELOCK_NODES") {
        // Set but empty is a mistake (a variable of a template left blank), not a wish for the
        // dev set: falling back would lock on whatever nodes `up` left on this machine.
        if env.trim().is_empty() {
            return Err(Failure::usage(
                "FENCELOCK_NODES is set but empty; give it node URLs (redis://host:6379,...), or unset it to use the config file or the dev set of `fencelock up`",
            ));
        }
        let list = fencelock::NodeAddr::split_list(&env);
        (clean_list(&list), Source::Env)
    } else if let (Some(nodes), Some(path)) = (file.nodes.as_ref(), file_path) {
        (clean_list(nodes), Source::ConfigFile(path.clone()))
    } else {
        dev_set_nodes()?
    };
    if nodes.is_empty() {
        return Err(Failure::usage(format!(
            "the node list from {source} is empty; give at least one node URL such as redis://127.0.0.1:6379"
        )));
    }
    Ok((nodes, source))
}

/// The nodes of the dev set `fencelock up` started, when no other source names any.
fn dev_set_nodes() -> Result<(Vec<String>, Source), Failure> {
    let state_path = devset::state_path()?;
    match devset::load(&state_path)? {
        Some(state) => {
            eprintln!(
                "fencelock: no --nodes, FENCELOCK_NODES or config file; using the dev set of {} node(s) from {}",
                state.nodes.len(),
                state_path.display()
            );
            Ok((state.urls(), Source::DevSet(state_path)))
        }
        None => Err(Failure::usage(
            "no nodes: give --nodes redis://127.0.0.1:6379,..., set FENCELOCK_NODES, write a config file (--config), or start a local dev set with `fencelock up`",
        )),
    }
}

/// The holder label of `--label` and `--no-holder`: this host and process, by default.
pub(crate) fn holder(global: &Global) -> Option<fencelock::Holder> {
    if global.no_holder {
        return None;
    }
    let holder = fencelock::Holder::this_process();
    Some(match &global.label {
        Some(label) => holder.with_label(label.clone()),
        None => holder,
    })
}

/// Refuses a TTL above a day unless `--allow-long-ttl`, in the command line's words (the
/// library refuses it too, naming its setter).
fn check_ttl(ttl: Duration, global: &Global, file: Option<&Path>) -> Result<(), Failure> {
    let limit = fencelock::Config::LONG_TTL;
    if ttl <= limit || (global.allow_long_ttl && ttl <= fencelock::Config::MAX_TTL) {
        return Ok(());
    }
    let from = match (global.ttl, file) {
        (Some(_), _) => "--ttl or FENCELOCK_TTL".to_owned(),
        (None, Some(path)) => format!("config file {}", path.display()),
        (None, None) => "the default".to_owned(),
    };
    let shown = humantime::format_duration(ttl);
    if ttl > fencelock::Config::MAX_TTL {
        return Err(Failure::usage(format!(
            "TTL {shown} (from {from}) is longer than any backend keeps a key (about 285 years, etcd's largest lease); use seconds to minutes: `run` extends the lock while the command works"
        )));
    }
    Err(Failure::usage(format!(
        "TTL {shown} (from {from}) is longer than a day: if the holder dies, nobody can take the lock for that long (only deleting its keys clears it). Use seconds to minutes (`run` extends the lock while the command works), or pass --allow-long-ttl if you mean it"
    )))
}

/// How long to wait for a lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WaitMode {
    /// One attempt.
    NoWait,
    /// Retry until this much time has passed.
    Wait(Duration),
    /// Retry as long as another client holds the lock.
    Forever,
}

/// The wait of `run`, `elect` and `acquire`, resolved in one order: `--no-wait`, else
/// `--wait`, else `FENCELOCK_WAIT`, else the command's `default`. The variable is read here,
/// not by clap, so that `--no-wait` overrides it instead of conflicting with it.
///
/// # Errors
///
/// A usage [`Failure`] if `FENCELOCK_WAIT` is set but not a duration.
pub(crate) fn wait_mode(
    no_wait: bool,
    flag: Option<Duration>,
    default: WaitMode,
) -> Result<WaitMode, Failure> {
    if no_wait {
        return Ok(WaitMode::NoWait);
    }
    let wait = match flag {
        Some(wait) => Some(wait),
        None => match std::env::var("FENCELOCK_WAIT") {
            Ok(text) if !text.trim().is_empty() => Some(
                parse_duration(&text)
                    .map_err(|e| Failure::usage(format!("FENCELOCK_WAIT={text:?}: {e}")))?,
            ),
            _ => None,
        },
    };
    Ok(wait.map_or(default, WaitMode::Wait))
}

impl Settings {
    /// The settings for nodes this invocation started itself (`bench --local`): the global
    /// options where they apply, no config file, and no restart quarantine (fresh nodes never
    /// granted a lock they could have forgotten).
    pub(crate) fn for_local_nodes(global: &Global, nodes: Vec<String>) -> Settings {
        Settings {
            nodes,
            source: Source::Flag,
            ttl: global.ttl.unwrap_or(DEFAULT_TTL),
            node_timeout: global.node_timeout.unwrap_or(DEFAULT_NODE_TIMEOUT),
            drift_factor: None,
            fencing: false,
            quarantine: Some(false),
            long_ttl: global.allow_long_ttl,
            connect_timeout: global.connect_timeout,
            tls: TlsFiles::default(),
            holder: holder(global),
        }
    }
}

fn clean_list(list: &[String]) -> Vec<String> {
    list.iter()
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .collect()
}

/// The default config file: `$XDG_CONFIG_HOME/fencelock/config.toml` or
/// `~/.config/fencelock/config.toml`.
fn default_config_path() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_CONFIG_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")))?;
    Some(base.join("fencelock").join("config.toml"))
}

fn load_config_file(flag: Option<&Path>) -> Result<(FileConfig, Option<PathBuf>), Failure> {
    let explicit = flag.map(Path::to_path_buf).or_else(|| {
        std::env::var_os("FENCELOCK_CONFIG")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    });
    let path = match explicit {
        Some(path) => path,
        None => match default_config_path() {
            Some(path) if path.is_file() => path,
            _ => return Ok((FileConfig::default(), None)),
        },
    };
    let text = std::fs::read_to_string(&path).map_err(|e| {
        Failure::usage(format!(
            "cannot read config file {}: {e}; check the path given to --config or FENCELOCK_CONFIG",
            path.display()
        ))
    })?;
    let file: FileConfig = toml::from_str(&text).map_err(|e| {
        Failure::usage(format!(
            "config file {} is not valid: {}; expected keys: nodes = [\"redis://...\"], ttl = \"30s\", node_timeout = \"50ms\", connect_timeout = \"1s\", drift_factor = 0.01, fencing = false, quarantine = true, tls_ca = \"ca.pem\", tls_cert = \"client.pem\", tls_key = \"client.key\"",
            path.display(),
            e.message()
        ))
    })?;
    Ok((file, Some(path)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_file_keys_parse() {
        let file: FileConfig =
            toml::from_str("nodes = [\"redis://a:1\"]\nttl = \"10s\"\nfencing = true\n").unwrap();
        assert_eq!(file.nodes.unwrap(), ["redis://a:1"]);
        assert_eq!(file.ttl.as_deref(), Some("10s"));
        assert_eq!(file.fencing, Some(true));
        let file: FileConfig = toml::from_str(
            "connect_timeout = \"2s\"\ntls_ca = \"ca.pem\"\ntls_cert = \"c.pem\"\ntls_key = \"c.key\"\n",
        )
        .unwrap();
        assert_eq!(file.connect_timeout.as_deref(), Some("2s"));
        assert_eq!(file.tls_key, Some(PathBuf::from("c.key")));
        assert!(toml::from_str::<FileConfig>("nodez = []").is_err());
    }

    #[test]
    fn lists_are_trimmed() {
        assert_eq!(
            clean_list(&[" redis://a:1 ".into(), "".into()]),
            ["redis://a:1"]
        );
    }
}
