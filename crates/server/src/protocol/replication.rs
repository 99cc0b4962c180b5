//! Replication connections (PostgreSQL's walsender, `src/backend/replication/walsender.c`, and
//! its command grammar `repl_gram.y`): the `replication` startup parameter, the replication
//! commands a walsender accepts in a simple Query, and their replies. Streaming itself, after
//! START_REPLICATION, is `walsender.rs`.
//!
//! | command | reply |
//! |---|---|
//! | `IDENTIFY_SYSTEM` | one row: systemid (text), timeline (int4), xlogpos (text, the flush LSN), dbname (text, NULL when physical) |
//! | `SHOW name` | as the SQL `SHOW` (`wal_segment_size` is `16MB`) |
//! | `TIMELINE_HISTORY n` | one row: filename, content (text) of `wal/0000000N.history`; 58P01 if there is none |
//! | `START_REPLICATION [SLOT s] [PHYSICAL] X/X [TIMELINE n]` | CopyBothResponse, then the WAL from X/X (`walsender.rs`) |
//! | `CREATE_REPLICATION_SLOT s PHYSICAL [RESERVE_WAL]` (or `(RESERVE_WAL [true])`) | slot_name, consistent_point (NULL), snapshot_name (NULL), output_plugin (NULL) |
//! | `DROP_REPLICATION_SLOT s [WAIT]` | CommandComplete |
//! | `READ_REPLICATION_SLOT s` | slot_type, restart_lsn (text), restart_tli (int8); NULLs if there is no such slot |
//! | `BASE_BACKUP [(option [, ...])]` | start position, tablespace list, the data directory as one tar in CopyOut, end position (`basebackup.rs`) |
//! | logical slots, `ALTER_REPLICATION_SLOT` | 0A000 for now |
//!
//! A physical replication connection (`replication=true`) runs only these: SQL gets 0A000
//! "cannot execute SQL commands in WAL sender for physical replication". A database one
//! (`replication=database`) runs SQL as well.

use super::errors::protocol_error;
use walnut_common::{Error, Lsn, SqlState};

/// What the `replication` startup parameter asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplicationMode {
    /// `replication=true` (also `on`, `yes`, `1`): a physical walsender, no database.
    Physical,
    /// `replication=database`: a walsender connected to a database; SQL runs too.
    Database,
}

/// Parses the `replication` startup parameter (PostgreSQL's `ProcessStartupPacket`): `None` for
/// a normal session.
///
/// # Errors
/// 22023 for any other value, with PostgreSQL's message and hint.
pub fn parse_mode(value: Option<&str>) -> Result<Option<ReplicationMode>, Error> {
    let Some(v) = value else { return Ok(None) };
    if v.eq_ignore_ascii_case("database") {
        return Ok(Some(ReplicationMode::Database));
    }
    match walnut_common::guc::parse_bool(v) {
        Some(true) => Ok(Some(ReplicationMode::Physical)),
        Some(false) => Ok(None),
        None => Err(Error::user(
            SqlState::INVALID_PARAMETER_VALUE,
            format!("invalid value for parameter \"replication\": \"{v}\""),
        )
        .with_detail("Valid values are: \"false\", 0, \"true\", 1, \"database\".")),
    }
}

