//! Segment files: naming (PostgreSQL's `XLogFileName`), zero-filled preallocation
//! (`XLogFileInitInternal`), and the open-time scrub of stale records past the end of WAL.
//! All file access goes through the [`Vfs`].

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use walnut_io::{AlignedBuf, FileIo, OpenMode, Vfs};

/// Size of one WAL segment file, bytes (16 MiB, PostgreSQL's default `wal_segment_size`).
pub const WAL_SEGMENT_SIZE: u64 = 16 * 1024 * 1024;
/// The first timeline (initdb's); a promotion starts the next one.
pub const FIRST_TIMELINE: u32 = 1;
/// Segments per "xlogid" (the middle 8 hex digits): 2^32 / 16 MiB.
const SEGMENTS_PER_XLOGID: u64 = 0x1_0000_0000 / WAL_SEGMENT_SIZE;
/// Write size used for zero-filling, bytes.
const ZERO_CHUNK: usize = 1024 * 1024;
const TEMP_PREFIX: &str = "xlogtemp.";

const _: () = assert!(WAL_SEGMENT_SIZE.is_power_of_two());
const _: () = assert!(WAL_SEGMENT_SIZE % ZERO_CHUNK as u64 == 0);
const _: () = assert!(SEGMENTS_PER_XLOGID == 256);

/// Number of the segment that holds byte `lsn`.
pub fn segment_of(lsn: u64) -> u64 {
    lsn / WAL_SEGMENT_SIZE
}

/// File name of segment `segno` written on timeline `tli`: 24 hex digits
/// `{tli:08X}{log:08X}{seg:08X}`, where `log = segno / 256` and `seg = segno % 256`
/// (PostgreSQL's `XLogFileName` for 16 MiB segments).
pub fn segment_file_name(tli: u32, segno: u64) -> String {
    format!(
        "{tli:08X}{:08X}{:08X}",
        segno / SEGMENTS_PER_XLOGID,
        segno % SEGMENTS_PER_XLOGID
    )
}

/// Segment `segno` in messages where its timeline is not known: "WAL segment at X/X", the
/// LSN of its first byte.
pub fn segment_label(segno: u64) -> String {
    format!(
        "WAL segment at {}",
        walnut_common::Lsn(segno.saturating_mul(WAL_SEGMENT_SIZE))
    )
}

/// Inverse of [`segment_file_name`]: `(tli, segno)`; `None` for any other name (timeline 0
/// included, which PostgreSQL never assigns).
pub fn parse_segment_file_name(name: &str) -> Option<(u32, u64)> {
    if name.len() != 24
        || !name
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'A'..=b'F').contains(&b))
    {
        return None;
    }
    let tli = u32::from_str_radix(&name[0..8], 16).ok()?;
    let log = u64::from_str_radix(&name[8..16], 16).ok()?;
    let seg = u64::from_str_radix(&name[16..24], 16).ok()?;
    (tli > 0 && seg < SEGMENTS_PER_XLOGID).then_some((tli, log * SEGMENTS_PER_XLOGID + seg))
}

/// Every segment file in `dir` as `(segno, tli)`, sorted, duplicates of a segment number
/// included.
pub(crate) fn list_segment_files(vfs: &dyn Vfs, dir: &Path) -> io::Result<Vec<(u64, u32)>> {
    let mut v: Vec<(u64, u32)> = vfs
        .list_dir(dir)?
        .iter()
        .filter_map(|n| parse_segment_file_name(n))
        .map(|(tli, segno)| (segno, tli))
        .collect();
    v.sort_unstable();
    Ok(v)
}

/// The segment files in `dir` as `(segno, tli)`, sorted by segment number, one per segment:
/// walnut keeps a single file per segment (a promotion renames rather than copies, see
/// [`adopt_timeline`]); if a copied-in file left two, the higher timeline's wins.
pub fn list_segments(vfs: &dyn Vfs, dir: &Path) -> io::Result<Vec<(u64, u32)>> {
    let mut v = list_segment_files(vfs, dir)?;
    v.dedup_by(|later, earlier| {
        // Sorted by (segno, tli): keep the last of each segment, the highest timeline.
        if later.0 == earlier.0 {
            *earlier = *later;
            true
        } else {
            false
        }
    });
    Ok(v)
}

/// The path of segment `segno`'s file in `dir`, whatever timeline named it; `None` if there
/// is none. It looks for timeline `hint`'s name first (the caller's timeline: the one nearly
/// every segment it opens has), then lists the directory and takes the highest timeline's.
///
/// # Errors
/// I/O errors checking for the file or listing the directory.
pub fn find_segment(
    vfs: &dyn Vfs,
    dir: &Path,
    segno: u64,
    hint: u32,
) -> io::Result<Option<PathBuf>> {
    let hinted = dir.join(segment_file_name(hint, segno));
    if vfs.exists(&hinted) {
        return Ok(Some(hinted));
    }
    Ok(list_segments(vfs, dir)?
        .into_iter()
        .find(|&(s, _)| s == segno)
        .map(|(s, tli)| dir.join(segment_file_name(tli, s))))
}

