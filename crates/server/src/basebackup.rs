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

use crate::repl_client::{data_row, ClientError, ConnInfo, ReplClient};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::mpsc;

/// What `walnut basebackup` was asked.
#[derive(Clone, Debug)]
pub struct BaseBackupArgs {
    /// The server.
    pub conn: ConnInfo,
    /// The directory to write the copy into (missing or empty).
    pub dir: PathBuf,
    /// The backup's label (in `backup_label`).
    pub label: String,
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

fn copy(args: &BaseBackupArgs) -> Result<Positions, String> {
    let fail = |e: ClientError| format!("could not take the base backup: {e}");
    let mut c = ReplClient::connect(&args.conn).map_err(|e| {
        format!(
            "could not connect to {}:{}: {e}",
            args.conn.host, args.conn.port
        )
    })?;
    c.query("IDENTIFY_SYSTEM").map_err(fail)?;
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

/// Runs `walnut basebackup`.
///
/// # Errors
/// A message for the user: the target is not empty, the connection or the backup failed.
pub fn run(args: &BaseBackupArgs) -> Result<(), String> {
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