/// A replication command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    /// `IDENTIFY_SYSTEM`.
    IdentifySystem,
    /// `SHOW name`: answered by the session as the SQL statement.
    Show,
    /// `TIMELINE_HISTORY tli`.
    TimelineHistory(u32),
    /// `START_REPLICATION [SLOT slot] [PHYSICAL] start [TIMELINE tli]`.
    StartReplication {
        /// The slot named, if any.
        slot: Option<String>,
        /// Where to start, bytes (LSN).
        start: Lsn,
        /// The timeline asked for, if given.
        timeline: Option<u32>,
    },
    /// `CREATE_REPLICATION_SLOT name PHYSICAL [RESERVE_WAL]`.
    CreateSlot {
        /// The slot's name (checked by the slot store).
        name: String,
        /// Reserve WAL now (from the redo point), not at the first status update.
        reserve_wal: bool,
        /// TEMPORARY: in memory only, dropped when this connection ends.
        temporary: bool,
    },
    /// `DROP_REPLICATION_SLOT name [WAIT]`.
    DropSlot {
        /// The slot's name.
        name: String,
        /// Wait while a walsender uses it (walnut: only briefly; see `simple.rs`).
        wait: bool,
    },
    /// `READ_REPLICATION_SLOT name`.
    ReadSlot(String),
    /// `BASE_BACKUP (options)`.
    BaseBackup(BaseBackupOptions),
    /// A command walnut does not run yet (its keyword).
    Unsupported(&'static str),
}

/// Parses `X/X` (two hexadecimal halves of an LSN, as PostgreSQL prints and `pg_lsn_in` reads).
pub fn parse_lsn(s: &str) -> Option<Lsn> {
    walnut_common::value::parse_lsn(s).map(Lsn)
}

const UNSUPPORTED: &[&str] = &["ALTER_REPLICATION_SLOT", "UPLOAD_MANIFEST"];

/// The options of BASE_BACKUP that walnut honours (PostgreSQL 15's syntax,
/// `BASE_BACKUP (LABEL 'x', PROGRESS, CHECKPOINT 'fast', WAL, WAIT false, MANIFEST 'no')`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BaseBackupOptions {
    /// LABEL, for `backup_label`.
    pub label: String,
    /// PROGRESS: send the total size first and progress messages during the copy.
    pub progress: bool,
    /// WAL: include the WAL from the start to the end of the backup.
    pub wal: bool,
}

/// Splits `a 'b c', d` into words, keeping a quoted string (with `''` for a quote) as one
/// word without its quotes (flagged `true`); commas and parentheses separate words. `None`
/// for an unterminated string.
fn option_words(s: &str) -> Option<Vec<(String, bool)>> {
    let sep = |c: char| c.is_whitespace() || c == ',' || c == '(' || c == ')';
    let mut out = Vec::new();
    let mut chars = s.chars().peekable();
    while let Some(&c) = chars.peek() {
        if sep(c) {
            chars.next();
        } else if c == '\'' {
            chars.next();
            let mut w = String::new();
            loop {
                match chars.next()? {
                    '\'' if chars.peek() == Some(&'\'') => {
                        chars.next();
                        w.push('\'');
                    }
                    '\'' => break,
                    ch => w.push(ch),
                }
            }
            out.push((w, true));
        } else {
            let mut w = String::new();
            while let Some(&ch) = chars.peek() {
                if sep(ch) {
                    break;
                }
                w.push(ch);
                chars.next();
            }
            out.push((w, false));
        }
    }
    Some(out)
}

