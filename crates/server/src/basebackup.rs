//! `walnut basebackup`: copies a running server's data directory over a replication
//! connection (BASE_BACKUP, `protocol/basebackup.rs` on the server), like `pg_basebackup -X
//! fetch -Ft` unpacked: the archive is unpacked into the target directory as it arrives, with
//! the WAL that makes the copy consistent and a `backup_label` that makes its first start
//! replay up to the backup's end. A progress bar shows on a terminal.
//!
//! Steps: check the target (missing or empty; created mode 0700), connect
//! (`replication=true`), IDENTIFY_SYSTEM, BASE_BACKUP with LABEL, PROGRESS, a fast checkpoint,
//! WAL and no manifest; unpack the tar stream on a thread of its own through a bounded channel;
//! fsync every file and directory; report the start and end positions. On failure the target
//! directory is removed if this run created it (as `pg_basebackup` does).
//!
//! For a standby (`pg_basebackup -R -S SLOT [-C]`): before the backup, the replication slot is
//! created (`-C`: CREATE_REPLICATION_SLOT ... PHYSICAL RESERVE_WAL) or checked to exist
//! (READ_REPLICATION_SLOT); after the copy is synced, `-R` creates `standby.signal` and appends
//! `primary_conninfo` (and `primary_slot_name`) to `walnut.auto.conf` (PostgreSQL's
//! `GenerateRecoveryConfig` and `WriteRecoveryConfig`, `src/fe_utils/recovery_gen.c`).

use crate::repl_client::{data_row, ClientError, ConnInfo, ReplClient};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use walnut_common::config::AUTO_CONF_FILE;
use walnut_common::guc::quote_conf;

/// What `walnut basebackup` was asked.
#[derive(Clone, Debug)]
pub struct BaseBackupArgs {
    /// The server.
    pub conn: ConnInfo,
    /// The directory to write the copy into (missing or empty).
    pub dir: PathBuf,
    /// The backup's label (in `backup_label`).
    pub label: String,
    /// `-R`: make the copy a standby of the server: an empty `standby.signal` and, appended to
    /// `walnut.auto.conf`, `primary_conninfo` for `conn` (and `primary_slot_name` for `slot`).
    pub write_recovery_conf: bool,
    /// `-S`: the physical replication slot the standby streams from. Checked to exist before
    /// the backup (or created, with `create_slot`); written as `primary_slot_name` with `-R`.
    /// Lower-case letters, digits and underscores, 1 to 63 bytes.
    pub slot: Option<String>,
    /// `-C`: create `slot` before the backup, reserving WAL at once (needs `slot`).
    pub create_slot: bool,
}

/// Reads the archive's bytes as the connection delivers them.
struct ChannelReader {
    rx: mpsc::Receiver<Vec<u8>>,
    cur: Vec<u8>,
    pos: usize,
}

