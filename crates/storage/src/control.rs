//! The control file `global/pg_control` and the transaction status file `pg_xact/status`.
//!
//! Control file, 56 bytes, little-endian:
//! ```text
//!  0 u32 magic "WLNT" (0x544E_4C57)
//!  4 u32 format version ([`FORMAT_VERSION`])
//!  8 u32 state: 1 = shut down cleanly, 2 = in production
//! 12 u32 timeline        the current timeline (0, written by older versions, reads as 1)
//! 16 u64 checkpoint_lsn  start of the last checkpoint record
//! 24 u64 redo_lsn        that checkpoint's redo point
//! 32 u64 next_xid
//! 40 u32 next_relfile
//! 44 u64 system_identifier  chosen by initdb, never changed (IDENTIFY_SYSTEM's systemid)
//! 52 u32 crc32c of bytes 0..52
//! ```
//! Status file: u32 magic "WXST", u32 reserved, u64 count, `count` status bytes (index = xid;
//! 0 unknown, 1 aborted, 2 committed), u32 crc32c of everything before it.
//!
//! Both are replaced atomically: write `NAME.tmp`, fsync it, rename over `NAME`, fsync the
//! directory. A crash leaves either the old or the new file.

use std::path::Path;
use walnut_common::{panic_fatal, Error, Lsn, Result, Xid};
use walnut_io::{OpenMode, Vfs};

const MAGIC: u32 = 0x544E_4C57;

/// Version of the on-disk formats, stored in the control file (PostgreSQL's
/// `PG_CONTROL_VERSION` and `CATALOG_VERSION_NO` in one). A data directory of another version
/// is refused at start-up. History: 1, the first; 2, heap rows store a string's length in one
/// byte when it is under 128 bytes, and `char(n)` without its trailing blanks; 3, the control
/// file holds the system identifier.
pub const FORMAT_VERSION: u32 = 3;
/// Size of the control file, bytes.
const CONTROL_LEN: usize = 56;
const XST_MAGIC: u32 = 0x5453_5857;

/// Database state recorded in the control file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DbState {
    /// The last shutdown completed a checkpoint: no redo needed.
    ShutDown = 1,
    /// The server was running: start-up runs crash recovery.
    InProduction = 2,
}

/// Contents of the control file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ControlFile {
    /// State at the last update.
    pub state: DbState,
    /// Start of the last checkpoint record.
    pub checkpoint_lsn: Lsn,
    /// Its redo point: recovery replays from here.
    pub redo_lsn: Lsn,
    /// Next transaction id as of the checkpoint.
    pub next_xid: Xid,
    /// Next relation file id as of the checkpoint.
    pub next_relfile: u32,
    /// The timeline the WAL is on (`timeline.rs`): 1 from initdb, one more at each promotion.
    pub timeline: u32,
    /// The data directory's identity, chosen by initdb ([`new_system_identifier`]) and copied
    /// by base backups: a standby streams only from a primary with the same one.
    pub system_identifier: u64,
}

/// A new system identifier, as PostgreSQL's `BootStrapXLOG` makes one: the seconds of the
/// current time in the high 32 bits, its microseconds shifted left by 12, and 12 random bits
/// (PostgreSQL uses the pid), so that two clusters made at once still differ.
pub fn new_system_identifier() -> u64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let mut r = [0u8; 2];
    let _ = getrandom::getrandom(&mut r);
    (now.as_secs() << 32)
        | (u64::from(now.subsec_micros()) << 12)
        | u64::from(u16::from_le_bytes(r) & 0xFFF)
}