/// Renames every segment numbered `from_segno` or later whose name carries a timeline below
/// `tli` to `tli`'s name, then syncs the directory; returns how many it renamed. A server
/// that starts writing on `tli` (after a promotion, or a standby following its primary onto
/// `tli`) calls it before its first write there, so that the segment holding the switch point
/// and the preallocated or recycled ones after it carry the new timeline, as PostgreSQL's do
/// (`XLogInitNewTimeline` copies the switch segment instead; walnut keeps one file per
/// segment). An older timeline's file of a segment that `tli` (or a later timeline) already
/// has is a stale copy, and is removed. Each rename is atomic: a crash between them leaves
/// segments of both names, which [`list_segments`] and [`find_segment`] read by number, and
/// the next call finishes the job.
///
/// # Panics
/// PANICs if the directory's fsync fails.
pub(crate) fn adopt_timeline(
    vfs: &dyn Vfs,
    dir: &Path,
    tli: u32,
    from_segno: u64,
) -> io::Result<usize> {
    let files = list_segment_files(vfs, dir)?;
    let mut renamed = 0;
    for (i, &(segno, old)) in files.iter().enumerate() {
        if segno < from_segno || old >= tli {
            continue;
        }
        let from = segment_file_name(old, segno);
        // Sorted by (segno, tli): a file of this segment at `tli` or later comes next.
        if files[i + 1..].iter().any(|&(s, t)| s == segno && t >= tli) {
            vfs.remove(&dir.join(&from))?;
            tracing::debug!(segment = %from, "stale WAL segment of an older timeline removed");
        } else {
            let to = segment_file_name(tli, segno);
            vfs.rename(&dir.join(&from), &dir.join(&to))?;
            tracing::debug!(from = %from, to = %to, "WAL segment renamed for the new timeline");
        }
        renamed += 1;
    }
    if renamed > 0 {
        if let Err(e) = vfs.sync_dir(dir) {
            walnut_common::panic_fatal(&format!(
                "could not fsync directory \"{}\": {e}",
                dir.display()
            ));
        }
    }
    Ok(renamed)
}

/// Removes temporary files left by a crash in the middle of [`preallocate`].
pub(crate) fn remove_temp_files(vfs: &dyn Vfs, dir: &Path) -> io::Result<()> {
    for name in vfs.list_dir(dir)? {
        if name.starts_with(TEMP_PREFIX) {
            vfs.remove(&dir.join(&name))?;
        }
    }
    Ok(())
}

/// Writes zeros over `[from, to)` of `file` in 1 MiB writes (not synced). The buffer is
/// 4096-aligned, so the same code serves files opened with O_DIRECT when `from` and `to` are
/// multiples of 4096.
fn write_zeros(file: &dyn FileIo, from: u64, to: u64) -> io::Result<()> {
    let zeros = AlignedBuf::zeroed(ZERO_CHUNK);
    let mut off = from;
    while off < to {
        let n = (to - off).min(ZERO_CHUNK as u64) as usize;
        file.write_at(&zeros.as_slice()[..n], off)?;
        off += n as u64;
    }
    Ok(())
}

/// How new segments are initialized (`wal_init_zero`, `io_direct = wal_init`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct InitOpts {
    /// Fill the file with zeros (otherwise only `set_len`, leaving it sparse).
    pub zero: bool,
    /// Write the zeros with O_DIRECT.
    pub direct: bool,
}

impl Default for InitOpts {
    fn default() -> Self {
        InitOpts {
            zero: true,
            direct: false,
        }
    }
}