impl Read for ChannelReader {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        while self.pos == self.cur.len() {
            match self.rx.recv() {
                Ok(v) => {
                    self.cur = v;
                    self.pos = 0;
                }
                Err(_) => return Ok(0),
            }
        }
        let n = out.len().min(self.cur.len() - self.pos);
        out[..n].copy_from_slice(&self.cur[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}

/// fsync every file and directory under `dir`, then `dir` (what `pg_basebackup` does unless
/// `--no-sync`).
fn sync_tree(dir: &Path) -> std::io::Result<()> {
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        if e.file_type()?.is_dir() {
            sync_tree(&e.path())?;
        } else {
            std::fs::File::open(e.path())?.sync_all()?;
        }
    }
    std::fs::File::open(dir)?.sync_all()
}

/// The positions the backup reported: (start, end), as text.
type Positions = (String, String);

/// Connects to the server of `conn` with `replication=true`.
///
/// # Errors
/// The connection's failure, naming the host and port.
fn connect(conn: &ConnInfo) -> Result<ReplClient, String> {
    ReplClient::connect(conn)
        .map_err(|e| format!("could not connect to {}:{}: {e}", conn.host, conn.port))
}

/// Checks that physical replication slot `slot` exists, with READ_REPLICATION_SLOT (a row of
/// NULLs when there is no such slot), as PostgreSQL's `GetSlotInformation` in
/// `src/bin/pg_basebackup/streamutil.c`.
///
/// # Errors
/// `replication slot "SLOT" does not exist`; a slot that is not physical; the server's error;
/// a reply of the wrong shape.
fn check_slot(c: &mut ReplClient, slot: &str) -> Result<(), String> {
    let rows = c
        .query(&format!("READ_REPLICATION_SLOT {slot}"))
        .map_err(|e| format!("could not read replication slot \"{slot}\": {e}"))?;
    match rows.as_slice() {
        [row] if row.len() == 3 => match row[0].as_deref() {
            None => Err(format!("replication slot \"{slot}\" does not exist")),
            Some("physical") => Ok(()),
            Some(other) => Err(format!(
                "expected a physical replication slot, got type \"{other}\" instead"
            )),
        },
        _ => Err(format!(
            "could not read replication slot \"{slot}\": got {} rows and {} fields, expected 1 row and 3 fields",
            rows.len(),
            rows.first().map_or(0, Vec::len)
        )),
    }
}

/// Drops replication slot `slot`, which this run created, after the backup failed: a slot no
/// standby streams from would hold the server's WAL back (up to `max_slot_wal_keep_size`).
/// Best effort, on a connection of its own (the backup's may be broken or mid-COPY); a failure
/// is printed, with what to run instead.
fn drop_created_slot(conn: &ConnInfo, slot: &str) {
    eprintln!("walnut basebackup: dropping replication slot \"{slot}\"");
    let dropped = connect(conn).and_then(|mut c| {
        c.query(&format!("DROP_REPLICATION_SLOT {slot}"))
            .map(|_| ())
            .map_err(|e| e.to_string())
    });
    if let Err(e) = dropped {
        eprintln!(
            "walnut basebackup: could not drop replication slot \"{slot}\": {e}; drop it with DROP_REPLICATION_SLOT {slot} or pg_drop_replication_slot('{slot}')"
        );
    }
}

/// The backup: creates or checks the slot, copies, syncs, writes the standby's configuration.
/// A slot created here is dropped again if a later step fails.
fn copy(args: &BaseBackupArgs) -> Result<Positions, String> {
    // Built first: a value it cannot hold fails the run before anything is created.
    let recovery = args
        .write_recovery_conf
        .then(|| recovery_config(&args.conn, args.slot.as_deref()))
        .transpose()?;
    let mut c = connect(&args.conn)?;
    c.query("IDENTIFY_SYSTEM")
        .map_err(|e| format!("could not take the base backup: {e}"))?;
    let mut created_slot = None;
    if let Some(slot) = &args.slot {
        if args.create_slot {
            c.query(&format!(
                "CREATE_REPLICATION_SLOT {slot} PHYSICAL RESERVE_WAL"
            ))
            .map_err(|e| format!("could not create replication slot \"{slot}\": {e}"))?;
            eprintln!("walnut basebackup: created replication slot \"{slot}\"");
            created_slot = Some(slot.as_str());
        } else {
            check_slot(&mut c, slot)?;
        }
    }
    let result = stream(args, c).and_then(|positions| {
        if let Some(contents) = &recovery {
            write_recovery_config(&args.dir, contents)?;
        }
        Ok(positions)
    });
    if result.is_err() {
        if let Some(slot) = created_slot {
            drop_created_slot(&args.conn, slot);
        }
    }
    result
}

/// Runs BASE_BACKUP on `c`, unpacks the archive into `args.dir` and fsyncs it.
fn stream(args: &BaseBackupArgs, mut c: ReplClient) -> Result<Positions, String> {
    let fail = |e: ClientError| format!("could not take the base backup: {e}");
    c.send_query(&format!(
        "BASE_BACKUP (LABEL '{}', PROGRESS, CHECKPOINT 'fast', WAL, WAIT false, MANIFEST 'no')",
        args.label.replace('\'', "''")
    ))
    .map_err(fail)?;
    let mut rows: Vec<Vec<Option<String>>> = Vec::new();
    let mut unpacker: Option<(
        mpsc::SyncSender<Vec<u8>>,
        std::thread::JoinHandle<std::io::Result<()>>,
    )> = None;
    let bar = indicatif::ProgressBar::new(0);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{bar:40} {bytes}/{total_bytes} ({bytes_per_sec}, {eta} left)",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let mut error = None;
    loop {
        let m = c.read().map_err(fail)?;
        match m.tag {
            b'D' => rows.push(data_row(&m.body).map_err(fail)?),
            b'H' => {
                // CopyOutResponse: the tablespace row said the total, kB.
                if let Some(kb) = rows
                    .last()
                    .and_then(|r| r.get(2).cloned().flatten())
                    .and_then(|v| v.parse::<u64>().ok())
                {
                    bar.set_length(kb * 1024);
                }
                let (tx, rx) = mpsc::sync_channel::<Vec<u8>>(16);
                let dir = args.dir.clone();
                let handle = std::thread::spawn(move || {
                    let mut a = tar::Archive::new(ChannelReader {
                        rx,
                        cur: Vec::new(),
                        pos: 0,
                    });
                    a.set_preserve_permissions(true);
                    a.unpack(&dir)
                });
                unpacker = Some((tx, handle));
            }
            b'd' => match m.body.first() {
                Some(b'n') => {
                    let name = m.body[1..].split(|&b| b == 0).next().unwrap_or_default();
                    if name != b"base.tar" {
                        return Err(format!(
                            "unexpected archive \"{}\" (walnut has no tablespaces)",
                            String::from_utf8_lossy(name)
                        ));
                    }
                }
                Some(b'd') => {
                    let (tx, _) = unpacker
                        .as_ref()
                        .ok_or("archive data before CopyOutResponse")?;
                    // A closed channel means the unpacker failed; its error is reported below.
                    let _ = tx.send(m.body[1..].to_vec());
                }
                Some(b'p') if m.body.len() == 9 => {
                    bar.set_position(u64::from_be_bytes(m.body[1..9].try_into().expect("8")));
                }
                _ => {}
            },
            b'c' => {
                if let Some((tx, handle)) = unpacker.take() {
                    drop(tx);
                    handle
                        .join()
                        .map_err(|_| "the unpacking thread panicked".to_string())?
                        .map_err(|e| format!("could not unpack the backup: {e}"))?;
                }
            }
            b'E' => error = ReplClient::error_of(&m),
            b'Z' => break,
            _ => {}
        }
    }
    bar.finish_and_clear();
    if let Some((tx, handle)) = unpacker.take() {
        drop(tx);
        let _ = handle.join();
    }
    if let Some(e) = error {
        return Err(fail(e));
    }
    let pos = |r: Option<&Vec<Option<String>>>| {
        r.and_then(|r| r.first().cloned().flatten())
            .ok_or_else(|| "the server did not report the backup's positions".to_string())
    };
    // Rows: the start, the tablespace list, the end.
    let start = pos(rows.first())?;
    let end = pos(rows.last())?;
    sync_tree(&args.dir).map_err(|e| format!("could not fsync the backup: {e}"))?;
    Ok((start, end))
}

/// Quotes `value` for a libpq keyword/value connection string when it is not plain ASCII
/// letters, digits, `_` and `.`: in single quotes, with `\'` and `\\` for a quote and a
/// backslash (PostgreSQL's `appendConnStrVal`, `src/fe_utils/string_utils.c`; an empty value
/// is `''`).
fn conninfo_value(value: &str) -> String {
    let plain = !value.is_empty()
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'.');
    if plain {
        return value.to_string();
    }
    let mut out = String::with_capacity(value.len() + 2);
    out.push('\'');
    for ch in value.chars() {
        if ch == '\'' || ch == '\\' {
            out.push('\\');
        }
        out.push(ch);
    }
    out.push('\'');
    out
}