/// Parses BASE_BACKUP's options.
///
/// # Errors
/// 42601 for an unknown option or a bad value; 0A000 for what walnut does not do (a manifest,
/// compression, a server-side target, a rate limit, incremental backups).
fn parse_base_backup(rest: &str, syntax: impl Fn() -> Error) -> Result<BaseBackupOptions, Error> {
    let words = option_words(rest).ok_or_else(&syntax)?;
    let mut o = BaseBackupOptions {
        label: "base backup".to_string(),
        progress: false,
        wal: false,
    };
    let unsupported = |what: &str| {
        Err(Error::user(
            SqlState::FEATURE_NOT_SUPPORTED,
            format!("BASE_BACKUP option {what} is not supported"),
        ))
    };
    let mut i = 0;
    while i < words.len() {
        let (name, quoted) = &words[i];
        if *quoted {
            return Err(syntax());
        }
        // The value, if the next word is one (a quoted string, a boolean or a number).
        let value = words.get(i + 1).filter(|(v, q)| {
            *q || walnut_common::guc::parse_bool(v).is_some() || v.parse::<u64>().is_ok()
        });
        let flag = |v: Option<&(String, bool)>| match v {
            None => Ok(true),
            Some((v, _)) => walnut_common::guc::parse_bool(v).ok_or_else(&syntax),
        };
        match name.to_ascii_uppercase().as_str() {
            "LABEL" => match value {
                Some((v, true)) => o.label = v.clone(),
                _ => return Err(syntax()),
            },
            "PROGRESS" => o.progress = flag(value)?,
            "WAL" => o.wal = flag(value)?,
            // walnut's start checkpoint is always immediate; spread is accepted.
            "CHECKPOINT" => match value {
                Some((v, true)) if v == "fast" || v == "spread" => {}
                _ => return Err(syntax()),
            },
            // No WAL archiving to wait for; checksums are not verified while copying; no
            // tablespaces to map.
            "WAIT" | "VERIFY_CHECKSUMS" | "TABLESPACE_MAP" => {
                flag(value)?;
            }
            "MANIFEST" => match value {
                Some((v, true)) if v == "no" => {}
                Some((v, true)) if v == "yes" || v == "force-encode" => {
                    return unsupported("MANIFEST (backup manifests)")
                }
                _ => return Err(syntax()),
            },
            "MANIFEST_CHECKSUMS" => {}
            "TARGET" => match value {
                Some((v, true)) if v == "client" => {}
                _ => return unsupported("TARGET"),
            },
            "COMPRESSION" | "COMPRESSION_DETAIL" => match value {
                Some((v, true)) if v == "none" => {}
                _ => return unsupported("COMPRESSION"),
            },
            "MAX_RATE" => return unsupported("MAX_RATE"),
            "INCREMENTAL" => return unsupported("INCREMENTAL"),
            _ => return Err(syntax()),
        }
        i += if value.is_some() { 2 } else { 1 };
    }
    Ok(o)
}

