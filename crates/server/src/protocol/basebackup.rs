//! BASE_BACKUP on a replication connection (PostgreSQL's `basebackup.c` and
//! `basebackup_copy.c`, the protocol of PostgreSQL 15 and later): a consistent copy of the data
//! directory, sent as one tar archive, with the WAL that makes it consistent.
//!
//! Messages, in order:
//! 1. A result set: `recptr` (text, the start: the redo point of the backup's checkpoint),
//!    `tli` (int8, 1).
//! 2. A result set with one row per tablespace: `spcoid`, `spclocation` (NULL for the data
//!    directory) and `size` (int8, kB, with PROGRESS; else NULL).
//! 3. CopyOutResponse, then CopyData messages whose first byte says what they carry:
//!    `n` a new archive (name `base.tar`, then the tablespace location, empty), `d` archive
//!    bytes, `p` progress (u64 bytes sent so far, with PROGRESS), then CopyDone.
//! 4. A result set with the end position (`recptr`, `tli`), CommandComplete `BASE_BACKUP`.
//!
//! The archive: every directory and file of the data directory (`walnut_storage::backup::
//! backup_files`), `global/pg_control` as the backup's checkpoint wrote it, with WAL the
//! segments from the start's to the end's under `wal/` (the last zeroed after the end), the
//! timeline history files under `wal/` (with or without WAL), and `backup_label` last. Tar headers are the `tar` crate's (ustar). An error during the copy
//! ends it with an ErrorResponse (the client sees the copy fail) and the backup is abandoned;
//! the WAL it held is released.

use super::replication::BaseBackupOptions;
use super::results::{columns, feed_output};
use bytes::{BufMut, BytesMut};
use futures::{Sink, SinkExt};
use pgwire::error::{PgWireError, PgWireResult};
use pgwire::messages::copy::{CopyData, CopyOutResponse};
use pgwire::messages::response::CommandComplete;
use pgwire::messages::PgWireBackendMessage;
use std::fmt::Debug;
use std::io::Read;
use std::sync::Arc;
use walnut_common::{DataType, Error, Lsn, Value};
use walnut_sql::session::Output;
use walnut_storage::backup::{backup_files, backup_label};
use walnut_storage::Storage;
use walnut_wal::{segment_of, WAL_SEGMENT_SIZE};

/// Archive bytes per `d` message, bytes.
const CHUNK: usize = 64 * 1024;
/// Tar's block size, bytes.
const BLOCK: usize = 512;

/// Sends CopyData messages of archive bytes, `CHUNK` at a time, and progress.
struct Archive<'a, C> {
    client: &'a mut C,
    buf: BytesMut,
    sent: u64,
    progress: bool,
}

impl<C> Archive<'_, C>
where
    C: Sink<PgWireBackendMessage> + Unpin + Send,
    C::Error: Debug,
    PgWireError: From<C::Error>,
{
    async fn put(&mut self, mut bytes: &[u8]) -> PgWireResult<()> {
        while !bytes.is_empty() {
            let n = (CHUNK - self.buf.len()).min(bytes.len());
            self.buf.put_slice(&bytes[..n]);
            bytes = &bytes[n..];
            if self.buf.len() == CHUNK {
                self.send_buf().await?;
            }
        }
        Ok(())
    }

    async fn send_buf(&mut self) -> PgWireResult<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let mut m = BytesMut::with_capacity(1 + self.buf.len());
        m.put_u8(b'd');
        m.put_slice(&self.buf);
        self.sent += self.buf.len() as u64;
        self.buf.clear();
        self.client
            .feed(PgWireBackendMessage::CopyData(CopyData::new(m.freeze())))
            .await?;
        if self.progress {
            let mut p = BytesMut::with_capacity(9);
            p.put_u8(b'p');
            p.put_u64(self.sent);
            self.client
                .feed(PgWireBackendMessage::CopyData(CopyData::new(p.freeze())))
                .await?;
        }
        Ok(())
    }

    /// A tar entry's header.
    async fn header(
        &mut self,
        name: &str,
        size: u64,
        dir: bool,
    ) -> Result<PgWireResult<()>, Error> {
        let mut h = tar::Header::new_ustar();
        let path = if dir {
            format!("{name}/")
        } else {
            name.to_string()
        };
        h.set_path(&path)
            .map_err(|e| Error::internal(format!("tar path \"{path}\": {e}")))?;
        h.set_entry_type(if dir {
            tar::EntryType::Directory
        } else {
            tar::EntryType::Regular
        });
        h.set_mode(if dir { 0o700 } else { 0o600 });
        h.set_size(size);
        h.set_mtime(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
        );
        h.set_cksum();
        Ok(self.put(h.as_bytes()).await)
    }

    /// A whole file from memory.
    async fn file(&mut self, name: &str, bytes: &[u8]) -> Result<PgWireResult<()>, Error> {
        if let Err(e) = self.header(name, bytes.len() as u64, false).await? {
            return Ok(Err(e));
        }
        if let Err(e) = self.put(bytes).await {
            return Ok(Err(e));
        }
        Ok(self.pad(bytes.len() as u64).await)
    }

    async fn pad(&mut self, size: u64) -> PgWireResult<()> {
        let rem = (size % BLOCK as u64) as usize;
        if rem != 0 {
            self.put(&[0u8; BLOCK][..BLOCK - rem]).await?;
        }
        Ok(())
    }
}

