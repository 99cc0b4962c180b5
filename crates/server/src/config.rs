//! Configuration: the server's settings (walnut.conf, walnut.auto.conf, `-c` overrides, `-p`),
//! read once into a [`Config`] (`walnut_common::config`) whose values every part reads typed,
//! and the per-session settings a client sends in its startup packet.
//!
//! The front end reads its own parameters (`crate::guc`: `listen_addresses`, `port`,
//! `max_connections`, `ssl*`, `log_min_messages`) into a [`ServerConfig`]; the storage engine
//! reads its own when the data directory opens (`crate::engine::open`); sessions read the
//! rest, and every value `SHOW` and `pg_settings` report comes from the same [`Config`].

use crate::guc;
use crate::hba::Hba;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use walnut_common::config::Config;
use walnut_common::guc::Settings;
use walnut_common::{Error, Result, SqlState};

/// Client authentication: the pg_hba rules, and the data directory whose
/// `global/pg_authid` holds role passwords.
#[derive(Clone, Debug)]
pub struct AuthConfig {
    /// The rules (`DATADIR/pg_hba.conf`, or the loopback-only default).
    pub hba: Hba,
    /// Where `global/pg_authid` is; `None`: no role has a password.
    pub datadir: Option<PathBuf>,
}

impl Default for AuthConfig {
    /// Trust from loopback addresses only, no passwords (in-process servers and tests).
    fn default() -> Self {
        AuthConfig {
            hba: Hba::parse(crate::hba::DEFAULT_HBA).expect("the default rules parse"),
            datadir: None,
        }
    }
}

impl AuthConfig {
    /// The rules and passwords of data directory `dir`.
    ///
    /// # Errors
    /// 22023 with the file and line if pg_hba.conf is malformed.
    pub fn load(dir: &Path) -> Result<AuthConfig> {
        Ok(AuthConfig {
            hba: Hba::load(dir).map_err(|e| Error::user(SqlState::INVALID_PARAMETER_VALUE, e))?,
            datadir: Some(dir.to_path_buf()),
        })
    }
}

/// TLS for client connections (`ssl = on`): the acceptor built from `ssl_cert_file` and
/// `ssl_key_file` (PEM, relative to the data directory), with rustls and the ring provider.
///
/// # Errors
/// 22023 naming the file if a certificate or key cannot be read or does not fit.
pub fn tls_acceptor(dir: &Path, settings: &Settings) -> Result<Option<pgwire::tokio::TlsAcceptor>> {
    use pgwire::tokio::tokio_rustls::rustls;
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    if !settings.bool(&guc::SSL_ON) {
        return Ok(None);
    }
    let file = |def| {
        let p = PathBuf::from(settings.text(def));
        if p.is_absolute() {
            p
        } else {
            dir.join(p)
        }
    };
    let bad = |what: String| Error::user(SqlState::INVALID_PARAMETER_VALUE, what);
    let cert_path = file(&guc::SSL_CERT_FILE);
    let key_path = file(&guc::SSL_KEY_FILE);
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&cert_path)
        .and_then(|it| it.collect::<std::result::Result<Vec<_>, _>>())
        .map_err(|e| {
            bad(format!(
                "could not load server certificate file \"{}\": {e}",
                cert_path.display()
            ))
        })?;
    if certs.is_empty() {
        return Err(bad(format!(
            "server certificate file \"{}\" holds no certificate",
            cert_path.display()
        )));
    }
    let key = PrivateKeyDer::from_pem_file(&key_path).map_err(|e| {
        bad(format!(
            "could not load private key file \"{}\": {e}",
            key_path.display()
        ))
    })?;
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| bad(format!("TLS configuration: {e}")))?
    .with_no_client_auth()
    .with_single_cert(certs, key)
    .map_err(|e| {
        bad(format!(
            "private key file \"{}\" does not match the certificate: {e}",
            key_path.display()
        ))
    })?;
    Ok(Some(pgwire::tokio::TlsAcceptor::from(Arc::new(config))))
}

/// Everything the front end needs to start listening.
#[derive(Clone)]
pub struct ServerConfig {
    /// Comma-separated host names or addresses (`*` = all IPv4 and IPv6 addresses).
    pub listen_addresses: String,
    /// TCP port; 0 picks an ephemeral port (tests, `walnut demo`).
    pub port: u16,
    /// Sessions allowed at once; the next one gets FATAL 53300.
    pub max_connections: usize,
    /// The live configuration: every session's defaults, `SHOW`, `pg_settings`, reloads.
    pub config: Arc<Config>,
    /// Client authentication.
    pub auth: Arc<AuthConfig>,
    /// TLS, if `ssl = on`: the SSLRequest is answered `S` and the handshake done.
    pub tls: Option<pgwire::tokio::TlsAcceptor>,
    /// The WAL replication connections stream (`None`: they are refused).
    pub wal_source: Option<Arc<crate::protocol::walsender::WalSource>>,
}

