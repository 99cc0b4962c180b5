//! Sequential WAL reader used by redo (PostgreSQL's `xlogreader.c`, `XLogReadRecord`).
//!
//! End-of-WAL decision table. When the record at the read position is not valid, the reader
//! decides between "end of WAL" (a torn or unwritten tail: nothing there was ever durable, so
//! nothing there was acknowledged) and "corruption" (bytes that were durable are now wrong) by
//! looking for a *flush mark* after it (see DESIGN.md, "Flush marks"): a later valid mark whose
//! attested durable position lies beyond the bad record proves that the bad record had been
//! made durable before.
//!
//! | at the read position                         | no later mark attests it  | a later mark attests it |
//! |----------------------------------------------|---------------------------|-------------------------|
//! | segment file missing                         | end of WAL (`Ok(None)`)   | `Err` (corruption)      |
//! | file shorter than the header or the record   | end of WAL (torn/short)   | `Err` (corruption)      |
//! | `total_len == 0`                             | end of WAL (zeroed tail)  | `Err` (corruption)      |
//! | `total_len < 32` or `> 1 GiB`                | end of WAL (garbage)      | `Err` (corruption)      |
//! | header LSN differs from the position         | end of WAL (stale tail)   | `Err` (corruption)      |
//! | CRC mismatch or malformed lengths            | end of WAL (torn write)   | `Err` (corruption)      |
//! | read(2) fails                                | `Err` (I/O error)         | `Err` (I/O error)       |
//!
//! The search covers [`ATTEST_SCAN_BYTES`] after the bad record: the flush after the one that
//! wrote a durable record inserts its mark at most about two WAL-buffer lengths (2 x 16 MiB)
//! later.

use crate::record::{
    check_header, decode_record, decode_record_with, MAX_RECORD_LEN, RECORD_ALIGN,
    RECORD_HEADER_LEN,
};
use crate::segment::{
    find_segment, open_existing, parse_segment_file_name, segment_label, segment_of,
    FIRST_TIMELINE, WAL_SEGMENT_SIZE,
};
use crate::DecodedRecord;
use std::cell::Cell;
use std::io;
use std::path::PathBuf;
use std::sync::Arc;
use walnut_common::{Error, Lsn, Result};
use walnut_io::{FileIo, OpenMode, Vfs};

/// Bytes read from a segment at a time.
const READ_CHUNK: u64 = 1024 * 1024;

/// How far past an invalid record the reader looks for a flush mark that attests it, bytes.
pub const ATTEST_SCAN_BYTES: u64 = 3 * WAL_SEGMENT_SIZE;

pub(crate) struct ReaderState {
    vfs: Arc<dyn Vfs>,
    dir: PathBuf,
    /// Position of the next record.
    pos: u64,
    /// The open segment, if any.
    file: Option<(u64, Arc<dyn FileIo>)>,
    /// Cached bytes `[buf_start, buf_start + buf.len())` of the stream.
    buf: Vec<u8>,
    buf_start: u64,
    /// Scratch for records that do not fit in the cache.
    scratch: Vec<u8>,
    /// Streaming mode (a standby's replay): no byte at or past this position is read, and an
    /// invalid record is "not there yet" rather than the end of WAL; `u64::MAX` otherwise.
    limit: u64,
    /// The timeline of the last segment file opened: the next is looked for under its name
    /// first ([`find_segment`]).
    tli_hint: Cell<u32>,
    /// Decode with `keep_lz4` (`WalReader::defer_image_decompression`).
    pub(crate) defer_images: bool,
}