/// Parses a replication command: `None` if the text is not one (its first word is no
/// replication keyword: SQL), as `replication_scanner_is_replication_command` decides.
///
/// # Errors
/// 42601 for a replication command with bad arguments.
pub fn parse_command(sql: &str) -> Option<Result<Command, Error>> {
    let text = sql.trim().trim_end_matches(';').trim_end();
    let words: Vec<&str> = text.split_whitespace().collect();
    let first = words.first()?.to_ascii_uppercase();
    let syntax = || {
        Error::user(
            SqlState::SYNTAX_ERROR,
            format!("syntax error in replication command \"{text}\""),
        )
    };
    let is = |w: &str, k: &str| w.eq_ignore_ascii_case(k);
    let cmd = match first.as_str() {
        "IDENTIFY_SYSTEM" if words.len() == 1 => Ok(Command::IdentifySystem),
        "IDENTIFY_SYSTEM" => Err(syntax()),
        "SHOW" if words.len() == 2 => Ok(Command::Show),
        "SHOW" => Err(syntax()),
        "TIMELINE_HISTORY" => match words.as_slice() {
            [_, tli] => tli
                .parse::<u32>()
                .ok()
                .filter(|&t| t > 0)
                .map(Command::TimelineHistory)
                .ok_or_else(syntax),
            _ => Err(syntax()),
        },
        "BASE_BACKUP" => {
            parse_base_backup(&text["BASE_BACKUP".len()..], syntax).map(Command::BaseBackup)
        }
        "CREATE_REPLICATION_SLOT" => {
            // Options may come in parentheses, PostgreSQL 15's syntax: `(RESERVE_WAL [true])`.
            let spaced = text.replace(['(', ')', ','], " ");
            let w: Vec<&str> = spaced.split_whitespace().collect();
            match w.as_slice() {
                [_, name, rest @ ..] => {
                    let name = name.trim_matches('"').to_string();
                    let mut rest = rest;
                    let mut temporary = false;
                    if let [k, tail @ ..] = rest {
                        if is(k, "TEMPORARY") {
                            temporary = true;
                            rest = tail;
                        }
                    }
                    if let [k, tail @ ..] = rest {
                        if is(k, "LOGICAL") {
                            return Some(Err(logical_unsupported()));
                        }
                        if is(k, "PHYSICAL") {
                            rest = tail;
                        } else {
                            return Some(Err(syntax()));
                        }
                    } else {
                        return Some(Err(syntax()));
                    }
                    match rest {
                        [] => Ok(Command::CreateSlot {
                            name,
                            reserve_wal: false,
                            temporary,
                        }),
                        [k] if is(k, "RESERVE_WAL") => Ok(Command::CreateSlot {
                            name,
                            reserve_wal: true,
                            temporary,
                        }),
                        [k, v] if is(k, "RESERVE_WAL") => {
                            match walnut_common::guc::parse_bool(v.trim_matches('\'')) {
                                Some(reserve_wal) => Ok(Command::CreateSlot {
                                    name,
                                    reserve_wal,
                                    temporary,
                                }),
                                None => Err(syntax()),
                            }
                        }
                        _ => Err(syntax()),
                    }
                }
                _ => Err(syntax()),
            }
        }
        "DROP_REPLICATION_SLOT" => match words.as_slice() {
            [_, name] => Ok(Command::DropSlot {
                name: name.trim_matches('"').to_string(),
                wait: false,
            }),
            [_, name, w] if is(w, "WAIT") => Ok(Command::DropSlot {
                name: name.trim_matches('"').to_string(),
                wait: true,
            }),
            _ => Err(syntax()),
        },
        "READ_REPLICATION_SLOT" => match words.as_slice() {
            [_, name] => Ok(Command::ReadSlot(name.trim_matches('"').to_string())),
            _ => Err(syntax()),
        },
        "START_REPLICATION" => {
            let mut rest = &words[1..];
            let mut slot = None;
            if let [k, name, tail @ ..] = rest {
                if is(k, "SLOT") {
                    slot = Some(name.trim_matches('"').to_string());
                    rest = tail;
                }
            }
            if let [k, tail @ ..] = rest {
                if is(k, "LOGICAL") {
                    return Some(Err(logical_unsupported()));
                }
                if is(k, "PHYSICAL") {
                    rest = tail;
                }
            }
            match rest {
                [lsn] => parse_lsn(lsn).map(|start| Command::StartReplication {
                    slot,
                    start,
                    timeline: None,
                }),
                [lsn, k, tli] if is(k, "TIMELINE") => {
                    match (parse_lsn(lsn), tli.parse::<u32>().ok().filter(|&t| t > 0)) {
                        (Some(start), Some(t)) => Some(Command::StartReplication {
                            slot,
                            start,
                            timeline: Some(t),
                        }),
                        _ => None,
                    }
                }
                _ => None,
            }
            .ok_or_else(syntax)
        }
        w => match UNSUPPORTED.iter().find(|k| **k == w) {
            Some(k) => Ok(Command::Unsupported(k)),
            None => return None,
        },
    };
    Some(cmd)
}

/// The error for a logical slot or logical streaming: walnut replicates physically only.
fn logical_unsupported() -> Error {
    Error::user(
        SqlState::FEATURE_NOT_SUPPORTED,
        "logical replication is not supported",
    )
}

/// The error for SQL on a physical replication connection.
pub fn sql_on_physical_walsender() -> Error {
    Error::user(
        SqlState::FEATURE_NOT_SUPPORTED,
        "cannot execute SQL commands in WAL sender for physical replication",
    )
}

/// The error for the extended query protocol on a replication connection (PostgreSQL's
/// `PostgresMain` refuses Parse/Bind/Execute from a walsender).
pub fn extended_protocol_on_walsender() -> Error {
    protocol_error("extended query protocol not supported in a replication connection")
}