impl std::fmt::Debug for ServerConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerConfig")
            .field("listen_addresses", &self.listen_addresses)
            .field("port", &self.port)
            .field("max_connections", &self.max_connections)
            .field("auth", &self.auth)
            .field("tls", &self.tls.is_some())
            .finish()
    }
}

impl Default for ServerConfig {
    /// Every parameter at its default, without configuration files; trust from loopback.
    fn default() -> Self {
        let config = Config::in_memory(guc::registry(), &[]).expect("the defaults are valid");
        ServerConfig::new(Arc::new(config))
    }
}

impl ServerConfig {
    /// The front end's parameters from `config` (no TLS, loopback-only trust: the caller sets
    /// `auth` and `tls` for a real server).
    pub fn new(config: Arc<Config>) -> ServerConfig {
        let s = config.settings();
        ServerConfig {
            listen_addresses: s.text(&guc::LISTEN_ADDRESSES),
            port: u16::try_from(s.int(&guc::PORT)).expect("the registry bounds port"),
            max_connections: s.int(&guc::MAX_CONNECTIONS) as usize,
            config,
            auth: Arc::new(AuthConfig::default()),
            tls: None,
            wal_source: None,
        }
    }
}

/// Reads `dir/walnut.conf` and `dir/walnut.auto.conf`, then the command line: `-c name=value`
/// overrides (`overrides`) and `-p` (`port`). Every name and value is validated.
///
/// # Errors
/// I/O errors reading walnut.conf; syntax errors (42601), unknown names (42704) and bad values
/// (22023), naming the file and line.
pub fn load(dir: &Path, overrides: &[String], port: Option<u16>) -> Result<Arc<Config>> {
    let mut pairs = Vec::with_capacity(overrides.len() + 1);
    for o in overrides {
        pairs.push(parse_name_value(o).ok_or_else(|| {
            Error::syntax(format!("-c {o} requires a value (expected name=value)"))
        })?);
    }
    if let Some(p) = port {
        pairs.push(("port".to_string(), p.to_string()));
    }
    Ok(Arc::new(Config::load(dir, guc::registry(), pairs)?))
}

/// Splits `name=value`, turning dashes in the name into underscores as PostgreSQL's
/// `ParseLongOption` does. `None` without `=`.
fn parse_name_value(s: &str) -> Option<(String, String)> {
    let (name, value) = s.split_once('=')?;
    if name.is_empty() {
        return None;
    }
    Some((name.replace('-', "_"), value.to_string()))
}

/// Splits the startup packet's `options` string into words as PostgreSQL's `pg_split_opts`:
/// words are separated by whitespace and a backslash takes the next character literally
/// (`\ ` is a space inside a word, `\\` a backslash).
pub fn split_options(options: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut chars = options.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        if chars.peek().is_none() {
            return words;
        }
        let mut word = String::new();
        while let Some(c) = chars.next() {
            if c.is_whitespace() {
                break;
            }
            if c == '\\' {
                if let Some(escaped) = chars.next() {
                    word.push(escaped);
                }
                continue;
            }
            word.push(c);
        }
        words.push(word);
    }
}

/// Parses the startup `options` string (`-c name=value`, `-cname=value`, `--name=value`) into
/// setting pairs.
///
/// # Errors
/// 42601 for any other switch or a setting without a value, as PostgreSQL's
/// "invalid command-line argument for server process".
pub fn parse_startup_options(options: &str) -> Result<Vec<(String, String)>> {
    let words = split_options(options);
    let mut out = Vec::new();
    let mut i = 0;
    while i < words.len() {
        let word = &words[i];
        let setting = if word == "-c" {
            i += 1;
            let arg = words
                .get(i)
                .ok_or_else(|| Error::syntax("-c requires a value"))?;
            parse_name_value(arg)
                .ok_or_else(|| Error::syntax(format!("-c {arg} requires a value")))?
        } else if let Some(arg) = word.strip_prefix("--") {
            parse_name_value(arg)
                .ok_or_else(|| Error::syntax(format!("--{arg} requires a value")))?
        } else if let Some(arg) = word.strip_prefix("-c") {
            parse_name_value(arg)
                .ok_or_else(|| Error::syntax(format!("-c {arg} requires a value")))?
        } else {
            return Err(Error::syntax(format!(
                "invalid command-line argument for server process: {word}"
            ))
            .with_detail("Only -c name=value and --name=value are supported in options."));
        };
        out.push(setting);
        i += 1;
    }
    Ok(out)
}

