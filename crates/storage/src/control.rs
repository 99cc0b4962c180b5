//! The control file `global/pg_control` and the transaction status store `pg_xact/`.
//!
//! Control file, 64 bytes, little-endian:
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
//! 52 u64 oldest_xid      xids below are frozen out of every heap (PostgreSQL's oldestXid)
//! 60 u32 crc32c of bytes 0..60
//! ```
//! The control file is replaced atomically: write `pg_control.tmp`, fsync it, rename over
//! `pg_control`, fsync the directory. A crash leaves either the old or the new file.
//!
//! **Transaction status** (PostgreSQL's CLOG, `clog.c` on `slru.c`): two bits per xid
//! (`00` in progress or unknown, `01` committed, `10` aborted), [`XACTS_PER_PAGE`] xids to an
//! 8 kB page, xid `x` at byte `(x % XACTS_PER_PAGE) / 4`, bits `2 * (x % 4)` and up; pages
//! grouped [`XACT_PAGES_PER_SEGMENT`] to a segment file `pg_xact/SSSS` (segment number in
//! upper-case hex, at least four digits). A checkpoint writes in place only the pages whose
//! xids changed since the last one ([`write_xact_pages`]), then fsyncs them. No checksum and no
//! atomic replacement are needed: an xid's bits change once, from `00` to its outcome, so a
//! torn page write leaves each xid either as the previous checkpoint wrote it or as this one
//! does; every xid whose bits could be lost to the tear committed or aborted after the
//! previous checkpoint's redo point, which recovery then replays from (the control file still
//! names it), setting them again from their commit and abort records.

use std::path::Path;
use walnut_common::{panic_fatal, Error, Lsn, Result, Xid};
use walnut_io::{OpenMode, Vfs};

const MAGIC: u32 = 0x544E_4C57;

/// Version of the on-disk formats, stored in the control file (PostgreSQL's
/// `PG_CONTROL_VERSION` and `CATALOG_VERSION_NO` in one). A data directory of another version
/// is refused at start-up. History: 1, the first; 2, heap rows store a string's length in one
/// byte when it is under 128 bytes, and `char(n)` without its trailing blanks; 3, the control
/// file holds the system identifier; 4, the transaction status store is paged (`pg_xact/0000`
/// segments of two bits per xid instead of one `pg_xact/status` file of a byte per xid); 5, the
/// control file holds the oldest xid, and a heap `xmin` may be `Xid::ABORTED` (a format-4
/// directory is read as it is: it has neither); 6, heap tuples carry same-page update flags,
/// heap line pointers may be redirects, and an aborted `xmax` is frozen as `Xid::ABORTED`
/// (storage DESIGN.md, "Same-page updates"; a format-5 directory is read as it is: it has
/// none of them, and the control file is the same); 7, a heap tuple header is 24 bytes, or 30
/// with a `prev` field, instead of 32: no `prev` field where nothing links; 8, `xmin` and
/// `xmax` of 48 bits, for a header of 20 or 26 bytes (storage DESIGN.md, "Heap tuple").
/// Formats 4 to 7, whose tuples this version would misread, are refused like any other.
pub const FORMAT_VERSION: u32 = 8;
/// Size of the control file, bytes.
const CONTROL_LEN: usize = 64;

