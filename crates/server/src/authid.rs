//! Role passwords: `DATADIR/global/pg_authid`, one line per role, `name:verifier`, where the
//! verifier is PostgreSQL's SCRAM-SHA-256 format (`src/common/scram-common.c`,
//! `scram_build_secret`):
//!
//! ```text
//! SCRAM-SHA-256$<iterations>:<base64 salt>$<base64 StoredKey>:<base64 ServerKey>
//! ```
//!
//! with `SaltedPassword = Hi(password, salt, iterations)` (PBKDF2-HMAC-SHA-256),
//! `StoredKey = SHA-256(HMAC(SaltedPassword, "Client Key"))` and
//! `ServerKey = HMAC(SaltedPassword, "Server Key")` (RFC 5802). The server never keeps a
//! password or anything a client could log in with: the SCRAM exchange checks the client's
//! proof against StoredKey. The file is replaced atomically (write, fsync, rename, fsync the
//! directory) by `walnut passwd`, and read at every connection that needs a password.

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use pgwire::api::auth::sasl::scram::{gen_salted_password, ScramSecret};
use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};

/// PBKDF2 iterations for new verifiers (PostgreSQL's `scram_iterations` default).
pub const SCRAM_ITERATIONS: usize = 4096;
/// Salt length for new verifiers, bytes (PostgreSQL's `SCRAM_DEFAULT_SALT_LEN`).
pub const SALT_LEN: usize = 16;

fn path(datadir: &Path) -> PathBuf {
    datadir.join("global").join("pg_authid")
}

/// Builds a verifier for `password` with `salt` and `iterations`.
pub fn build_verifier(password: &str, salt: &[u8], iterations: usize) -> String {
    let salted = gen_salted_password(password, salt, iterations);
    match ScramSecret::verifier_from_salted_password(salt.to_vec(), salted, iterations) {
        ScramSecret::Verifier {
            stored_key,
            server_key,
            ..
        } => format!(
            "SCRAM-SHA-256${iterations}:{}${}:{}",
            STANDARD.encode(salt),
            STANDARD.encode(stored_key),
            STANDARD.encode(server_key)
        ),
        ScramSecret::SaltedPassword { .. } => unreachable!("verifier_from_salted_password"),
    }
}

/// Parses a verifier into the secret the SCRAM exchange needs; `None` if malformed.
pub fn parse_verifier(v: &str) -> Option<ScramSecret> {
    let rest = v.strip_prefix("SCRAM-SHA-256$")?;
    let (iter_salt, keys) = rest.split_once('$')?;
    let (iterations, salt) = iter_salt.split_once(':')?;
    let (stored, server) = keys.split_once(':')?;
    Some(ScramSecret::Verifier {
        salt: STANDARD.decode(salt).ok()?,
        iterations: iterations.parse().ok().filter(|&n: &usize| n > 0)?,
        stored_key: STANDARD.decode(stored).ok().filter(|k| k.len() == 32)?,
        server_key: STANDARD.decode(server).ok().filter(|k| k.len() == 32)?,
    })
}

/// The stored verifiers by role name (empty if the file does not exist).
///
/// # Errors
/// A message if the file cannot be read.
pub fn load(datadir: &Path) -> Result<HashMap<String, String>, String> {
    let p = path(datadir);
    let text = match std::fs::read_to_string(&p) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(HashMap::new()),
        Err(e) => return Err(format!("could not read \"{}\": {e}", p.display())),
    };
    Ok(text
        .lines()
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.to_string(), v.to_string()))
        .collect())
}

/// Sets (or, with `None`, removes) `role`'s password, replacing the file atomically and
/// durably. The salt comes from the operating system's random source.
///
/// # Errors
/// A message for a role name with `:` or a line break, an empty password, or an I/O error.
pub fn set_password(datadir: &Path, role: &str, password: Option<&str>) -> Result<(), String> {
    if role.is_empty() || role.contains([':', '\n', '\r']) {
        return Err(format!("invalid role name \"{role}\""));
    }
    let mut all = load(datadir)?;
    match password {
        Some("") => return Err("empty passwords are not allowed".into()),
        Some(pw) => {
            let mut salt = [0u8; SALT_LEN];
            ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut salt)
                .map_err(|_| "could not get random bytes for the salt".to_string())?;
            all.insert(
                role.to_string(),
                build_verifier(pw, &salt, SCRAM_ITERATIONS),
            );
        }
        None => {
            all.remove(role);
        }
    }
    let mut names: Vec<&String> = all.keys().collect();
    names.sort();
    let mut text = String::new();
    for n in names {
        text.push_str(&format!("{n}:{}\n", all[n]));
    }
    let p = path(datadir);
    let dir = p.parent().expect("global/");
    let tmp = dir.join("pg_authid.tmp");
    let io = |what: &str, e: std::io::Error| format!("could not {what} \"{}\": {e}", tmp.display());
    {
        let mut f = std::fs::File::create(&tmp).map_err(|e| io("create", e))?;
        f.write_all(text.as_bytes()).map_err(|e| io("write", e))?;
        f.sync_all().map_err(|e| io("fsync", e))?;
    }
    std::fs::rename(&tmp, &p).map_err(|e| io("rename", e))?;
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| format!("could not fsync \"{}\": {e}", dir.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verifier_matches_postgresql() {
        // The layout is PostgreSQL's; that libpq (psql) logs in against a verifier built here
        // is the end-to-end test's business.
        let salt = b"0123456789abcdef";
        let v = build_verifier("secret", salt, 4096);
        assert!(
            v.starts_with("SCRAM-SHA-256$4096:MDEyMzQ1Njc4OWFiY2RlZg==$"),
            "{v}"
        );
        let s = parse_verifier(&v).expect("round trip");
        match s {
            ScramSecret::Verifier {
                iterations,
                salt: got,
                ..
            } => {
                assert_eq!(iterations, 4096);
                assert_eq!(got, salt);
            }
            ScramSecret::SaltedPassword { .. } => panic!("a verifier"),
        }
        for bad in [
            "",
            "SCRAM-SHA-256$",
            "SCRAM-SHA-256$0:AA==$AA==:AA==",
            "md5abc",
        ] {
            assert!(parse_verifier(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn set_and_remove_passwords() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir(d.path().join("global")).unwrap();
        set_password(d.path(), "alice", Some("pw1")).unwrap();
        set_password(d.path(), "bob", Some("pw2")).unwrap();
        let all = load(d.path()).unwrap();
        assert_eq!(all.len(), 2);
        assert!(parse_verifier(&all["alice"]).is_some());
        assert_ne!(all["alice"], all["bob"]);
        set_password(d.path(), "alice", None).unwrap();
        assert_eq!(load(d.path()).unwrap().len(), 1);
        assert!(set_password(d.path(), "a:b", Some("x")).is_err());
        assert!(set_password(d.path(), "c", Some("")).is_err());
    }
}