/// Startup-packet keys that are not settings.
const NON_SETTING_STARTUP_KEYS: &[&str] = &["user", "database", "options", "replication"];

/// The settings a session starts with, from its startup packet: first the `options` switches,
/// then every other parameter except `user`, `database` and `replication` (as PostgreSQL,
/// which treats `application_name`, `client_encoding`, `DateStyle`, ... as settings).
///
/// # Errors
/// As [`parse_startup_options`].
pub fn session_options(params: &BTreeMap<String, String>) -> Result<Vec<(String, String)>> {
    let mut out = match params.get("options") {
        Some(options) => parse_startup_options(options)?,
        None => Vec::new(),
    };
    for (k, v) in params {
        if k.starts_with("_pq_.") || NON_SETTING_STARTUP_KEYS.contains(&k.as_str()) {
            continue;
        }
        out.push((k.clone(), v.clone()));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(v: &[(&str, &str)]) -> Vec<(String, String)> {
        v.iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    }

    #[test]
    fn split_with_escapes() {
        assert_eq!(
            split_options("  -c  a=b\t--x=y "),
            vec!["-c", "a=b", "--x=y"]
        );
        assert_eq!(
            split_options(r"-c application_name=my\ app"),
            vec!["-c", "application_name=my app"]
        );
        assert_eq!(
            split_options(r"-c a=back\\slash"),
            vec!["-c", r"a=back\slash"]
        );
        assert!(split_options("   ").is_empty());
    }

    #[test]
    fn options_forms() {
        let got = parse_startup_options(r"-c synchronous_commit=off -cstatement_timeout=5s --commit-delay=10 -c application_name=a\ b").unwrap();
        assert_eq!(
            got,
            pairs(&[
                ("synchronous_commit", "off"),
                ("statement_timeout", "5s"),
                ("commit_delay", "10"),
                ("application_name", "a b"),
            ])
        );
        // Values keep their '=' signs after the first.
        assert_eq!(
            parse_startup_options("-c search_path=a=b").unwrap(),
            pairs(&[("search_path", "a=b")])
        );
        assert_eq!(parse_startup_options("").unwrap(), vec![]);
    }

    #[test]
    fn options_errors() {
        for bad in ["-c", "-c foo", "--foo", "-B 100", "stray", "--=x"] {
            let err = parse_startup_options(bad).unwrap_err();
            assert_eq!(err.sqlstate, SqlState::SYNTAX_ERROR, "{bad}");
        }
    }

    #[test]
    fn session_options_from_startup_packet() {
        let mut params = BTreeMap::new();
        params.insert("user".to_string(), "alice".to_string());
        params.insert("database".to_string(), "db".to_string());
        params.insert("application_name".to_string(), "pgbench".to_string());
        params.insert(
            "options".to_string(),
            "-c synchronous_commit=off".to_string(),
        );
        params.insert("_pq_.protocol_ext".to_string(), "x".to_string());
        assert_eq!(
            session_options(&params).unwrap(),
            pairs(&[
                ("synchronous_commit", "off"),
                ("application_name", "pgbench")
            ])
        );
    }

    #[test]
    fn load_applies_files_then_command_line() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("walnut.conf"),
            "port = 5500\nmax_connections = 10\nlisten_addresses = '*'\n",
        )
        .unwrap();
        let c = load(dir.path(), &["max-connections=20".to_string()], Some(6000)).unwrap();
        let s = ServerConfig::new(c.clone());
        assert_eq!(
            (s.port, s.max_connections, s.listen_addresses.as_str()),
            (6000, 20, "*")
        );
        assert_eq!(c.settings().show("max_connections").unwrap(), "20");
        assert!(load(dir.path(), &["nonsense_setting=1".to_string()], None).is_err());
        assert!(load(dir.path(), &["novalue".to_string()], None).is_err());
        assert!(load(dir.path(), &["port=70000".to_string()], None).is_err());
        assert!(load(dir.path(), &["max_connections=0".to_string()], None).is_err());
        assert!(load(dir.path(), &["fsync=off".to_string()], None).is_err());
    }
}
