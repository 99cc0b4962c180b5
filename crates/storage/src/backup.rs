//! Online base backups (PostgreSQL's `do_pg_backup_start` / `do_pg_backup_stop` in `xlog.c` and
//! `basebackup.c`): a copy of a running server's files that recovers to a consistent state with
//! the WAL written while it was taken.
//!
//! Protocol:
//! 1. Hold the WAL from the current redo point on ([`crate::slots::WalHold`]), so that no
//!    checkpoint recycles what the copy will need.
//! 2. Run an immediate checkpoint; read the control file it wrote. Its checkpoint is the
//!    backup's start: its redo point `R` is where the copy's recovery begins. Every page
//!    dirtied before `R` is on disk; every page changed after `R` has a full-page image in the
//!    WAL after `R` (full_page_writes must be on), which repairs a page the copy read while it
//!    was being written.
//! 3. Copy the files ([`backup_files`]; the caller streams them). A file that vanishes meanwhile
//!    (a dropped table) is skipped; a file that grows is copied to its size at the start of
//!    its copy (redo extends it).
//! 4. Stop: `E` = the WAL's insert position, flushed. Every page the copy read carries only
//!    changes whose records end at or before `E` (a page is written out only after the WAL up
//!    to its LSN is durable).
//! 5. The copy gets the control file read at step 2, the WAL segments from `R`'s to `E`'s (the
//!    last one zeroed after `E`), and a `backup_label` naming `R`, the checkpoint and `E`.
//!
//! Recovery of the copy ([`crate::Storage::open`] with a `backup_label`): redo from `R` as after
//! a crash, and it must reach `E`, or the start fails with "WAL ends before end of online
//! backup" (the copy is not consistent before `E`). Then `backup_label` is renamed to
//! `backup_label.old`, after the end-of-recovery checkpoint.

use crate::control::ControlFile;
use crate::slots::WalHold;
use crate::Storage;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use walnut_common::{Error, Lsn, Result, SqlState};

/// The name of the label file in a backup's data directory.
pub const BACKUP_LABEL: &str = "backup_label";

/// A backup in progress: where it starts, and the WAL held for it.
#[derive(Debug)]
pub struct BackupStart {
    /// Redo point of the start checkpoint, bytes: the copy's recovery starts here.
    pub redo: Lsn,
    /// The start checkpoint's record.
    pub checkpoint: Lsn,
    /// The control file that checkpoint wrote: the copy's `global/pg_control`.
    pub control: Vec<u8>,
    /// When the backup started.
    pub started: std::time::SystemTime,
    /// The timeline the start checkpoint was written on (the control file's).
    pub timeline: u32,
    hold: WalHold,
}

/// What a `backup_label` says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BackupLabel {
    /// START WAL LOCATION: the redo point recovery starts at.
    pub start: Lsn,
    /// CHECKPOINT LOCATION.
    pub checkpoint: Lsn,
    /// BACKUP END LOCATION (walnut's line; PostgreSQL finds the end in a WAL record): recovery
    /// must reach it.
    pub end: Lsn,
}

/// One file or directory of a backup: its path relative to the data directory, and where it
/// is now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BackupFile {
    /// Path inside the data directory (`base/16384`), with `/` separators.
    pub name: String,
    /// Its path on this server.
    pub path: PathBuf,
    /// A directory (its entries are listed after it).
    pub is_dir: bool,
}

/// What a backup leaves out: the WAL (added separately, `R` to `E`), the contents of
/// `pg_replslot` (slots belong to the server, as in PostgreSQL), labels and signal files, and
/// temporary files.
fn excluded(name: &str) -> bool {
    let top = name.split('/').next().unwrap_or("");
    (top == "wal" || top == "pg_replslot") && name.contains('/')
        || matches!(
            name,
            "backup_label" | "backup_label.old" | "standby.signal" | "recovery.signal"
        )
        || name.ends_with(".tmp")
        || name == "global/pg_control"
}

/// Every file and directory to copy, directories before their entries, sorted by name.
///
/// # Errors
/// I/O errors listing the data directory.
pub fn backup_files(datadir: &Path) -> Result<Vec<BackupFile>> {
    fn walk(root: &Path, rel: &str, out: &mut Vec<BackupFile>) -> Result<()> {
        let dir = if rel.is_empty() {
            root.to_path_buf()
        } else {
            root.join(rel)
        };
        let mut entries: Vec<_> = std::fs::read_dir(&dir)
            .map_err(|e| Error::io(format!("could not open directory \"{}\"", dir.display()), e))?
            .filter_map(|e| e.ok())
            .collect();
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            let Some(file) = e.file_name().to_str().map(str::to_string) else {
                continue;
            };
            let name = if rel.is_empty() {
                file
            } else {
                format!("{rel}/{file}")
            };
            if excluded(&name) {
                continue;
            }
            // A file removed meanwhile is skipped.
            let Ok(ft) = e.file_type() else { continue };
            if ft.is_dir() {
                out.push(BackupFile {
                    name: name.clone(),
                    path: e.path(),
                    is_dir: true,
                });
                walk(root, &name, out)?;
            } else if ft.is_file() {
                out.push(BackupFile {
                    name,
                    path: e.path(),
                    is_dir: false,
                });
            }
        }
        Ok(())
    }
    let mut out = Vec::new();
    walk(datadir, "", &mut out)?;
    Ok(out)
}