/// Transactions per page of the status store: two bits each (PostgreSQL's
/// `CLOG_XACTS_PER_PAGE`).
pub const XACTS_PER_PAGE: u64 = walnut_common::BLCKSZ as u64 * 4;
/// Pages per segment file of the status store (PostgreSQL's `SLRU_PAGES_PER_SEGMENT`).
pub const XACT_PAGES_PER_SEGMENT: u64 = 32;
/// Status bits of a committed xid (also a settled in-memory chunk's: `xact.rs`).
pub(crate) const XACT_BITS_COMMITTED: u8 = 0b01;
/// Status bits of an aborted xid.
pub(crate) const XACT_BITS_ABORTED: u8 = 0b10;

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
    /// Xids below this are frozen out of every heap and forgotten by the status store
    /// (PostgreSQL's `oldestXid`; DESIGN.md, "Freezing").
    pub oldest_xid: Xid,
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
    /// Encodes to the 64-byte format.
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
        b.extend_from_slice(&self.oldest_xid.0.to_le_bytes());
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
        let version = b
            .get(4..8)
            .map(|v| u32::from_le_bytes(v.try_into().expect("4")));
        if b.len() >= 8 && b[..4] == MAGIC.to_le_bytes() && version != Some(FORMAT_VERSION) {
            return Err(Error::corruption(format!(
                "database files are incompatible with server: the data directory was \
                 initialized with format version {}, but the server needs version \
                 {FORMAT_VERSION}; it looks like you need to initdb",
                u32::from_le_bytes([b[4], b[5], b[6], b[7]])
            )));
        }
        let len = CONTROL_LEN;
        if b.len() != len {
            return Err(Error::corruption(format!(
                "control file has {} bytes, expected {len}",
                b.len()
            )));
        }
        let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().expect("4"));
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8"));
        if u32_at(0) != MAGIC {
            return Err(Error::corruption("control file has a wrong magic number"));
        }
        if walnut_common::crc32c(&b[..len - 4]) != u32_at(len - 4) {
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
            oldest_xid: Xid(u64_at(52)),
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

/// The segment file of the status store holding page `pageno`.
pub fn xact_segment_path(datadir: &Path, pageno: u64) -> std::path::PathBuf {
    datadir
        .join("pg_xact")
        .join(format!("{:04X}", pageno / XACT_PAGES_PER_SEGMENT))
}

/// Encodes page `pageno` of the status store from `status(xid)`, one of
/// [`crate::xact::CLOG_UNKNOWN`], [`crate::xact::CLOG_ABORTED`] or
/// [`crate::xact::CLOG_COMMITTED`] for each xid of the page.
pub fn encode_xact_page(
    pageno: u64,
    status: impl Fn(Xid) -> u8,
) -> Box<[u8; walnut_common::BLCKSZ]> {
    let mut page = Box::new([0u8; walnut_common::BLCKSZ]);
    let first = pageno * XACTS_PER_PAGE;
    for i in 0..XACTS_PER_PAGE {
        let bits = match status(Xid(first + i)) {
            crate::xact::CLOG_COMMITTED => XACT_BITS_COMMITTED,
            crate::xact::CLOG_ABORTED => XACT_BITS_ABORTED,
            _ => continue,
        };
        page[(i / 4) as usize] |= bits << (2 * (i % 4));
    }
    page
}

/// Writes pages of the status store in place (`(page number, bytes)`, in any order), creating
/// segment files as needed, then fsyncs every file written and, if one was created, the
/// directory. A failed fsync is a PANIC, never an error (see `panic_fatal`).
///
/// # Errors
/// I/O errors opening or writing a segment (nothing is known durable then; the caller keeps
/// the pages to write again).
pub fn write_xact_pages(
    vfs: &dyn Vfs,
    datadir: &Path,
    pages: &[(u64, Box<[u8; walnut_common::BLCKSZ]>)],
) -> Result<()> {
    let mut sorted: Vec<&(u64, Box<[u8; walnut_common::BLCKSZ]>)> = pages.iter().collect();
    sorted.sort_by_key(|(n, _)| *n);
    let dir = datadir.join("pg_xact");
    if !sorted.is_empty() && !vfs.exists(&dir) {
        // initdb made it, but an empty directory may not have survived a crash or a copy.
        vfs.create_dir_all(&dir)
            .map_err(|e| Error::io(format!("could not create \"{}\"", dir.display()), e))?;
        if let Err(e) = vfs.sync_dir(datadir) {
            panic_fatal(&format!(
                "could not fsync directory \"{}\": {e}",
                datadir.display()
            ));
        }
    }
    let mut created = false;
    let mut i = 0;
    while i < sorted.len() {
        let path = xact_segment_path(datadir, sorted[i].0);
        created |= !vfs.exists(&path);
        let ctx = |what: &str| format!("could not {what} \"{}\"", path.display());
        let f = vfs
            .open(
                &path,
                OpenMode {
                    create: true,
                    ..Default::default()
                },
            )
            .map_err(|e| Error::io(ctx("open"), e))?;
        while let Some((pageno, page)) = sorted.get(i).copied() {
            if xact_segment_path(datadir, *pageno) != path {
                break;
            }
            let off = (pageno % XACT_PAGES_PER_SEGMENT) * walnut_common::BLCKSZ as u64;
            f.write_at(&page[..], off)
                .map_err(|e| Error::io(ctx("write"), e))?;
            i += 1;
        }
        if let Err(e) = f.sync_all() {
            panic_fatal(&format!("{}: {e}", ctx("fsync")));
        }
    }
    if created {
        if let Err(e) = vfs.sync_dir(&dir) {
            panic_fatal(&format!(
                "could not fsync directory \"{}\": {e}",
                dir.display()
            ));
        }
    }
    Ok(())
}

/// The status store as read at start-up: a byte per xid from xid `base`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct XactStatus {
    /// The first xid of `status` (the start of the segment holding the oldest xid).
    pub base: u64,
    /// [`crate::xact::CLOG_UNKNOWN`], [`crate::xact::CLOG_ABORTED`] or
    /// [`crate::xact::CLOG_COMMITTED`], one per xid.
    pub status: Vec<u8>,
}

