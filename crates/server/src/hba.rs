//! Client authentication rules: `DATADIR/pg_hba.conf`, in PostgreSQL's format
//! (`src/backend/libpq/hba.c`, "The pg_hba.conf File" in the manual), for TCP connections.
//!
//! Each non-comment line is `TYPE DATABASE USER ADDRESS METHOD`:
//!
//! | field    | accepted |
//! |----------|----------|
//! | TYPE     | `host` (TLS or not), `hostssl` (TLS only), `hostnossl` (plain only); `local` lines are ignored (walnut has no Unix-domain socket) |
//! | DATABASE | `all`, `replication`, or a comma-separated list of these and names (a quoted `"all"` or `"replication"` is a name) |
//! | USER     | `all` or a comma-separated list of names |
//! | ADDRESS  | `all`, a CIDR (`127.0.0.1/32`, `::1/128`, `0.0.0.0/0`), or an address followed by a mask column (`192.168.0.0 255.255.0.0`) |
//! | METHOD   | `trust`, `reject`, `scram-sha-256`; `md5` and `password` mean `scram-sha-256` (as PostgreSQL does for `md5` when the stored password is a SCRAM verifier: walnut stores no other kind and never sends a password in clear) |
//!
//! The first line whose type, database, user and address match decides; no match rejects the
//! connection (28000, "no pg_hba.conf entry for host ..."). As in PostgreSQL, a physical
//! replication connection (`replication=true`) matches only lines whose DATABASE has the
//! `replication` keyword, and `all` does not match it; a `replication=database` connection
//! matches by its database name like any other. Without a file the rules are [`DEFAULT_HBA`]:
//! trust from the loopback addresses only, for sessions and for replication, what
//! `walnut initdb` writes.

use std::net::IpAddr;
use std::path::Path;

/// What `walnut initdb` writes, and the rules in force when the file is missing.
pub const DEFAULT_HBA: &str = "\
# walnut client authentication (PostgreSQL's pg_hba.conf format)
# TYPE      DATABASE  USER  ADDRESS        METHOD
#
# Trust on the loopback interface only. To require passwords, set one with
# `walnut passwd -D DATADIR -U USER` and change the method to scram-sha-256.
host        all          all   127.0.0.1/32   trust
host        all          all   ::1/128        trust
# Physical replication connections (walsenders) match only the `replication` keyword.
host        replication  all   127.0.0.1/32   trust
host        replication  all   ::1/128        trust
";

/// Which connections a line is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConnType {
    /// Any TCP connection.
    Host,
    /// TCP with TLS.
    HostSsl,
    /// TCP without TLS.
    HostNoSsl,
}

/// How a matching connection authenticates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    /// Accepted without a password.
    Trust,
    /// Refused.
    Reject,
    /// SCRAM-SHA-256 (RFC 7677) against the role's stored verifier.
    ScramSha256,
}

/// One rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    /// Line number in the file (1-based), for messages.
    pub line: usize,
    /// Connection type.
    pub conn: ConnType,
    /// Database names (quoted keywords are names here).
    pub databases: Vec<String>,
    /// The DATABASE field has `all`: every database, but not physical replication.
    pub all_databases: bool,
    /// The DATABASE field has `replication`: physical replication connections.
    pub replication: bool,
    /// User names; empty means `all`.
    pub users: Vec<String>,
    /// Network and prefix length in bits; `None` means `all`.
    pub network: Option<(IpAddr, u8)>,
    /// Method.
    pub method: Method,
}

/// The rules, in file order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hba {
    rules: Vec<Rule>,
}

/// Folds an IPv4-mapped IPv6 address (`::ffff:a.b.c.d`) to IPv4, so rules match either form.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

fn in_network(ip: IpAddr, net: IpAddr, bits: u8) -> bool {
    match (canonical(ip), canonical(net)) {
        (IpAddr::V4(a), IpAddr::V4(n)) => {
            let mask = if bits == 0 {
                0
            } else {
                u32::MAX << (32 - u32::from(bits))
            };
            u32::from(a) & mask == u32::from(n) & mask
        }
        (IpAddr::V6(a), IpAddr::V6(n)) => {
            let mask = if bits == 0 {
                0
            } else {
                u128::MAX << (128 - u32::from(bits))
            };
            u128::from(a) & mask == u128::from(n) & mask
        }
        _ => false,
    }
}