impl ReaderState {
    /// Opens segment `segno`, whatever timeline named it; `Ok(None)` if it does not exist.
    fn open_segment(&self, segno: u64) -> io::Result<Option<Arc<dyn FileIo>>> {
        let Some(path) = find_segment(self.vfs.as_ref(), &self.dir, segno, self.tli_hint.get())?
        else {
            return Ok(None);
        };
        if let Some((tli, _)) = path
            .file_name()
            .and_then(|n| parse_segment_file_name(&n.to_string_lossy()))
        {
            self.tli_hint.set(tli);
        }
        match self.vfs.open(&path, OpenMode::default()) {
            Ok(f) => Ok(Some(f)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    pub(crate) fn open(vfs: Arc<dyn Vfs>, dir: PathBuf, start: Lsn) -> Result<ReaderState> {
        let segno = segment_of(start.0);
        let file = open_existing(vfs.as_ref(), &dir, segno, FIRST_TIMELINE)
            .map_err(|e| Error::io(format!("could not open {}", segment_label(segno)), e))?
            .ok_or_else(|| {
                Error::corruption(format!(
                    "the WAL segment holding start position {start} does not exist"
                ))
            })?;
        Ok(ReaderState {
            vfs,
            dir,
            pos: start.0,
            file: Some((segno, file)),
            buf: Vec::new(),
            buf_start: 0,
            scratch: Vec::new(),
            limit: u64::MAX,
            tli_hint: Cell::new(FIRST_TIMELINE),
            defer_images: false,
        })
    }

    /// Enters streaming mode with `limit` (see the field).
    pub(crate) fn set_limit(&mut self, limit: u64) {
        self.limit = limit;
    }

    /// Forgets cached bytes (they may have been read before a receiver rewrote them).
    pub(crate) fn forget_cache(&mut self) {
        self.buf.clear();
        self.buf_start = 0;
    }

    pub(crate) fn end_lsn(&self) -> Lsn {
        Lsn(self.pos)
    }

    /// Ensures the cache holds at least the bytes of `[pos, pos + len)` that exist, filling from
    /// the segment holding `pos` (one segment at most). Returns false if the segment is missing.
    fn fill(&mut self, pos: u64) -> Result<bool> {
        let segno = segment_of(pos);
        if self.file.as_ref().map(|(s, _)| *s) != Some(segno) {
            self.file = None;
            match self.open_segment(segno) {
                Ok(Some(f)) => self.file = Some((segno, f)),
                Ok(None) => return Ok(false),
                Err(e) => {
                    return Err(Error::io(
                        format!("could not open {}", segment_label(segno)),
                        e,
                    ))
                }
            }
        }
        let (_, file) = self.file.as_ref().expect("segment opened above");
        let off = pos % WAL_SEGMENT_SIZE;
        let n = (WAL_SEGMENT_SIZE - off)
            .min(READ_CHUNK)
            .min(self.limit.saturating_sub(pos)) as usize;
        self.buf.resize(n, 0);
        let mut got = 0;
        while got < n {
            match file.read_at(&mut self.buf[got..], off + got as u64) {
                Ok(0) => break,
                Ok(k) => got += k,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    return Err(Error::io(
                        format!("could not read {}", segment_label(segno)),
                        e,
                    ))
                }
            }
        }
        self.buf.truncate(got);
        self.buf_start = pos;
        Ok(true)
    }

    /// Copies stream bytes `[pos, pos + len)` into `out`; false if they do not all exist.
    fn read_into(&mut self, mut pos: u64, len: usize, out: &mut Vec<u8>) -> Result<bool> {
        out.clear();
        while out.len() < len {
            let cached_end = self.buf_start + self.buf.len() as u64;
            if pos < self.buf_start || pos >= cached_end {
                if !self.fill(pos)? {
                    return Ok(false);
                }
                if self.buf.is_empty() {
                    return Ok(false);
                }
                continue;
            }
            let from = (pos - self.buf_start) as usize;
            let n = (len - out.len()).min(self.buf.len() - from);
            out.extend_from_slice(&self.buf[from..from + n]);
            pos += n as u64;
        }
        Ok(true)
    }

    /// The next valid record, skipping flush marks (the WAL's own bookkeeping).
    pub(crate) fn next_record(&mut self) -> Result<Option<DecodedRecord>> {
        loop {
            let pos = self.pos;
            let mut scratch = std::mem::take(&mut self.scratch);
            let result = self.read_record(pos, &mut scratch);
            if scratch.capacity() <= 4 * READ_CHUNK as usize {
                self.scratch = scratch;
            }
            let Some(r) = result? else {
                return Ok(None);
            };
            self.pos = r.end_lsn.0;
            if r.record.rmgr == crate::RM_WAL && r.record.info == crate::WAL_FLUSH_MARK {
                continue;
            }
            return Ok(Some(r));
        }
    }

    fn read_record(&mut self, pos: u64, scratch: &mut Vec<u8>) -> Result<Option<DecodedRecord>> {
        if !self.read_into(pos, RECORD_HEADER_LEN, scratch)? {
            return self.end_of_wal(pos, "no record header (missing or short segment)");
        }
        let total_len = match check_header(pos, scratch) {
            Ok(n) => n,
            Err(e) => return self.end_of_wal(pos, &e.message),
        };
        if !self.read_into(pos, total_len, scratch)? {
            return self.end_of_wal(pos, "record truncated");
        }
        match decode_record_with(Lsn(pos), scratch, self.defer_images) {
            Ok(r) => Ok(Some(r)),
            Err(e) => self.end_of_wal(pos, &e.message),
        }
    }

    /// The record at `pos` is not valid (`why`): the end of WAL, unless a later flush mark
    /// attests that `pos` had been durable, which makes it corruption.
    fn end_of_wal(&mut self, pos: u64, why: &str) -> Result<Option<DecodedRecord>> {
        // The bytes read may change (a receiver writes them): read them again next time.
        self.forget_cache();
        if self.limit != u64::MAX {
            // Streaming: what lies below the limit came from the primary whole; a record
            // that does not read whole yet is still arriving.
            tracing::trace!(lsn = %Lsn(pos), "streamed WAL ends: {why}");
            return Ok(None);
        }
        if let Some((mark, durable)) = self.attested_beyond(pos)? {
            return Err(Error::corruption(format!(
                "WAL is corrupt at {}: {why}; the flush mark at {} attests that WAL up to {} had been made durable, so committed work follows",
                Lsn(pos),
                Lsn(mark),
                Lsn(durable)
            ))
            .with_detail(
                "Start-up stops rather than end recovery here and silently drop that work. Restore the WAL from a backup or a replica.",
            ));
        }
        tracing::debug!(lsn = %Lsn(pos), "end of WAL: {why}");
        Ok(None)
    }

    /// Looks through [`ATTEST_SCAN_BYTES`] after `bad` for a valid flush mark attesting a
    /// durable position beyond `bad`; returns (mark LSN, attested position). Segments that do
    /// not exist are skipped; valid records are stepped over whole.
    fn attested_beyond(&mut self, bad: u64) -> Result<Option<(u64, u64)>> {
        let limit = bad.saturating_add(ATTEST_SCAN_BYTES);
        let mut q = (bad + RECORD_ALIGN).next_multiple_of(RECORD_ALIGN);
        let mut chunk = Vec::new();
        let mut span = Vec::new();
        while q < limit {
            let segno = segment_of(q);
            let Some(file) = self
                .open_segment(segno)
                .map_err(|e| Error::io(format!("could not open {}", segment_label(segno)), e))?
            else {
                q = (segno + 1) * WAL_SEGMENT_SIZE;
                continue;
            };
            let off = q % WAL_SEGMENT_SIZE;
            let want = (WAL_SEGMENT_SIZE - off).min(READ_CHUNK) as usize;
            chunk.resize(want, 0);
            let got = read_full(file.as_ref(), &mut chunk, off)
                .map_err(|e| Error::io(format!("could not read {}", segment_label(segno)), e))?;
            if got == 0 {
                q = (segno + 1) * WAL_SEGMENT_SIZE;
                continue;
            }
            let mut i = 0usize;
            let mut resume = None;
            while i + RECORD_HEADER_LEN <= got {
                let at = q + i as u64;
                let len = u32::from_le_bytes(chunk[i..i + 4].try_into().expect("4")) as usize;
                let lsn = u64::from_le_bytes(chunk[i + 8..i + 16].try_into().expect("8"));
                if lsn != at || !(RECORD_HEADER_LEN..=MAX_RECORD_LEN).contains(&len) {
                    i += RECORD_ALIGN as usize;
                    continue;
                }
                let bytes: &[u8] = if i + len <= got {
                    &chunk[i..i + len]
                } else if self.read_span(at, len, &mut span)? {
                    &span
                } else {
                    i += RECORD_ALIGN as usize;
                    continue;
                };
                let Ok(r) = decode_record(Lsn(at), bytes) else {
                    i += RECORD_ALIGN as usize;
                    continue;
                };
                let rec = &r.record;
                if rec.rmgr == crate::RM_WAL && rec.info == crate::WAL_FLUSH_MARK {
                    if let Some(d) = rec.main_data.get(..8) {
                        let durable = u64::from_le_bytes(d.try_into().expect("8"));
                        if durable > bad {
                            return Ok(Some((at, durable)));
                        }
                    }
                }
                let end = r.end_lsn.0;
                if end >= q + got as u64 {
                    resume = Some(end);
                    break;
                }
                i = (end - q) as usize;
            }
            q = match resume {
                Some(end) => end,
                // The rest of this segment does not exist.
                None if got < want => (segno + 1) * WAL_SEGMENT_SIZE,
                // Go on where the next header could start (at least one step).
                None => q + (i as u64).max(RECORD_ALIGN),
            };
        }
        Ok(None)
    }

    /// Reads `len` stream bytes at `pos` (possibly across segments) into `out`, bypassing the
    /// cache; false if they do not all exist.
    fn read_span(&mut self, pos: u64, len: usize, out: &mut Vec<u8>) -> Result<bool> {
        out.clear();
        out.resize(len, 0);
        let mut done = 0usize;
        while done < len {
            let p = pos + done as u64;
            let segno = segment_of(p);
            let Some(file) = self
                .open_segment(segno)
                .map_err(|e| Error::io(format!("could not open {}", segment_label(segno)), e))?
            else {
                return Ok(false);
            };
            let off = p % WAL_SEGMENT_SIZE;
            let n = ((WAL_SEGMENT_SIZE - off) as usize).min(len - done);
            let got = read_full(file.as_ref(), &mut out[done..done + n], off)
                .map_err(|e| Error::io(format!("could not read {}", segment_label(segno)), e))?;
            if got < n {
                return Ok(false);
            }
            done += n;
        }
        Ok(true)
    }
}

/// Reads up to `buf.len()` bytes at `off`; returns how many exist.
fn read_full(file: &dyn FileIo, buf: &mut [u8], off: u64) -> io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match file.read_at(&mut buf[got..], off + got as u64) {
            Ok(0) => break,
            Ok(k) => got += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}
