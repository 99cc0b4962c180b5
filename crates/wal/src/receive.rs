//! The walreceiver's writes: WAL streamed from a primary, written into a standby's own segment
//! files at the same LSNs (so the standby's WAL is a byte-for-byte prefix of the primary's) and
//! made durable in batches. PostgreSQL's `XLogWalRcvWrite` and `XLogWalRcvFlush`
//! (src/backend/replication/walreceiver.c).
//!
//! A segment is created zero-filled and durable before its first byte is written
//! ([`crate::segment`]'s preallocation, as on a primary), so a flush is one `fdatasync` per
//! segment written since the last flush. The receiver never writes anything but what arrived:
//! a record that is still arriving is simply incomplete, and replay reads only below the flush
//! position ([`crate::WalReader::set_limit`]).

use crate::segment::{self, open_existing_with, segment_file_name, segment_of, InitOpts};
use std::path::PathBuf;
use std::sync::Arc;
use walnut_common::{Error, Lsn, Result};
use walnut_io::{FileIo, OpenMode, Vfs};

/// A standby's WAL, as written by its walreceiver.
pub struct ReceivedWal {
    vfs: Arc<dyn Vfs>,
    dir: PathBuf,
    /// The timeline being received, which names the segments this writer creates.
    tli: u32,
    /// The segment being written.
    open: Option<(u64, Arc<dyn FileIo>)>,
    /// Segments written to since the last flush, the open one last if it was.
    unsynced: Vec<(u64, Arc<dyn FileIo>)>,
    write: Lsn,
    flush: Lsn,
}

impl ReceivedWal {
    /// A writer whose next byte goes to `start` (bytes; the end of the standby's valid WAL,
    /// which is where streaming starts), received on timeline `tli`. Everything before `start`
    /// counts as flushed. Segments from `start`'s on that an older timeline named are renamed
    /// to `tli` first, as a promoted primary renamed its own (the standby follows it onto a new
    /// timeline, so its copy of the switch segment gets the same name as the primary's).
    ///
    /// # Errors
    /// I/O errors listing or renaming segments.
    ///
    /// # Panics
    /// PANICs if the directory's fsync after a rename fails.
    pub fn new(vfs: Arc<dyn Vfs>, dir: PathBuf, tli: u32, start: Lsn) -> Result<ReceivedWal> {
        segment::adopt_timeline(vfs.as_ref(), &dir, tli, segment_of(start.0)).map_err(|e| {
            Error::io(
                format!("could not rename WAL segments for timeline {tli}"),
                e,
            )
        })?;
        Ok(ReceivedWal {
            vfs,
            dir,
            tli,
            open: None,
            unsynced: Vec::new(),
            write: start,
            flush: start,
        })
    }

    /// Where the next byte goes (PostgreSQL's `LogstreamResult.Write`).
    pub fn write_lsn(&self) -> Lsn {
        self.write
    }

    /// What is durable (`LogstreamResult.Flush`).
    pub fn flush_lsn(&self) -> Lsn {
        self.flush
    }

    /// Writes `data`, which the primary sent as the bytes at `lsn`, into the segment files
    /// (crossing segment boundaries as needed). `lsn` may lie before the write position (the
    /// primary resends from a segment's start); it may not lie beyond it.
    ///
    /// # Errors
    /// Corruption (of the stream) if `lsn` is beyond the write position: a gap would leave
    /// WAL that was never received. I/O errors creating or writing a segment.
    pub fn write(&mut self, lsn: Lsn, data: &[u8]) -> Result<()> {
        if lsn > self.write {
            return Err(Error::corruption(format!(
                "the primary sent WAL at {lsn}, after a gap from {}",
                self.write
            )));
        }
        let mut pos = lsn.0;
        let mut rest = data;
        while !rest.is_empty() {
            let segno = segment_of(pos);
            let off = pos % segment::WAL_SEGMENT_SIZE;
            let n = rest.len().min((segment::WAL_SEGMENT_SIZE - off) as usize);
            let file = self.segment(segno)?;
            file.write_at(&rest[..n], off).map_err(|e| {
                Error::io(
                    format!(
                        "could not write to WAL segment {} at offset {off}, length {n}",
                        segment_file_name(self.tli, segno)
                    ),
                    e,
                )
            })?;
            pos += n as u64;
            rest = &rest[n..];
        }
        self.write = self.write.max(Lsn(pos));
        Ok(())
    }

    /// Makes everything written durable and returns the new flush position.
    ///
    /// # Panics
    /// PANICs if an `fdatasync` fails (never retried: the kernel may have dropped the pages).
    pub fn flush(&mut self) -> Lsn {
        for (segno, file) in self.unsynced.drain(..) {
            if let Err(e) = file.sync_data() {
                walnut_common::panic_fatal(&format!(
                    "could not fsync WAL segment {}: {e}",
                    segment_file_name(self.tli, segno)
                ));
            }
        }
        self.flush = self.write;
        self.flush
    }

    /// The file of segment `segno`, created zero-filled if it does not exist; remembered as
    /// unsynced.
    fn segment(&mut self, segno: u64) -> Result<Arc<dyn FileIo>> {
        if let Some((s, f)) = &self.open {
            if *s == segno {
                if self.unsynced.last().map(|(s, _)| *s) != Some(segno) {
                    self.unsynced.push((segno, f.clone()));
                }
                return Ok(f.clone());
            }
        }
        let ctx = || {
            format!(
                "could not open WAL segment {}",
                segment_file_name(self.tli, segno)
            )
        };
        let mode = OpenMode::default();
        let file = match open_existing_with(self.vfs.as_ref(), &self.dir, segno, self.tli, mode)
            .map_err(|e| Error::io(ctx(), e))?
        {
            Some(f) => f,
            None => {
                segment::preallocate(
                    self.vfs.as_ref(),
                    &self.dir,
                    self.tli,
                    segno,
                    InitOpts::default(),
                )
                .map_err(|e| Error::io(ctx(), e))?;
                open_existing_with(self.vfs.as_ref(), &self.dir, segno, self.tli, mode)
                    .map_err(|e| Error::io(ctx(), e))?
                    .ok_or_else(|| Error::io(ctx(), std::io::ErrorKind::NotFound.into()))?
            }
        };
        self.open = Some((segno, file.clone()));
        self.unsynced.push((segno, file.clone()));
        Ok(file)
    }
}