/// Prefix length of a netmask written as an address (`255.255.0.0` is 16), if contiguous.
fn mask_bits(mask: IpAddr) -> Option<u8> {
    let (v, width): (u128, u32) = match mask {
        IpAddr::V4(m) => (u128::from(u32::from(m)) << 96, 32),
        IpAddr::V6(m) => (u128::from(m), 128),
    };
    let ones = v.leading_ones();
    (v.checked_shl(ones).unwrap_or(0) == 0 && ones <= width).then_some(ones as u8)
}

fn names(field: &str) -> Vec<String> {
    if field == "all" {
        Vec::new()
    } else {
        field
            .split(',')
            .map(|s| s.trim_matches('"').to_string())
            .collect()
    }
}

/// The DATABASE field: (names, `all`, `replication`), as `hba.c`'s `check_db` reads it.
fn database_field(field: &str) -> (Vec<String>, bool, bool) {
    let (mut names, mut all, mut replication) = (Vec::new(), false, false);
    for token in field.split(',') {
        match token {
            "all" => all = true,
            "replication" => replication = true,
            t => names.push(t.trim_matches('"').to_string()),
        }
    }
    (names, all, replication)
}

impl Hba {
    /// Parses the file's text.
    ///
    /// # Errors
    /// A message naming the line of the first malformed or unsupported entry.
    pub fn parse(text: &str) -> Result<Hba, String> {
        let mut rules = Vec::new();
        for (i, raw) in text.lines().enumerate() {
            let line = i + 1;
            let content = raw.split('#').next().unwrap_or("").trim();
            if content.is_empty() {
                continue;
            }
            let f: Vec<&str> = content.split_whitespace().collect();
            let err = |what: &str| format!("pg_hba.conf line {line}: {what}: \"{content}\"");
            let conn = match f[0] {
                "local" => continue,
                "host" => ConnType::Host,
                "hostssl" => ConnType::HostSsl,
                "hostnossl" => ConnType::HostNoSsl,
                other => return Err(err(&format!("invalid connection type \"{other}\""))),
            };
            if f.len() < 5 {
                return Err(err("expected TYPE DATABASE USER ADDRESS METHOD"));
            }
            let (network, method_at) = if f[3] == "all" {
                (None, 4)
            } else if let Some((addr, bits)) = f[3].split_once('/') {
                let ip: IpAddr = addr
                    .parse()
                    .map_err(|_| err(&format!("invalid IP address \"{addr}\"")))?;
                let max = if ip.is_ipv4() { 32 } else { 128 };
                let bits: u8 = bits
                    .parse()
                    .ok()
                    .filter(|&b| b <= max)
                    .ok_or_else(|| err(&format!("invalid CIDR mask \"{bits}\"")))?;
                (Some((ip, bits)), 4)
            } else {
                let ip: IpAddr = f[3]
                    .parse()
                    .map_err(|_| err(&format!("invalid IP address \"{}\"", f[3])))?;
                let mask = f
                    .get(4)
                    .and_then(|m| m.parse::<IpAddr>().ok())
                    .ok_or_else(|| err("an address without /bits needs a mask column"))?;
                let bits =
                    mask_bits(mask).ok_or_else(|| err(&format!("invalid netmask \"{mask}\"")))?;
                (Some((ip, bits)), 5)
            };
            let method = match f.get(method_at).copied() {
                Some("trust") => Method::Trust,
                Some("reject") => Method::Reject,
                Some("scram-sha-256" | "md5" | "password") => Method::ScramSha256,
                Some(other) => {
                    return Err(err(&format!(
                        "authentication method \"{other}\" is not supported (trust, reject, scram-sha-256)"
                    )))
                }
                None => return Err(err("missing authentication method")),
            };
            let (databases, all_databases, replication) = database_field(f[1]);
            rules.push(Rule {
                line,
                conn,
                databases,
                all_databases,
                replication,
                users: names(f[2]),
                network,
                method,
            });
        }
        Ok(Hba { rules })
    }

    /// `DATADIR/pg_hba.conf`, or [`DEFAULT_HBA`] if there is none.
    ///
    /// # Errors
    /// A message if the file cannot be read or parsed.
    pub fn load(datadir: &Path) -> Result<Hba, String> {
        let path = datadir.join("pg_hba.conf");
        match std::fs::read_to_string(&path) {
            Ok(text) => Hba::parse(&text),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Hba::parse(DEFAULT_HBA),
            Err(e) => Err(format!("could not read \"{}\": {e}", path.display())),
        }
    }