impl XactStatus {
    /// The status of `xid`: unknown if the store does not reach it.
    pub fn get(&self, xid: Xid) -> u8 {
        xid.0
            .checked_sub(self.base)
            .and_then(|i| self.status.get(i as usize).copied())
            .unwrap_or(crate::xact::CLOG_UNKNOWN)
    }
}

/// Xids per segment file of the status store.
const XACTS_PER_SEGMENT: u64 = XACTS_PER_PAGE * XACT_PAGES_PER_SEGMENT;

/// The segment numbers in `pg_xact`, ascending (none if the directory is missing).
///
/// # Errors
/// I/O errors; corruption for a file that is not a segment.
fn xact_segments(vfs: &dyn Vfs, datadir: &Path) -> Result<Vec<u64>> {
    let dir = datadir.join("pg_xact");
    if !vfs.exists(&dir) {
        return Ok(Vec::new());
    }
    let mut segments = Vec::new();
    for name in vfs
        .list_dir(&dir)
        .map_err(|e| Error::io(format!("could not list \"{}\"", dir.display()), e))?
    {
        if name.ends_with(".tmp") {
            continue;
        }
        match u64::from_str_radix(&name, 16) {
            Ok(n)
                if name.len() >= 4
                    && name
                        .chars()
                        .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_lowercase()) =>
            {
                segments.push(n)
            }
            _ => {
                return Err(Error::corruption(format!(
                    "\"{}\" is not a transaction status segment",
                    dir.join(&name).display()
                )))
            }
        }
    }
    segments.sort_unstable();
    Ok(segments)
}