/// Writes `bytes` to `path` atomically and durably through the Vfs: a temporary file, written
/// and fsynced, renamed over `path`, then the directory fsynced.
///
/// # Errors
/// I/O errors from creating, writing or renaming the file.
///
/// # Panics
/// PANICs (aborts the process, [`panic_fatal`]) if the fsync of the file or of its directory
/// fails: a failed fsync is never retried (PostgreSQL's `UpdateControlFile` and
/// `data_sync_elevel`), since the kernel may have dropped the dirty pages it failed to write.
pub fn durable_replace(vfs: &dyn Vfs, path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = path.with_extension("tmp");
    let ctx = |what: &str| format!("could not {what} \"{}\"", tmp.display());
    let f = vfs
        .open(
            &tmp,
            OpenMode {
                create: true,
                ..Default::default()
            },
        )
        .map_err(|e| Error::io(ctx("create"), e))?;
    f.set_len(0).map_err(|e| Error::io(ctx("truncate"), e))?;
    f.write_at(bytes, 0)
        .map_err(|e| Error::io(ctx("write"), e))?;
    if let Err(e) = f.sync_all() {
        panic_fatal(&format!("{}: {e}", ctx("fsync")));
    }
    drop(f);
    vfs.rename(&tmp, path)
        .map_err(|e| Error::io(format!("could not rename \"{}\"", tmp.display()), e))?;
    let dir = path.parent().unwrap_or(Path::new("."));
    if let Err(e) = vfs.sync_dir(dir) {
        panic_fatal(&format!(
            "could not fsync directory \"{}\": {e}",
            dir.display()
        ));
    }
    Ok(())
}

/// The whole file at `path` through the Vfs, or `None` if it does not exist.
///
/// # Errors
/// I/O errors.
pub fn read_all(vfs: &dyn Vfs, path: &Path) -> Result<Option<Vec<u8>>> {
    if !vfs.exists(path) {
        return Ok(None);
    }
    let f = vfs
        .open(path, OpenMode::default())
        .map_err(|e| Error::io(format!("could not open \"{}\"", path.display()), e))?;
    let len = f.len().map_err(|e| Error::io("could not stat", e))? as usize;
    let mut buf = vec![0u8; len];
    f.read_exact_at(&mut buf, 0)
        .map_err(|e| Error::io(format!("could not read \"{}\"", path.display()), e))?;
    Ok(Some(buf))
}

impl ControlFile {
    /// Encodes to the 56-byte format.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(CONTROL_LEN);
        b.extend_from_slice(&MAGIC.to_le_bytes());
        b.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
        b.extend_from_slice(&(self.state as u32).to_le_bytes());
        b.extend_from_slice(&self.timeline.to_le_bytes());
        b.extend_from_slice(&self.checkpoint_lsn.0.to_le_bytes());
        b.extend_from_slice(&self.redo_lsn.0.to_le_bytes());
        b.extend_from_slice(&self.next_xid.0.to_le_bytes());
        b.extend_from_slice(&self.next_relfile.to_le_bytes());
        b.extend_from_slice(&self.system_identifier.to_le_bytes());
        let crc = walnut_common::crc32c(&b);
        b.extend_from_slice(&crc.to_le_bytes());
        b
    }

    /// Decodes and validates.
    ///
    /// # Errors
    /// Corruption for a wrong magic, version, size or CRC.
    pub fn decode(b: &[u8]) -> Result<ControlFile> {
        // The version comes first: an older directory's file is shorter.
        if b.len() >= 8 && b[..4] == MAGIC.to_le_bytes() && b[4..8] != FORMAT_VERSION.to_le_bytes()
        {
            return Err(Error::corruption(format!(
                "database files are incompatible with server: the data directory was \
                 initialized with format version {}, but the server needs version \
                 {FORMAT_VERSION}; it looks like you need to initdb",
                u32::from_le_bytes([b[4], b[5], b[6], b[7]])
            )));
        }
        if b.len() != CONTROL_LEN {
            return Err(Error::corruption(format!(
                "control file has {} bytes, expected {CONTROL_LEN}",
                b.len()
            )));
        }
        let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().expect("4"));
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8"));
        if u32_at(0) != MAGIC {
            return Err(Error::corruption("control file has a wrong magic number"));
        }
        if walnut_common::crc32c(&b[..52]) != u32_at(52) {
            return Err(Error::corruption("incorrect checksum in control file"));
        }
        let state = match u32_at(8) {
            1 => DbState::ShutDown,
            2 => DbState::InProduction,
            s => {
                return Err(Error::corruption(format!(
                    "control file has unknown state {s}"
                )))
            }
        };
        Ok(ControlFile {
            state,
            checkpoint_lsn: Lsn(u64_at(16)),
            redo_lsn: Lsn(u64_at(24)),
            next_xid: Xid(u64_at(32)),
            next_relfile: u32_at(40),
            timeline: u32_at(12).max(1),
            system_identifier: u64_at(44),
        })
    }

    /// Reads `DATADIR/global/pg_control`.
    ///
    /// # Errors
    /// I/O errors; corruption; bad input if the file is missing (not a data directory).
    pub fn read(vfs: &dyn Vfs, datadir: &Path) -> Result<ControlFile> {
        let path = datadir.join("global/pg_control");
        match read_all(vfs, &path)? {
            Some(b) => ControlFile::decode(&b),
            None => Err(Error::user(
                walnut_common::SqlState::UNDEFINED_FILE,
                format!(
                    "\"{}\" is not a walnut data directory: {} is missing",
                    datadir.display(),
                    path.display()
                ),
            )),
        }
    }

    /// Replaces the control file durably.
    ///
    /// # Errors
    /// I/O errors.
    pub fn write(&self, vfs: &dyn Vfs, datadir: &Path) -> Result<()> {
        durable_replace(vfs, &datadir.join("global/pg_control"), &self.encode())
    }
}