    /// The rule that decides a connection from `addr` (over TLS if `ssl`) for `database` as
    /// `user`, a physical replication connection if `replication`: the first that matches, or
    /// `None` (reject).
    // `map_or(true, ..)` rather than `is_none_or`, which needs Rust 1.82 (the workspace says 1.80).
    #[allow(clippy::unnecessary_map_or)]
    pub fn find(
        &self,
        addr: IpAddr,
        ssl: bool,
        database: &str,
        user: &str,
        replication: bool,
    ) -> Option<&Rule> {
        self.rules.iter().find(|r| {
            let conn_ok = match r.conn {
                ConnType::Host => true,
                ConnType::HostSsl => ssl,
                ConnType::HostNoSsl => !ssl,
            };
            conn_ok
                && if replication {
                    r.replication
                } else {
                    r.all_databases || r.databases.iter().any(|d| d == database)
                }
                && (r.users.is_empty() || r.users.iter().any(|u| u == user))
                && r.network
                    .map_or(true, |(net, bits)| in_network(addr, net, bits))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn the_default_trusts_loopback_only() {
        let h = Hba::parse(DEFAULT_HBA).unwrap();
        assert_eq!(
            h.find(ip("127.0.0.1"), false, "db", "u", false)
                .unwrap()
                .method,
            Method::Trust
        );
        assert_eq!(
            h.find(ip("::1"), false, "db", "u", false).unwrap().method,
            Method::Trust
        );
        assert_eq!(
            h.find(ip("::ffff:127.0.0.1"), false, "db", "u", false)
                .unwrap()
                .method,
            Method::Trust
        );
        assert!(h.find(ip("10.0.0.1"), false, "db", "u", false).is_none());
        assert_eq!(
            h.find(ip("127.0.0.1"), false, "replication", "u", true)
                .unwrap()
                .line,
            9
        );
        assert!(h
            .find(ip("10.0.0.1"), false, "replication", "u", true)
            .is_none());
    }

    #[test]
    fn physical_replication_matches_only_the_replication_keyword() {
        let h = Hba::parse(
            "host all all 10.0.0.0/8 trust\n\
             host \"replication\" all 10.0.0.0/8 reject\n\
             host sales,replication all 0.0.0.0/0 scram-sha-256\n",
        )
        .unwrap();
        let m = |d: &str, repl| h.find(ip("10.1.1.1"), false, d, "u", repl).map(|r| r.line);
        // `all` does not match a physical replication connection; the keyword does.
        assert_eq!(m("replication", true), Some(3));
        assert_eq!(m("x", true), Some(3));
        // A session for a database named "replication" matches `all` and the quoted name,
        // never the keyword alone.
        assert_eq!(m("replication", false), Some(1));
        assert_eq!(
            h.find(ip("1.1.1.1"), false, "replication", "u", false),
            None
        );
        assert_eq!(m("sales", false), Some(1));
    }

    #[test]
    fn first_match_decides() {
        let h = Hba::parse(
            "local all all trust\n\
             hostssl all admin 0.0.0.0/0 scram-sha-256 # comment\n\
             host    sales,hr  all 192.168.0.0 255.255.0.0 md5\n\
             host    all  bad  all reject\n\
             hostnossl all all 127.0.0.1/32 trust\n",
        )
        .unwrap();
        let m = |a: &str, ssl, d: &str, u: &str| {
            h.find(ip(a), ssl, d, u, false).map(|r| (r.method, r.line))
        };
        assert_eq!(
            m("1.2.3.4", true, "x", "admin"),
            Some((Method::ScramSha256, 2))
        );
        assert_eq!(m("1.2.3.4", false, "x", "admin"), None);
        assert_eq!(
            m("192.168.7.7", false, "hr", "joe"),
            Some((Method::ScramSha256, 3))
        );
        assert_eq!(m("192.169.7.7", false, "hr", "joe"), None);
        assert_eq!(m("127.0.0.1", false, "x", "bad"), Some((Method::Reject, 4)));
        assert_eq!(m("127.0.0.1", false, "x", "ok"), Some((Method::Trust, 5)));
        assert_eq!(m("127.0.0.1", true, "x", "ok"), None);
    }

    #[test]
    fn malformed_lines_are_errors_naming_the_line() {
        for (text, what) in [
            ("host all all 1.2.3.4/33 trust", "invalid CIDR mask"),
            ("host all all nonsense trust", "invalid IP address"),
            ("host all all 10.0.0.0 255.0.255.0 trust", "invalid netmask"),
            ("host all all all peer", "not supported"),
            ("hots all all all trust", "invalid connection type"),
            ("host all all", "expected TYPE"),
        ] {
            let e = Hba::parse(&format!("# x\n{text}\n")).unwrap_err();
            assert!(e.contains("line 2") && e.contains(what), "{text}: {e}");
        }
    }
}