impl Storage {
    /// Starts a base backup (steps 1 and 2 of the module's protocol).
    ///
    /// # Errors
    /// 55000 if `full_page_writes` is off (a copy could keep torn pages); the checkpoint's
    /// errors; corruption if the control file cannot be read back.
    pub fn start_backup(self: &Arc<Self>) -> Result<BackupStart> {
        if !self.full_page_writes {
            return Err(Error::user(
                SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE,
                "full_page_writes is off: a base backup needs full-page images to repair the pages it copies while they are written",
            ));
        }
        let wal = self.wal().clone();
        let hold = self.slots.hold(|| wal.redo_lsn());
        self.request_checkpoint()?;
        let control = std::fs::read(self.dir.join("global/pg_control"))
            .map_err(|e| Error::io("could not read the control file", e))?;
        let ctl = ControlFile::decode(&control)?;
        debug_assert!(ctl.redo_lsn >= hold.lsn());
        Ok(BackupStart {
            redo: ctl.redo_lsn,
            checkpoint: ctl.checkpoint_lsn,
            control,
            started: std::time::SystemTime::now(),
            timeline: ctl.timeline,
            hold,
        })
    }

    /// Ends a base backup (step 4): the WAL up to the returned position is durable and is what
    /// the copy needs, from `start.redo` on. The WAL stays held until `start` drops.
    ///
    /// # Errors
    /// The WAL flush's (a failed fsync PANICs).
    pub fn stop_backup(&self, start: &BackupStart) -> Result<Lsn> {
        let end = self.wal().insert_lsn();
        self.wal().flush(end)?;
        debug_assert!(end >= start.redo && start.hold.lsn() <= start.redo);
        Ok(end)
    }
}

/// The `backup_label` text (PostgreSQL's lines, plus walnut's BACKUP END LOCATION).
pub fn backup_label(start: &BackupStart, end: Lsn, label: &str) -> String {
    let secs = start
        .started
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    format!(
        "START WAL LOCATION: {} (file {})\nCHECKPOINT LOCATION: {}\nBACKUP END LOCATION: {end}\n\
         BACKUP METHOD: streamed\nBACKUP FROM: primary\nSTART TIME: {secs} (seconds since 1970-01-01 UTC)\n\
         LABEL: {label}\nSTART TIMELINE: {}\n",
        start.redo,
        walnut_wal::segment_file_name(start.timeline, walnut_wal::segment_of(start.redo.0)),
        start.checkpoint,
        start.timeline,
    )
}

/// Parses a `backup_label`.
///
/// # Errors
/// Corruption if a location line is missing or malformed.
pub fn parse_backup_label(text: &str) -> Result<BackupLabel> {
    let find = |key: &str| -> Result<Lsn> {
        text.lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.split_whitespace().next())
            .and_then(walnut_common::value::parse_lsn)
            .map(Lsn)
            .ok_or_else(|| {
                Error::corruption(format!("invalid data in file \"{BACKUP_LABEL}\": no {key}"))
            })
    };
    Ok(BackupLabel {
        start: find("START WAL LOCATION: ")?,
        checkpoint: find("CHECKPOINT LOCATION: ")?,
        end: find("BACKUP END LOCATION: ")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_round_trip_and_exclusions() {
        let start = BackupStart {
            redo: Lsn(0x1_0000_0028),
            checkpoint: Lsn(0x1_0000_0100),
            control: vec![],
            started: std::time::SystemTime::now(),
            timeline: 2,
            hold: {
                let tmp = tempfile::tempdir().unwrap();
                let slots =
                    crate::slots::ReplicationSlots::load(Arc::new(walnut_io::RealVfs), tmp.path())
                        .unwrap();
                slots.hold(|| Lsn(8))
            },
        };
        let text = backup_label(&start, Lsn(0x1_0300_0000), "nightly");
        assert!(text.contains("START WAL LOCATION: 1/28 (file 000000020000000100000000)"));
        assert!(text.contains("START TIMELINE: 2\n"));
        assert_eq!(
            parse_backup_label(&text).unwrap(),
            BackupLabel {
                start: Lsn(0x1_0000_0028),
                checkpoint: Lsn(0x1_0000_0100),
                end: Lsn(0x1_0300_0000)
            }
        );
        assert!(parse_backup_label("START WAL LOCATION: 0/8\n").is_err());
        for name in [
            "wal/000000010000000000000001",
            "pg_replslot/s.slot",
            "backup_label",
            "standby.signal",
            "global/pg_control",
            "global/pg_control.tmp",
        ] {
            assert!(excluded(name), "{name}");
        }
        for name in [
            "wal",
            "pg_replslot",
            "base/16384",
            "pg_xact/0000",
            "walnut.conf",
        ] {
            assert!(!excluded(name), "{name}");
        }
    }
}