/// Reads the status store from the segment holding `oldest` (the control file's oldest xid)
/// to the end of the last segment; segments wholly below `oldest` (a crash came before the
/// checkpoint removed them) are skipped. A page past a segment's end, and a missing segment,
/// read as all unknown.
///
/// # Errors
/// I/O errors; corruption for a file in `pg_xact` that is not a segment, or an xid with the
/// bits `11` (which walnut never writes).
pub fn read_xact_status(vfs: &dyn Vfs, datadir: &Path, oldest: Xid) -> Result<XactStatus> {
    let per_segment = XACTS_PER_SEGMENT;
    let first = oldest.0 / per_segment;
    let segments: Vec<u64> = xact_segments(vfs, datadir)?
        .into_iter()
        .filter(|&s| s >= first)
        .collect();
    let Some(&last) = segments.last() else {
        return Ok(XactStatus::default());
    };
    let base = first * per_segment;
    let mut out = vec![crate::xact::CLOG_UNKNOWN; ((last + 1 - first) * per_segment) as usize];
    for seg in segments {
        let path = xact_segment_path(datadir, seg * XACT_PAGES_PER_SEGMENT);
        let b = read_all(vfs, &path)?.unwrap_or_default();
        for (byte_no, &byte) in b.iter().enumerate().take((per_segment / 4) as usize) {
            for k in 0..4u64 {
                let xid = seg * per_segment + byte_no as u64 * 4 + k;
                out[(xid - base) as usize] = match (byte >> (2 * k)) & 0b11 {
                    0 => crate::xact::CLOG_UNKNOWN,
                    XACT_BITS_COMMITTED => crate::xact::CLOG_COMMITTED,
                    XACT_BITS_ABORTED => crate::xact::CLOG_ABORTED,
                    _ => {
                        return Err(Error::corruption(format!(
                            "transaction {xid} has an invalid status in \"{}\"",
                            path.display()
                        )))
                    }
                };
            }
        }
    }
    Ok(XactStatus { base, status: out })
}