/// `START_REPLICATION ... TIMELINE tli` at `start`: the current timeline, or an older one of
/// this server's history whose switch point is at or after `start` (the WAL up to there is
/// the same on both timelines; PostgreSQL's `StartReplication` check).
///
/// # Errors
/// 55000 "requested starting point ... is not in this server's history" otherwise, with the
/// fork point in the detail when there is one; I/O and corruption errors reading the history.
pub fn check_timeline(
    storage: &walnut_storage::Storage,
    tli: u32,
    start: Lsn,
) -> Result<(), Error> {
    use walnut_storage::timeline::{fork_point, parse_history, read_history};
    let current = storage.timeline();
    if tli == current {
        return Ok(());
    }
    let not_in = || {
        Error::user(
            SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE,
            format!("requested starting point {start} on timeline {tli} is not in this server's history"),
        )
    };
    let text = read_history(&*storage.vfs, &storage.dir.join("wal"), current)?;
    let history = parse_history(text.as_deref().unwrap_or(""))?;
    match fork_point(&history, tli) {
        Some(fork) if start <= fork => Ok(()),
        Some(fork) => Err(not_in().with_detail(format!(
            "This server's history forked from timeline {tli} at {fork}."
        ))),
        None => Err(not_in()),
    }
}

/// The error for `TIMELINE_HISTORY tli` when the WAL directory has no history file for it
/// (timeline 1 never has one), as in PostgreSQL, where asking for it fails to open the file.
pub fn no_timeline_history(tli: u32) -> Error {
    Error::user(
        SqlState::UNDEFINED_FILE,
        format!("could not open file \"pg_wal/{tli:08X}.history\": No such file or directory"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_replication_parameter() {
        assert_eq!(parse_mode(None).unwrap(), None);
        assert_eq!(
            parse_mode(Some("true")).unwrap(),
            Some(ReplicationMode::Physical)
        );
        assert_eq!(
            parse_mode(Some("1")).unwrap(),
            Some(ReplicationMode::Physical)
        );
        assert_eq!(parse_mode(Some("off")).unwrap(), None);
        assert_eq!(
            parse_mode(Some("Database")).unwrap(),
            Some(ReplicationMode::Database)
        );
        let e = parse_mode(Some("maybe")).unwrap_err();
        assert_eq!(e.sqlstate, SqlState::INVALID_PARAMETER_VALUE);
    }

    #[test]
    fn lsns() {
        assert_eq!(parse_lsn("0/16B3748"), Some(Lsn(0x16B_3748)));
        assert_eq!(parse_lsn("1/00000008"), Some(Lsn((1 << 32) | 8)));
        for bad in ["", "0", "/1", "1/", "g/1", "1/2/3", "123456789/0", "0/-1"] {
            assert_eq!(parse_lsn(bad), None, "{bad}");
        }
    }

    #[test]
    fn commands() {
        assert_eq!(
            parse_command("identify_system;").unwrap().unwrap(),
            Command::IdentifySystem
        );
        assert_eq!(
            parse_command("SHOW wal_segment_size").unwrap().unwrap(),
            Command::Show
        );
        assert_eq!(
            parse_command("START_REPLICATION 0/1000000 TIMELINE 1")
                .unwrap()
                .unwrap(),
            Command::StartReplication {
                slot: None,
                start: Lsn(0x100_0000),
                timeline: Some(1)
            }
        );
        assert_eq!(
            parse_command("START_REPLICATION SLOT \"s1\" PHYSICAL 1/0")
                .unwrap()
                .unwrap(),
            Command::StartReplication {
                slot: Some("s1".into()),
                start: Lsn(1 << 32),
                timeline: None
            }
        );
        assert_eq!(
            parse_command(
                "BASE_BACKUP (LABEL 'it''s', PROGRESS, CHECKPOINT 'fast', WAL, WAIT false, MANIFEST 'no')"
            )
            .unwrap()
            .unwrap(),
            Command::BaseBackup(BaseBackupOptions {
                label: "it's".into(),
                progress: true,
                wal: true
            })
        );
        assert_eq!(
            parse_command("BASE_BACKUP").unwrap().unwrap(),
            Command::BaseBackup(BaseBackupOptions {
                label: "base backup".into(),
                progress: false,
                wal: false
            })
        );
        for (sql, code) in [
            (
                "BASE_BACKUP (MANIFEST 'yes')",
                SqlState::FEATURE_NOT_SUPPORTED,
            ),
            (
                "BASE_BACKUP (MAX_RATE 100)",
                SqlState::FEATURE_NOT_SUPPORTED,
            ),
            (
                "BASE_BACKUP (TARGET 'server')",
                SqlState::FEATURE_NOT_SUPPORTED,
            ),
            ("BASE_BACKUP (NOPE)", SqlState::SYNTAX_ERROR),
            ("BASE_BACKUP (LABEL)", SqlState::SYNTAX_ERROR),
            ("BASE_BACKUP (LABEL 'open)", SqlState::SYNTAX_ERROR),
            ("BASE_BACKUP (CHECKPOINT 'slow')", SqlState::SYNTAX_ERROR),
        ] {
            assert_eq!(
                parse_command(sql).unwrap().unwrap_err().sqlstate,
                code,
                "{sql}"
            );
        }
        for (sql, reserve_wal) in [
            ("CREATE_REPLICATION_SLOT s1 PHYSICAL", false),
            ("CREATE_REPLICATION_SLOT \"s1\" PHYSICAL RESERVE_WAL", true),
            ("CREATE_REPLICATION_SLOT s1 PHYSICAL (RESERVE_WAL)", true),
            (
                "create_replication_slot s1 physical ( RESERVE_WAL false )",
                false,
            ),
        ] {
            assert_eq!(
                parse_command(sql).unwrap().unwrap(),
                Command::CreateSlot {
                    name: "s1".into(),
                    reserve_wal,
                    temporary: false
                },
                "{sql}"
            );
        }
        assert_eq!(
            parse_command("DROP_REPLICATION_SLOT s1 WAIT")
                .unwrap()
                .unwrap(),
            Command::DropSlot {
                name: "s1".into(),
                wait: true
            }
        );
        assert_eq!(
            parse_command("READ_REPLICATION_SLOT s1").unwrap().unwrap(),
            Command::ReadSlot("s1".into())
        );
        assert_eq!(
            parse_command(
                "CREATE_REPLICATION_SLOT \"pg_basebackup_7\" TEMPORARY PHYSICAL ( RESERVE_WAL)"
            )
            .unwrap()
            .unwrap(),
            Command::CreateSlot {
                name: "pg_basebackup_7".into(),
                reserve_wal: true,
                temporary: true
            }
        );
        assert_eq!(
            parse_command("CREATE_REPLICATION_SLOT t LOGICAL pgoutput")
                .unwrap()
                .unwrap_err()
                .sqlstate,
            SqlState::FEATURE_NOT_SUPPORTED
        );
        for bad in [
            "START_REPLICATION",
            "START_REPLICATION x/y",
            "START_REPLICATION 0/0 TIMELINE 0",
            "START_REPLICATION 0/0 extra",
            "TIMELINE_HISTORY one",
            "IDENTIFY_SYSTEM now",
            "CREATE_REPLICATION_SLOT s1",
            "CREATE_REPLICATION_SLOT s1 PHYSICAL EXTRA",
            "DROP_REPLICATION_SLOT",
            "READ_REPLICATION_SLOT a b",
        ] {
            let e = parse_command(bad).unwrap().unwrap_err();
            assert_eq!(e.sqlstate, SqlState::SYNTAX_ERROR, "{bad}");
        }
        assert!(parse_command("select 1").is_none());
        assert!(parse_command("  ").is_none());
    }
}
