//! Sequential WAL reader used by redo (PostgreSQL's `xlogreader.c`, `XLogReadRecord`).
//!
//! End-of-WAL decision table (v0: every case ends the valid WAL; a later version will tell a
//! torn tail from mid-log corruption):
//!
//! | at the read position                         | decision                      |
//! |----------------------------------------------|-------------------------------|
//! | segment file missing                         | end of WAL (`Ok(None)`)       |
//! | file shorter than the header or the record   | end of WAL (torn / truncated) |
//! | `total_len == 0`                             | end of WAL (zeroed tail)      |
//! | `total_len < 32` or `> 1 GiB`                | end of WAL (garbage)          |
//! | header LSN differs from the position         | end of WAL (stale, recycled)  |
//! | CRC mismatch or malformed lengths            | end of WAL (torn write)       |
//! | read(2) fails                                | `Err` (I/O error)             |

use crate::record::{check_header, decode_record, RECORD_HEADER_LEN};
use crate::segment::{open_existing, segment_file_name, segment_of, WAL_SEGMENT_SIZE};
use crate::DecodedRecord;
use std::io;
use std::path::PathBuf;
use std::sync::Arc;
use walnut_common::{Error, Lsn, Result};
use walnut_io::{FileIo, Vfs};

/// Bytes read from a segment at a time.
const READ_CHUNK: u64 = 1024 * 1024;

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
}

impl ReaderState {
    pub(crate) fn open(vfs: Arc<dyn Vfs>, dir: PathBuf, start: Lsn) -> Result<ReaderState> {
        let segno = segment_of(start.0);
        let file = open_existing(vfs.as_ref(), &dir, segno)
            .map_err(|e| {
                Error::io(
                    format!("could not open WAL segment {}", segment_file_name(segno)),
                    e,
                )
            })?
            .ok_or_else(|| {
                Error::corruption(format!(
                    "WAL segment {} holding start position {start} does not exist",
                    segment_file_name(segno)
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
        })
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
            match open_existing(self.vfs.as_ref(), &self.dir, segno) {
                Ok(Some(f)) => self.file = Some((segno, f)),
                Ok(None) => return Ok(false),
                Err(e) => {
                    return Err(Error::io(
                        format!("could not open WAL segment {}", segment_file_name(segno)),
                        e,
                    ))
                }
            }
        }
        let (_, file) = self.file.as_ref().expect("segment opened above");
        let off = pos % WAL_SEGMENT_SIZE;
        let n = (WAL_SEGMENT_SIZE - off).min(READ_CHUNK) as usize;
        self.buf.resize(n, 0);
        let mut got = 0;
        while got < n {
            match file.read_at(&mut self.buf[got..], off + got as u64) {
                Ok(0) => break,
                Ok(k) => got += k,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    return Err(Error::io(
                        format!("could not read WAL segment {}", segment_file_name(segno)),
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

    pub(crate) fn next_record(&mut self) -> Result<Option<DecodedRecord>> {
        let pos = self.pos;
        let mut scratch = std::mem::take(&mut self.scratch);
        let result = self.read_record(pos, &mut scratch);
        if scratch.capacity() <= 4 * READ_CHUNK as usize {
            self.scratch = scratch;
        }
        let rec = result?;
        if let Some(r) = &rec {
            self.pos = r.end_lsn.0;
        }
        Ok(rec)
    }

    fn read_record(&mut self, pos: u64, scratch: &mut Vec<u8>) -> Result<Option<DecodedRecord>> {
        if !self.read_into(pos, RECORD_HEADER_LEN, scratch)? {
            return Ok(None);
        }
        let total_len = match check_header(pos, scratch) {
            Ok(n) => n,
            Err(e) => {
                tracing::debug!(lsn = %Lsn(pos), "end of WAL: {e}");
                return Ok(None);
            }
        };
        if !self.read_into(pos, total_len, scratch)? {
            tracing::debug!(lsn = %Lsn(pos), "end of WAL: record truncated");
            return Ok(None);
        }
        match decode_record(Lsn(pos), scratch) {
            Ok(r) => Ok(Some(r)),
            Err(e) => {
                tracing::debug!(lsn = %Lsn(pos), "end of WAL: {e}");
                Ok(None)
            }
        }
    }
}