/// A result set of one row: `recptr` (text), `tli` (int8).
async fn send_position<C>(client: &mut C, lsn: Lsn, tli: u32) -> PgWireResult<()>
where
    C: Sink<PgWireBackendMessage> + Unpin + Send,
    C::Error: Debug,
    PgWireError: From<C::Error>,
{
    let output = Output::Rows {
        columns: columns(&[("recptr", DataType::Text), ("tli", DataType::Int8)]),
        rows: vec![vec![
            Value::Text(lsn.to_string()),
            Value::Int8(i64::from(tli)),
        ]],
        tag: "SELECT".into(),
    };
    feed_output(client, output, &[], true).await.map(|_| ())
}

/// Runs BASE_BACKUP to the end of its messages (ReadyForQuery is the caller's).
///
/// Returns `Ok(Err(e))` for a backup error, which the caller reports (ErrorResponse; if the
/// copy had begun, it ends it for the client); `Err` for the socket's errors.
pub(super) async fn send<C>(
    client: &mut C,
    storage: &Arc<Storage>,
    opts: &BaseBackupOptions,
) -> PgWireResult<Result<(), Error>>
where
    C: Sink<PgWireBackendMessage> + Unpin + Send,
    C::Error: Debug,
    PgWireError: From<C::Error>,
{
    macro_rules! tryb {
        ($e:expr) => {
            match $e {
                Ok(v) => v,
                Err(e) => return Ok(Err(e)),
            }
        };
    }
    let start = tryb!(storage.start_backup());
    tracing::info!(start = %start.redo, label = %opts.label, "base backup started");
    send_position(client, start.redo, storage.timeline()).await?;
    let files = tryb!(backup_files(&storage.dir));
    let size: u64 = files
        .iter()
        .filter(|f| !f.is_dir)
        .filter_map(|f| std::fs::metadata(&f.path).ok())
        .map(|m| m.len())
        .sum();
    let wal_now = segment_of(storage.wal().insert_lsn().0) + 1 - segment_of(start.redo.0);
    let total_kb = (size
        + if opts.wal {
            wal_now * WAL_SEGMENT_SIZE
        } else {
            0
        })
        / 1024;
    let output = Output::Rows {
        columns: columns(&[
            ("spcoid", DataType::Int8),
            ("spclocation", DataType::Text),
            ("size", DataType::Int8),
        ]),
        rows: vec![vec![
            Value::Null,
            Value::Null,
            if opts.progress {
                Value::Int8(total_kb as i64)
            } else {
                Value::Null
            },
        ]],
        tag: "SELECT".into(),
    };
    feed_output(client, output, &[], true).await?;
    client
        .send(PgWireBackendMessage::CopyOutResponse(CopyOutResponse::new(
            0,
            0,
            vec![],
        )))
        .await?;
    let mut new_archive = BytesMut::new();
    new_archive.put_u8(b'n');
    new_archive.put_slice(b"base.tar\0\0");
    client
        .feed(PgWireBackendMessage::CopyData(CopyData::new(
            new_archive.freeze(),
        )))
        .await?;
    let mut a = Archive {
        client,
        buf: BytesMut::with_capacity(CHUNK),
        sent: 0,
        progress: opts.progress,
    };
    let mut chunk = vec![0u8; CHUNK];
    for f in &files {
        if f.is_dir {
            tryb!(a.header(&f.name, 0, true).await)?;
            if f.name == "global" {
                tryb!(a.file("global/pg_control", &start.control).await)?;
            }
            continue;
        }
        // A file that vanished since the listing (a dropped table) is left out.
        let Ok(mut file) = std::fs::File::open(&f.path) else {
            continue;
        };
        let len = tryb!(file
            .metadata()
            .map_err(|e| Error::io(format!("could not stat \"{}\"", f.path.display()), e)))
        .len();
        tryb!(a.header(&f.name, len, false).await)?;
        let mut left = len;
        while left > 0 {
            let want = (left as usize).min(CHUNK);
            let n = tryb!(file
                .read(&mut chunk[..want])
                .map_err(|e| Error::io(format!("could not read \"{}\"", f.path.display()), e)));
            if n == 0 {
                // Truncated meanwhile: zeros to the size in the header (redo rewrites them).
                chunk[..want].fill(0);
                a.put(&chunk[..want]).await?;
                left -= want as u64;
            } else {
                a.put(&chunk[..n]).await?;
                left -= n as u64;
            }
        }
        a.pad(len).await?;
    }
    let end = tryb!(storage.stop_backup(&start));
    if opts.wal {
        let wal = storage.wal();
        for segno in segment_of(start.redo.0)..=segment_of(end.0) {
            // The file under its own name: segments before a promotion's switch point keep
            // the old timeline's.
            let removed = || super::walsender::segment_removed(wal.timeline(), segno);
            let path = tryb!(wal.segment_path(segno).and_then(|p| p.ok_or_else(removed)));
            let name = path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            let mut file = tryb!(std::fs::File::open(&path).map_err(|_| removed()));
            tryb!(
                a.header(&format!("wal/{name}"), WAL_SEGMENT_SIZE, false)
                    .await
            )?;
            // Valid WAL ends at `end`: the rest of its segment goes as zeros.
            let valid = if segno == segment_of(end.0) {
                end.0 % WAL_SEGMENT_SIZE
            } else {
                WAL_SEGMENT_SIZE
            };
            let mut off = 0u64;
            while off < WAL_SEGMENT_SIZE {
                let want = CHUNK.min((WAL_SEGMENT_SIZE - off) as usize);
                if off >= valid {
                    chunk[..want].fill(0);
                } else {
                    tryb!(file
                        .read_exact(&mut chunk[..want])
                        .map_err(|e| Error::io(format!("could not read WAL segment {name}"), e)));
                    let keep = (valid - off).min(want as u64) as usize;
                    chunk[keep..want].fill(0);
                }
                a.put(&chunk[..want]).await?;
                off += want as u64;
            }
            if segno < wal.removed_below() {
                return Ok(Err(removed()));
            }
        }
    }
    // The timeline history files, with or without WAL (as PostgreSQL's basebackup.c sends
    // them): a standby made from this copy knows every timeline before its own.
    let wal_dir = storage.dir.join("wal");
    for tli in 2..=storage.timeline() {
        let text = tryb!(walnut_storage::timeline::read_history(
            &*storage.vfs,
            &wal_dir,
            tli
        ));
        if let Some(text) = text {
            let name = format!("wal/{}", walnut_storage::timeline::history_file_name(tli));
            tryb!(a.file(&name, text.as_bytes()).await)?;
        }
    }
    let label = backup_label(&start, end, &opts.label);
    tryb!(a.file("backup_label", label.as_bytes()).await)?;
    a.put(&[0u8; 2 * BLOCK]).await?;
    a.send_buf().await?;
    drop(a);
    client
        .feed(PgWireBackendMessage::CopyDone(
            pgwire::messages::copy::CopyDone::new(),
        ))
        .await?;
    send_position(client, end, storage.timeline()).await?;
    client
        .feed(PgWireBackendMessage::CommandComplete(CommandComplete::new(
            "BASE_BACKUP".into(),
        )))
        .await?;
    tracing::info!(start = %start.redo, end = %end, "base backup completed");
    Ok(Ok(()))
}