/// Removes the segments of the status store wholly below `oldest` (PostgreSQL's
/// `TruncateCLOG`), after the control file naming `oldest` is durable; then fsyncs
/// `pg_xact`. Returns how many it removed.
///
/// # Errors
/// I/O errors listing or removing (what is left is removed by a later call); corruption for a
/// file that is not a segment. A failed fsync is a PANIC.
pub fn remove_xact_segments_before(vfs: &dyn Vfs, datadir: &Path, oldest: Xid) -> Result<usize> {
    let mut removed = 0;
    for seg in xact_segments(vfs, datadir)? {
        if (seg + 1) * XACTS_PER_SEGMENT > oldest.0 {
            break;
        }
        let path = xact_segment_path(datadir, seg * XACT_PAGES_PER_SEGMENT);
        vfs.remove(&path)
            .map_err(|e| Error::io(format!("could not remove \"{}\"", path.display()), e))?;
        removed += 1;
    }
    if removed > 0 {
        let dir = datadir.join("pg_xact");
        if let Err(e) = vfs.sync_dir(&dir) {
            panic_fatal(&format!(
                "could not fsync directory \"{}\": {e}",
                dir.display()
            ));
        }
    }
    Ok(removed)
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
            oldest_xid: Xid(5),
        };
        let mut b = c.encode();
        assert_eq!(b.len(), CONTROL_LEN);
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
            oldest_xid: Xid(3),
        };
        assert_eq!(ControlFile::decode(&c.encode()).unwrap(), c);
        // Every earlier format, whose heap tuples this version would misread (format 6: a
        // 32-byte header), is refused by name.
        for old in 2u32..FORMAT_VERSION {
            let mut b = c.encode();
            b[4..8].copy_from_slice(&old.to_le_bytes());
            let crc = walnut_common::crc32c(&b[..60]);
            b[60..64].copy_from_slice(&crc.to_le_bytes());
            let err = ControlFile::decode(&b).unwrap_err().to_string();
            assert!(
                err.contains("incompatible")
                    && err.contains(&format!("version {old}"))
                    && err.contains("initdb"),
                "{err}"
            );
        }
        let mut b = c.encode();
        b[4..8].copy_from_slice(&2u32.to_le_bytes());
        // A version-2 file is 48 bytes: still refused by version, not by size.
        let err = ControlFile::decode(&b[..48]).unwrap_err().to_string();
        assert!(err.contains("version 2"), "{err}");
    }

    #[test]
    fn status_pages_are_written_in_place_and_read_back_across_segments() {
        use crate::xact::{CLOG_ABORTED, CLOG_COMMITTED, CLOG_UNKNOWN};
        let tmp = tempfile::tempdir().unwrap();
        let vfs = walnut_io::RealVfs;
        vfs.create_dir_all(&tmp.path().join("pg_xact")).unwrap();
        let outcome = |x: Xid| match x.0 % 7 {
            0 => CLOG_COMMITTED,
            3 => CLOG_ABORTED,
            _ => CLOG_UNKNOWN,
        };
        // Page 0 and page 33 (the second segment's second page).
        let far = XACT_PAGES_PER_SEGMENT + 1;
        let pages = vec![
            (far, encode_xact_page(far, outcome)),
            (0, encode_xact_page(0, outcome)),
        ];
        write_xact_pages(&vfs, tmp.path(), &pages).unwrap();
        assert!(vfs.exists(&tmp.path().join("pg_xact/0000")));
        assert!(vfs.exists(&tmp.path().join("pg_xact/0001")));
        let read = read_xact_status(&vfs, tmp.path(), Xid::FIRST_NORMAL).unwrap();
        assert_eq!(read.base, 0);
        let read = read.status;
        assert_eq!(
            read.len() as u64,
            2 * XACT_PAGES_PER_SEGMENT * XACTS_PER_PAGE
        );
        for (x, &s) in read.iter().enumerate() {
            let page = x as u64 / XACTS_PER_PAGE;
            let want = if page == 0 || page == far {
                outcome(Xid(x as u64))
            } else {
                CLOG_UNKNOWN
            };
            assert_eq!(s, want, "xid {x}");
        }
        // PostgreSQL's layout: xid 7 (committed) is byte 1, bits 6-7 of page 0.
        assert_eq!(pages[1].1[1] >> 6, 0b01);
        // A later write of page 0 changes only that page's bytes.
        let all_committed = encode_xact_page(0, |_| CLOG_COMMITTED);
        write_xact_pages(&vfs, tmp.path(), &[(0, all_committed)]).unwrap();
        let again = read_xact_status(&vfs, tmp.path(), Xid::FIRST_NORMAL)
            .unwrap()
            .status;
        assert!(again[..XACTS_PER_PAGE as usize]
            .iter()
            .all(|&s| s == CLOG_COMMITTED));
        assert_eq!(
            again[XACTS_PER_PAGE as usize..],
            read[XACTS_PER_PAGE as usize..]
        );
        // Bits 11 and a stray file are corruption.
        let seg = tmp.path().join("pg_xact/0000");
        let f = vfs.open(&seg, walnut_io::OpenMode::default()).unwrap();
        f.write_at(&[0b11], 5).unwrap();
        drop(f);
        assert_eq!(
            read_xact_status(&vfs, tmp.path(), Xid::FIRST_NORMAL)
                .unwrap_err()
                .sqlstate
                .0,
            "XX001"
        );
        // Read from the segment of a later oldest xid, segment 0 is not read at all.
        let per_segment = XACT_PAGES_PER_SEGMENT * XACTS_PER_PAGE;
        let later = read_xact_status(&vfs, tmp.path(), Xid(per_segment + 9)).unwrap();
        assert_eq!(later.base, per_segment);
        assert_eq!(later.status[..], read[per_segment as usize..]);
        assert_eq!(later.get(Xid(per_segment - 1)), CLOG_UNKNOWN);
        // Removal takes the segments wholly below the oldest xid, and only those.
        assert_eq!(
            remove_xact_segments_before(&vfs, tmp.path(), Xid(per_segment - 1)).unwrap(),
            0
        );
        assert_eq!(
            remove_xact_segments_before(&vfs, tmp.path(), Xid(per_segment + 9)).unwrap(),
            1
        );
        assert!(!vfs.exists(&seg) && vfs.exists(&tmp.path().join("pg_xact/0001")));
        std::fs::copy(tmp.path().join("pg_xact/0001"), &seg).unwrap();
        let f = vfs.open(&seg, walnut_io::OpenMode::default()).unwrap();
        f.write_at(&[0], 5).unwrap();
        drop(f);
        std::fs::write(tmp.path().join("pg_xact/status"), b"old").unwrap();
        assert_eq!(
            read_xact_status(&vfs, tmp.path(), Xid::FIRST_NORMAL)
                .unwrap_err()
                .sqlstate
                .0,
            "XX001"
        );
    }
}