/// The libpq connection string a standby's walreceiver connects to the server of `conn`
/// with: `user=U [password=PW] host=H port=P`, the password only if one was given
/// (`PGPASSWORD`), each value quoted by [`conninfo_value`]. No `application_name`: the
/// standby's own is sent (as PostgreSQL's `GenerateRecoveryConfig`, which leaves out
/// `dbname`, `replication` and `fallback_application_name`).
fn recovery_conninfo(conn: &ConnInfo) -> String {
    let mut pairs = vec![("user", conn.user.clone())];
    if let Some(pw) = &conn.password {
        pairs.push(("password", pw.clone()));
    }
    pairs.push(("host", conn.host.clone()));
    pairs.push(("port", conn.port.to_string()));
    pairs
        .iter()
        .map(|(k, v)| format!("{k}={}", conninfo_value(v)))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The lines `-R` appends to `walnut.auto.conf`: `primary_conninfo = '...'` for `conn` and,
/// with a slot, `primary_slot_name = '...'`, each value a configuration-file string literal
/// (`''` for a quote, `\\` for a backslash: PostgreSQL's `escape_quotes`, what the file parser,
/// `walnut_common::guc::parse_conf`, reads back). From PostgreSQL's `GenerateRecoveryConfig`
/// in `src/fe_utils/recovery_gen.c`.
///
/// # Errors
/// A connection value with a line break or NUL, which a configuration line cannot hold.
fn recovery_config(conn: &ConnInfo, slot: Option<&str>) -> Result<String, String> {
    let conninfo = recovery_conninfo(conn);
    if conninfo.contains(['\n', '\r', '\0']) {
        return Err(
            "cannot write primary_conninfo: a connection value (user, password or host) contains a line break or NUL"
                .to_string(),
        );
    }
    let mut text = format!("primary_conninfo = {}\n", quote_conf(&conninfo));
    if let Some(slot) = slot {
        text.push_str(&format!("primary_slot_name = {}\n", quote_conf(slot)));
    }
    Ok(text)
}

/// Makes the copy in `dir` a standby (`-R`): appends `contents` to `dir/walnut.auto.conf`
/// (created, mode 0600, if the copy has none; a line break first if its last line lacks one)
/// and creates an empty `dir/standby.signal` (mode 0600), then fsyncs both files and `dir`.
/// PostgreSQL's `WriteRecoveryConfig` in `src/fe_utils/recovery_gen.c` (its
/// `postgresql.auto.conf`).
///
/// # Errors
/// I/O errors, naming the file.
fn write_recovery_config(dir: &Path, contents: &str) -> Result<(), String> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let auto_conf = dir.join(AUTO_CONF_FILE);
    let err = |what: &str, path: &Path, e: std::io::Error| {
        format!("could not {what} file \"{}\": {e}", path.display())
    };
    let existing = match std::fs::read(&auto_conf) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(err("read", &auto_conf, e)),
    };
    let mut text = String::new();
    if existing.last().is_some_and(|&b| b != b'\n') {
        text.push('\n');
    }
    text.push_str(contents);
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o600)
        .open(&auto_conf)
        .map_err(|e| err("open", &auto_conf, e))?;
    f.write_all(text.as_bytes())
        .map_err(|e| err("write", &auto_conf, e))?;
    f.sync_all().map_err(|e| err("fsync", &auto_conf, e))?;
    let signal = dir.join("standby.signal");
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&signal)
        .and_then(|f| f.sync_all())
        .map_err(|e| err("create", &signal, e))?;
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| format!("could not fsync directory \"{}\": {e}", dir.display()))
}

