//! Configuration: the server's settings (walnut.conf, `-c` overrides, `-p`) and the per-session
//! settings a client sends in its startup packet.
//!
//! Every setting is validated by `guc::check` and kept as text. The front end reads three of
//! them itself (`listen_addresses`, `port`, `max_connections`); all of them go to
//! `engine::open_engine` and become the session defaults
//! ([`walnut_sql::session::GucDefaults`]).

use crate::guc;
use crate::hba::Hba;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use walnut_common::{Error, Result, SqlState};
use walnut_sql::session::GucDefaults;

/// Default TCP port (PostgreSQL's 5432 plus one, so both can run side by side).
pub const DEFAULT_PORT: u16 = 5433;
/// Default `listen_addresses`: localhost only, because authentication is trust.
pub const DEFAULT_LISTEN_ADDRESSES: &str = "127.0.0.1";
/// Default `max_connections`, as PostgreSQL's.
pub const DEFAULT_MAX_CONNECTIONS: usize = 100;

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
pub fn tls_acceptor(
    dir: &Path,
    settings: &[(String, String)],
) -> Result<Option<pgwire::tokio::TlsAcceptor>> {
    use pgwire::tokio::tokio_rustls::rustls;
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let get = |name: &str| {
        settings
            .iter()
            .rev()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.clone())
    };
    let on = match get("ssl") {
        Some(v) => walnut_sql::guc::value_as_bool("ssl", &v)?,
        None => false,
    };
    if !on {
        return Ok(None);
    }
    let file = |name: &str, default: &str| {
        let f = get(name).unwrap_or_else(|| default.to_string());
        let p = PathBuf::from(&f);
        if p.is_absolute() {
            p
        } else {
            dir.join(p)
        }
    };
    let bad = |what: String| Error::user(SqlState::INVALID_PARAMETER_VALUE, what);
    let cert_path = file("ssl_cert_file", "server.crt");
    let key_path = file("ssl_key_file", "server.key");
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
    /// All settings, in order, as session defaults.
    pub defaults: GucDefaults,
    /// Client authentication.
    pub auth: Arc<AuthConfig>,
    /// TLS, if `ssl = on`: the SSLRequest is answered `S` and the handshake done.
    pub tls: Option<pgwire::tokio::TlsAcceptor>,
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
    fn default() -> Self {
        ServerConfig {
            listen_addresses: DEFAULT_LISTEN_ADDRESSES.to_string(),
            port: DEFAULT_PORT,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            defaults: Vec::new(),
            auth: Arc::new(AuthConfig::default()),
            tls: None,
        }
    }
}

impl ServerConfig {
    /// Builds the configuration from settings already validated by [`load_settings`].
    ///
    /// # Errors
    /// 22023 if port or max_connections is out of range.
    pub fn from_settings(settings: &[(String, String)]) -> Result<ServerConfig> {
        let mut config = ServerConfig {
            defaults: settings.to_vec(),
            ..ServerConfig::default()
        };
        for (name, value) in settings {
            match name.to_ascii_lowercase().as_str() {
                "listen_addresses" => config.listen_addresses = value.clone(),
                "port" => {
                    let port = guc::value_as_i64(name, value)?;
                    config.port = u16::try_from(port).map_err(|_| out_of_range(name, value))?;
                }
                "max_connections" => {
                    let n = guc::value_as_i64(name, value)?;
                    config.max_connections = usize::try_from(n)
                        .ok()
                        .filter(|n| *n >= 1)
                        .ok_or_else(|| out_of_range(name, value))?;
                }
                _ => {}
            }
        }
        Ok(config)
    }
}

fn out_of_range(name: &str, value: &str) -> Error {
    Error::user(
        SqlState::INVALID_PARAMETER_VALUE,
        format!("{value} is outside the valid range for parameter \"{name}\""),
    )
}

/// Reads `dir/walnut.conf`, applies `-c name=value` overrides and `-p`, and validates every
/// setting with `guc::check`. Returns the settings in order (the last value of a name wins and
/// each name appears once), values canonicalised by `check`.
///
/// # Errors
/// I/O errors reading walnut.conf; syntax errors; 42704 unknown names; 22023 bad values.
pub fn load_settings(
    dir: &Path,
    overrides: &[String],
    port: Option<u16>,
) -> Result<Vec<(String, String)>> {
    let conf_path = dir.join("walnut.conf");
    let text = std::fs::read_to_string(&conf_path).map_err(|e| {
        Error::io(
            format!(
                "could not read configuration file \"{}\"",
                conf_path.display()
            ),
            e,
        )
    })?;
    let mut raw = guc::parse_conf(&text)?;
    for o in overrides {
        raw.push(parse_name_value(o).ok_or_else(|| {
            Error::syntax(format!("-c {o} requires a value (expected name=value)"))
        })?);
    }
    if let Some(p) = port {
        raw.push(("port".to_string(), p.to_string()));
    }
    let mut settings: Vec<(String, String)> = Vec::new();
    for (name, value) in raw {
        let value = guc::check(&name, &value)?;
        let key = name.to_ascii_lowercase();
        settings.retain(|(n, _)| n.to_ascii_lowercase() != key);
        settings.push((name, value));
    }
    Ok(settings)
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
    fn server_config_from_settings() {
        let s = pairs(&[
            ("port", "6000"),
            ("max_connections", "7"),
            ("listen_addresses", "*"),
            ("shared_buffers", "1MB"),
        ]);
        let c = ServerConfig::from_settings(&s).unwrap();
        assert_eq!(
            (c.port, c.max_connections, c.listen_addresses.as_str()),
            (6000, 7, "*")
        );
        assert_eq!(c.defaults.len(), 4);
        assert!(ServerConfig::from_settings(&pairs(&[("port", "70000")])).is_err());
        assert!(ServerConfig::from_settings(&pairs(&[("max_connections", "0")])).is_err());
    }

    #[test]
    fn load_settings_overrides() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("walnut.conf"),
            "port = 5500\nmax_connections = 10\n",
        )
        .unwrap();
        let s = load_settings(dir.path(), &["max-connections=20".to_string()], Some(6000)).unwrap();
        assert_eq!(s, pairs(&[("max_connections", "20"), ("port", "6000")]));
        assert!(load_settings(dir.path(), &["nonsense_setting=1".to_string()], None).is_err());
        assert!(load_settings(dir.path(), &["novalue".to_string()], None).is_err());
    }
}
