//! Timelines and their history files (PostgreSQL's src/backend/access/transam/timeline.c).
//!
//! Each promotion starts a new timeline, numbered one above the newest whose history file the
//! WAL directory holds (`findNewestTimeLine`), and writes `wal/NNNNNNNN.history` (8 hex digits,
//! the new timeline), PostgreSQL's format: the parent's lines, then one for the parent itself,
//! `PARENT<TAB>SWITCH_LSN<TAB>reason`, where SWITCH_LSN is where the parent's WAL stopped being
//! this timeline's. A standby on timeline T may follow a primary on timeline P only if P's
//! history names T with a switch point at or after the standby's WAL end; otherwise their WAL
//! diverged, and streaming would mix two histories.
//!
//! walnut's segment files keep timeline 1 in their names (see DESIGN.md, "Standby mode"): the
//! timeline is in the control file (bytes 12..16), IDENTIFY_SYSTEM, START_REPLICATION and
//! these files.

use crate::control;
use std::path::Path;
use walnut_common::{Error, Lsn, Result};
use walnut_io::Vfs;

/// The file name of timeline `tli`'s history (`TLHistoryFileName`).
pub fn history_file_name(tli: u32) -> String {
    format!("{tli:08X}.history")
}

/// One line of a history file: timeline `tli` ended at `switch` (bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TimelineEntry {
    /// The parent timeline.
    pub tli: u32,
    /// Where its WAL stopped being the child's.
    pub switch: Lsn,
}

/// Parses a history file's text; blank lines and `#` comments are skipped.
///
/// # Errors
/// Corruption for a line that is not `TLI<TAB>X/X...`, or timelines out of order.
pub fn parse_history(text: &str) -> Result<Vec<TimelineEntry>> {
    let mut out: Vec<TimelineEntry> = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut f = line.split_whitespace();
        let bad = || Error::corruption(format!("syntax error in history file: {line}"));
        let tli: u32 = f.next().and_then(|s| s.parse().ok()).ok_or_else(bad)?;
        let switch = f
            .next()
            .and_then(walnut_common::value::parse_lsn)
            .map(Lsn)
            .ok_or_else(bad)?;
        if out.last().is_some_and(|e| e.tli >= tli) {
            return Err(Error::corruption(format!(
                "invalid data in history file: timeline IDs must be in increasing sequence: {line}"
            )));
        }
        out.push(TimelineEntry { tli, switch });
    }
    Ok(out)
}

/// Where timeline `tli` forked off according to `history` (the history of a later timeline):
/// `None` if `tli` is not in it.
pub fn fork_point(history: &[TimelineEntry], tli: u32) -> Option<Lsn> {
    history.iter().find(|e| e.tli == tli).map(|e| e.switch)
}

/// The text of timeline `tli`'s history file in `wal_dir`, if it exists.
///
/// # Errors
/// I/O errors reading it.
pub fn read_history(vfs: &dyn Vfs, wal_dir: &Path, tli: u32) -> Result<Option<String>> {
    Ok(
        control::read_all(vfs, &wal_dir.join(history_file_name(tli)))?
            .map(|b| String::from_utf8_lossy(&b).into_owned()),
    )
}

/// Writes timeline `tli`'s history file durably (write, fsync, rename, fsync the directory).
///
/// # Errors
/// I/O errors.
pub fn write_history(vfs: &dyn Vfs, wal_dir: &Path, tli: u32, text: &str) -> Result<()> {
    control::durable_replace(vfs, &wal_dir.join(history_file_name(tli)), text.as_bytes())
}

/// The newest timeline with a history file in `wal_dir`, or `current` if that is newer
/// (`findNewestTimeLine`).
///
/// # Errors
/// I/O errors listing the directory.
pub fn newest_timeline(vfs: &dyn Vfs, wal_dir: &Path, current: u32) -> Result<u32> {
    let names = vfs
        .list_dir(wal_dir)
        .map_err(|e| Error::io("could not read the WAL directory", e))?;
    Ok(names
        .iter()
        .filter_map(|n| n.strip_suffix(".history"))
        .filter(|n| n.len() == 8)
        .filter_map(|n| u32::from_str_radix(n, 16).ok())
        .fold(current, u32::max))
}

/// The history of a new timeline that forks off `parent` at `switch`: the parent's own
/// history (`parent_text`, empty for timeline 1) and a line for the parent.
pub fn child_history(parent_text: &str, parent: u32, switch: Lsn) -> String {
    let mut s = parent_text.to_string();
    if !s.is_empty() && !s.ends_with('\n') {
        s.push('\n');
    }
    s.push_str(&format!(
        "{parent}\t{switch}\tno recovery target specified\n"
    ));
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn history_files_round_trip_and_name_fork_points() {
        assert_eq!(history_file_name(2), "00000002.history");
        let h2 = child_history("", 1, Lsn(0x3000_0028));
        let h3 = child_history(&h2, 2, Lsn(0x5_0000_0000));
        assert_eq!(
            h3,
            "1\t0/30000028\tno recovery target specified\n2\t5/0\tno recovery target specified\n"
        );
        let e = parse_history(&h3).unwrap();
        assert_eq!(fork_point(&e, 1), Some(Lsn(0x3000_0028)));
        assert_eq!(fork_point(&e, 2), Some(Lsn(0x5_0000_0000)));
        assert_eq!(fork_point(&e, 3), None);
        assert!(parse_history("2\t0/1\tx\n1\t0/2\ty\n").is_err());
        assert!(parse_history("one\t0/1\n").is_err());
        assert!(parse_history("# comment\n\n1\t0/10\n").is_ok());
    }
}