/// Runs `walnut basebackup`.
///
/// # Errors
/// A message for the user: the target is not empty; an invalid slot name, or `create_slot`
/// without one; the slot does not exist (`replication slot "SLOT" does not exist`) or cannot
/// be created (the server's error, e.g. that it already exists); the connection, the backup
/// or writing the standby's configuration failed.
pub fn run(args: &BaseBackupArgs) -> Result<(), String> {
    if args.create_slot && args.slot.is_none() {
        return Err("--create-slot needs a slot to be specified using --slot".to_string());
    }
    if let Some(slot) = &args.slot {
        // Checked here because the name goes unquoted into replication commands and the
        // configuration file (as in pg_basebackup, whose server allows nothing else).
        walnut_storage::slots::validate_name(slot).map_err(|e| {
            let mut m = e.message.clone();
            if let Some(d) = &e.detail {
                m.push_str(&format!("\nDETAIL: {d}"));
            }
            m
        })?;
    }
    let created = !args.dir.exists();
    if !created {
        let mut entries = std::fs::read_dir(&args.dir)
            .map_err(|e| format!("could not open directory \"{}\": {e}", args.dir.display()))?;
        if entries.next().is_some() {
            return Err(format!(
                "directory \"{}\" exists but is not empty",
                args.dir.display()
            ));
        }
    }
    {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&args.dir)
            .map_err(|e| format!("could not create directory \"{}\": {e}", args.dir.display()))?;
    }
    match copy(args) {
        Ok((start, end)) => {
            eprintln!(
                "walnut basebackup: base backup of {}:{} complete in \"{}\": WAL from {start} to {end} included",
                args.conn.host,
                args.conn.port,
                args.dir.display()
            );
            if args.write_recovery_conf {
                eprintln!(
                    "walnut basebackup: wrote standby.signal and primary_conninfo{} to {AUTO_CONF_FILE}: the copy starts as a standby",
                    if args.slot.is_some() { " and primary_slot_name" } else { "" }
                );
            }
            Ok(())
        }
        Err(e) => {
            if created {
                eprintln!(
                    "walnut basebackup: removing data directory \"{}\"",
                    args.dir.display()
                );
                let _ = std::fs::remove_dir_all(&args.dir);
            }
            Err(e)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use walnut_common::guc::parse_conf;

    /// A libpq keyword/value string's pairs, as libpq's `conninfo_parse` reads them: values
    /// plain up to whitespace or in single quotes, a backslash taking the next character.
    fn parse_conninfo(s: &str) -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        let mut it = s.chars().peekable();
        loop {
            while it.peek().is_some_and(|c| c.is_whitespace()) {
                it.next();
            }
            if it.peek().is_none() {
                return out;
            }
            let key: String = it.by_ref().take_while(|&c| c != '=').collect();
            let quoted = it.peek() == Some(&'\'');
            if quoted {
                it.next();
            }
            let mut value = String::new();
            while let Some(c) = it.next() {
                match c {
                    '\\' => value.push(it.next().expect("an escaped character")),
                    '\'' if quoted => break,
                    c if c.is_whitespace() && !quoted => break,
                    c => value.push(c),
                }
            }
            out.insert(key.trim().to_string(), value);
        }
    }

    fn conn(user: &str, password: Option<&str>) -> ConnInfo {
        ConnInfo {
            host: "127.0.0.1".into(),
            port: 5433,
            user: user.into(),
            password: password.map(str::to_string),
            application_name: "walnut_basebackup".into(),
        }
    }

    #[test]
    fn conninfo_values_are_quoted_as_libpq_reads_them() {
        assert_eq!(conninfo_value("postgres"), "postgres");
        assert_eq!(conninfo_value("127.0.0.1"), "127.0.0.1");
        assert_eq!(conninfo_value(""), "''");
        assert_eq!(conninfo_value("a b"), "'a b'");
        assert_eq!(conninfo_value("::1"), "'::1'");
        assert_eq!(conninfo_value(r"it's\x"), r"'it\'s\\x'");
        assert_eq!(
            recovery_conninfo(&conn("postgres", None)),
            "user=postgres host=127.0.0.1 port=5433"
        );
        assert_eq!(
            recovery_conninfo(&conn("postgres", Some("secret"))),
            "user=postgres password=secret host=127.0.0.1 port=5433"
        );
    }

    #[test]
    fn recovery_config_reads_back_through_the_config_parser() {
        let (user, pw) = ("o'brien x", r"p\w 'd");
        let c = conn(user, Some(pw));
        let contents = recovery_config(&c, Some("standby1")).unwrap();
        assert_eq!(
            contents,
            concat!(
                r"primary_conninfo = 'user=''o\\''brien x'' password=''p\\\\w \\''d'' host=127.0.0.1 port=5433'",
                "\nprimary_slot_name = 'standby1'\n"
            )
        );
        // Appended after what ALTER SYSTEM wrote, even without its last line break.
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join(AUTO_CONF_FILE),
            "# Do not edit this file manually!\nwork_mem = '4MB'",
        )
        .unwrap();
        write_recovery_config(dir.path(), &contents).unwrap();
        let text = std::fs::read_to_string(dir.path().join(AUTO_CONF_FILE)).unwrap();
        let entries = parse_conf(&text).unwrap();
        let names: Vec<&str> = entries.iter().map(|e| e.0.as_str()).collect();
        assert_eq!(names, ["work_mem", "primary_conninfo", "primary_slot_name"]);
        assert_eq!(entries[1].1, recovery_conninfo(&c));
        assert_eq!(entries[2].1, "standby1");
        let want: BTreeMap<String, String> = [
            ("user", user),
            ("password", pw),
            ("host", "127.0.0.1"),
            ("port", "5433"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        assert_eq!(parse_conninfo(&entries[1].1), want);
        // And as the standby's walreceiver reads it (tokio-postgres's libpq-syntax parser).
        let pg: tokio_postgres::Config = entries[1].1.parse().unwrap();
        assert_eq!(pg.get_user(), Some(user));
        assert_eq!(pg.get_password(), Some(pw.as_bytes()));
        assert_eq!(pg.get_ports(), [5433]);
        let signal = std::fs::metadata(dir.path().join("standby.signal")).unwrap();
        assert_eq!(signal.len(), 0);
    }

    #[test]
    fn a_missing_auto_conf_is_created_private() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let contents = recovery_config(&conn("postgres", None), None).unwrap();
        assert!(!contents.contains("primary_slot_name"));
        write_recovery_config(dir.path(), &contents).unwrap();
        let path = dir.path().join(AUTO_CONF_FILE);
        let entries = parse_conf(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(
            (entries.len(), entries[0].1.as_str()),
            (1, "user=postgres host=127.0.0.1 port=5433")
        );
        for file in [AUTO_CONF_FILE, "standby.signal"] {
            let mode = std::fs::metadata(dir.path().join(file))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600, "{file}");
        }
    }

    #[test]
    fn a_line_break_in_a_value_is_refused() {
        assert!(recovery_config(&conn("a\nb", None), None).is_err());
    }

    #[test]
    fn bad_slot_arguments_are_refused_before_connecting() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("copy");
        let mut args = BaseBackupArgs {
            // Nothing listens on port 1: the checks must come first.
            conn: ConnInfo {
                port: 1,
                ..conn("postgres", None)
            },
            dir: target.clone(),
            label: "t".into(),
            write_recovery_conf: true,
            slot: Some("Bad-Name".into()),
            create_slot: false,
        };
        let e = run(&args).unwrap_err();
        assert!(e.contains("contains invalid character"), "{e}");
        args.slot = None;
        args.create_slot = true;
        let e = run(&args).unwrap_err();
        assert!(e.contains("--create-slot needs a slot"), "{e}");
        assert!(!target.exists());
    }
}