/// Writes the transaction status file durably.
///
/// # Errors
/// I/O errors.
pub fn write_xact_status(vfs: &dyn Vfs, datadir: &Path, status: &[u8]) -> Result<()> {
    let mut b = Vec::with_capacity(status.len() + 20);
    b.extend_from_slice(&XST_MAGIC.to_le_bytes());
    b.extend_from_slice(&0u32.to_le_bytes());
    b.extend_from_slice(&(status.len() as u64).to_le_bytes());
    b.extend_from_slice(status);
    let crc = walnut_common::crc32c(&b);
    b.extend_from_slice(&crc.to_le_bytes());
    durable_replace(vfs, &datadir.join("pg_xact/status"), &b)
}

/// Reads the transaction status file (empty if it does not exist yet).
///
/// # Errors
/// I/O errors; corruption for a bad magic, length or CRC.
pub fn read_xact_status(vfs: &dyn Vfs, datadir: &Path) -> Result<Vec<u8>> {
    let Some(b) = read_all(vfs, &datadir.join("pg_xact/status"))? else {
        return Ok(Vec::new());
    };
    if b.len() < 20 || u32::from_le_bytes(b[0..4].try_into().expect("4")) != XST_MAGIC {
        return Err(Error::corruption("transaction status file is malformed"));
    }
    let n = u64::from_le_bytes(b[8..16].try_into().expect("8")) as usize;
    if b.len() != 16 + n + 4 {
        return Err(Error::corruption(
            "transaction status file has a wrong length",
        ));
    }
    let crc = u32::from_le_bytes(b[16 + n..].try_into().expect("4"));
    if walnut_common::crc32c(&b[..16 + n]) != crc {
        return Err(Error::corruption(
            "incorrect checksum in transaction status file",
        ));
    }
    Ok(b[16..16 + n].to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_round_trip_and_crc() {
        let c = ControlFile {
            state: DbState::InProduction,
            checkpoint_lsn: Lsn(100),
            redo_lsn: Lsn(64),
            next_xid: Xid(9),
            next_relfile: 16390,
            timeline: 3,
            system_identifier: 7_000_000_000_000_000_001,
        };
        let mut b = c.encode();
        assert_eq!(ControlFile::decode(&b).unwrap(), c);
        b[20] ^= 1;
        assert!(ControlFile::decode(&b).is_err());
    }

    #[test]
    fn a_data_directory_of_another_format_version_is_refused_by_name() {
        let c = ControlFile {
            state: DbState::ShutDown,
            checkpoint_lsn: Lsn(100),
            redo_lsn: Lsn(100),
            next_xid: Xid(3),
            next_relfile: 16385,
            timeline: 1,
            system_identifier: 1,
        };
        let mut b = c.encode();
        b[4..8].copy_from_slice(&2u32.to_le_bytes());
        let crc = walnut_common::crc32c(&b[..52]);
        b[52..56].copy_from_slice(&crc.to_le_bytes());
        let err = ControlFile::decode(&b).unwrap_err().to_string();
        assert!(
            err.contains("incompatible") && err.contains("version 2") && err.contains("initdb"),
            "{err}"
        );
        // A version-2 file is 48 bytes: still refused by version, not by size.
        let err = ControlFile::decode(&b[..48]).unwrap_err().to_string();
        assert!(err.contains("version 2"), "{err}");
    }
}