/// Creates segment `segno`, named for timeline `tli`, durably, unless a file of that segment
/// exists already (of any timeline; then it does nothing): writes 16 MiB of zeros to a
/// temporary file (or, without `opts.zero`, only sets its size), fsyncs it, renames it into
/// place and fsyncs the directory.
/// After a crash the segment either does not exist or is complete; a leftover temporary file is
/// removed at the next open. With zeros written, every block of the file is allocated and its
/// size is final, so later WAL writes into it need only `fdatasync`, which then does not have to
/// commit file metadata. Source: xlog.c `XLogFileInitInternal`.
///
/// # Errors
/// I/O errors up to and including the rename. A failed fsync of the temporary file is an error,
/// not a PANIC, as in `XLogFileInitInternal`: that file is never used, and the next attempt
/// starts a new one.
///
/// # Panics
/// PANICs if the directory's fsync after the rename fails.
pub(crate) fn preallocate(
    vfs: &dyn Vfs,
    dir: &Path,
    tli: u32,
    segno: u64,
    opts: InitOpts,
) -> io::Result<()> {
    // Never over an existing file of this segment (of any timeline): the rename below would
    // replace a segment in use. Creators hold the WAL's segment lock, so none races this check.
    if find_segment(vfs, dir, segno, tli)?.is_some() {
        return Ok(());
    }
    let tmp = dir.join(format!("{TEMP_PREFIX}{segno}"));
    let file = vfs.open(
        &tmp,
        OpenMode {
            create: true,
            direct: opts.direct && opts.zero,
            ..Default::default()
        },
    )?;
    file.set_len(0)?;
    if opts.zero {
        write_zeros(file.as_ref(), 0, WAL_SEGMENT_SIZE)?;
    } else {
        file.set_len(WAL_SEGMENT_SIZE)?;
    }
    file.sync_all()?;
    drop(file);
    vfs.rename(&tmp, &dir.join(segment_file_name(tli, segno)))?;
    if let Err(e) = vfs.sync_dir(dir) {
        // The segment is in place and will be written and flushed, but its directory entry may
        // not survive a power loss: never retried.
        walnut_common::panic_fatal(&format!(
            "could not fsync directory \"{}\": {e}",
            dir.display()
        ));
    }
    tracing::debug!(segment = %segment_file_name(tli, segno), "preallocated WAL segment");
    Ok(())
}

/// Opens an existing segment; `Ok(None)` if it does not exist.
pub(crate) fn open_existing(
    vfs: &dyn Vfs,
    dir: &Path,
    segno: u64,
    hint: u32,
) -> io::Result<Option<Arc<dyn FileIo>>> {
    open_existing_with(vfs, dir, segno, hint, OpenMode::default())
}

/// Opens an existing segment with `mode` (sync and direct flags for writing), whatever its
/// timeline ([`find_segment`] with `hint`); `Ok(None)` if it does not exist.
pub(crate) fn open_existing_with(
    vfs: &dyn Vfs,
    dir: &Path,
    segno: u64,
    hint: u32,
    mode: OpenMode,
) -> io::Result<Option<Arc<dyn FileIo>>> {
    let Some(path) = find_segment(vfs, dir, segno, hint)? else {
        return Ok(None);
    };
    match vfs.open(&path, mode) {
        Ok(f) => Ok(Some(f)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// True if any 8-aligned word of `file` at segment offsets `[from, WAL_SEGMENT_SIZE)` looks like
/// the LSN field of a record header written at its own position, at a stream position `>= end`:
/// a record a crashed run wrote past the end of valid WAL, which would validate again once new
/// records happen to end exactly where it starts. Records in recycled segments carry LSNs of
/// their old position and never match.
pub(crate) fn has_stale_records(
    file: &dyn FileIo,
    segno: u64,
    from: u64,
    end: u64,
) -> io::Result<bool> {
    let base = segno * WAL_SEGMENT_SIZE;
    let mut buf = vec![0u8; ZERO_CHUNK];
    let mut off = from & !7;
    while off < WAL_SEGMENT_SIZE {
        let n = (WAL_SEGMENT_SIZE - off).min(ZERO_CHUNK as u64) as usize;
        let got = file.read_at(&mut buf[..n], off)?;
        if got == 0 {
            break;
        }
        for (i, w) in buf[..got - got % 8].chunks_exact(8).enumerate() {
            let word_pos = base + off + 8 * i as u64;
            let v = u64::from_le_bytes(w.try_into().expect("8 bytes"));
            // The LSN field sits 8 bytes into the header.
            if word_pos >= 8 && v == word_pos - 8 && v >= end {
                return Ok(true);
            }
        }
        off += got as u64 - got as u64 % 8;
        if got % 8 != 0 {
            break;
        }
    }
    Ok(false)
}

/// Zero-fills `[from, WAL_SEGMENT_SIZE)` of `file` and syncs it.
///
/// # Errors
/// I/O errors of the writes.
///
/// # Panics
/// PANICs if the sync fails: never retried (the kernel may have marked the zeros clean while
/// the stale records stay on disk).
pub(crate) fn zero_tail(file: &dyn FileIo, from: u64) -> io::Result<()> {
    write_zeros(file, from, WAL_SEGMENT_SIZE)?;
    if let Err(e) = file.sync_data() {
        walnut_common::panic_fatal(&format!(
            "could not fsync a WAL segment after zeroing stale records: {e}"
        ));
    }
    Ok(())
}
