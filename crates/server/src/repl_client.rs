//! The client side of a replication connection (what libpq does for `pg_basebackup` and the
//! walreceiver): startup with `replication=true`, authentication (trust or SCRAM-SHA-256 with
//! `PGPASSWORD`), simple queries, and the COPY messages of BASE_BACKUP and START_REPLICATION.
//! Blocking, on a `std::net::TcpStream`: its users (`walnut basebackup`) run on their own
//! thread. Message encoding and SCRAM are the `postgres-protocol` crate's; backend messages
//! are framed here (tag, length, body), so that CopyBothResponse and the replication payloads
//! need nothing more.

use bytes::{Buf, BytesMut};
use postgres_protocol::authentication::sasl::{ChannelBinding, ScramSha256};
use postgres_protocol::message::frontend;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// A replication client error.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The connection failed (I/O).
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// The server sent an ErrorResponse (bad input or a server-side failure; its SQLSTATE
    /// says which).
    #[error("{severity}: {message}{}", detail.as_deref().map(|d| format!("\nDETAIL: {d}")).unwrap_or_default())]
    Server {
        /// ERROR or FATAL.
        severity: String,
        /// SQLSTATE.
        code: String,
        /// Message.
        message: String,
        /// Detail, if any.
        detail: Option<String>,
    },
    /// The server broke the protocol, or asked for something this client cannot do
    /// (corruption of the conversation).
    #[error("protocol error: {0}")]
    Protocol(String),
}

/// Where to connect and as whom.
#[derive(Clone, Debug)]
pub struct ConnInfo {
    /// Host name or address.
    pub host: String,
    /// TCP port.
    pub port: u16,
    /// Role.
    pub user: String,
    /// Password for SCRAM (`PGPASSWORD`), if any.
    pub password: Option<String>,
    /// `application_name` (what `pg_stat_replication` shows).
    pub application_name: String,
}

/// How long a connection attempt may take (libpq's `connect_timeout`; a dead host would
/// otherwise hold the caller for the kernel's TCP timeout, minutes).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Connects to the first address of `host:port` that answers within `timeout`.
fn connect_timeout(host: &str, port: u16, timeout: Duration) -> std::io::Result<TcpStream> {
    use std::net::ToSocketAddrs;
    let mut last = None;
    for addr in (host, port).to_socket_addrs()? {
        match TcpStream::connect_timeout(&addr, timeout) {
            Ok(s) => return Ok(s),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::NotFound,
            format!("could not resolve \"{host}\""),
        )
    }))
}

/// One backend message: its type byte and body.
#[derive(Debug)]
pub struct Message {
    /// Type byte (`D` DataRow, `d` CopyData, `E` ErrorResponse, ...).
    pub tag: u8,
    /// Body, without the type and length.
    pub body: BytesMut,
}

/// A connected replication client.
#[derive(Debug)]
pub struct ReplClient {
    stream: TcpStream,
    buf: BytesMut,
}

/// The fields of an ErrorResponse body as a [`ClientError::Server`].
fn server_error(body: &[u8]) -> ClientError {
    let (mut severity, mut code, mut message, mut detail) =
        (String::new(), String::new(), String::new(), None);
    for f in body.split(|&b| b == 0).filter(|f| !f.is_empty()) {
        let v = String::from_utf8_lossy(&f[1..]).into_owned();
        match f[0] {
            b'S' => severity = v,
            b'C' => code = v,
            b'M' => message = v,
            b'D' => detail = Some(v),
            _ => {}
        }
    }
    ClientError::Server {
        severity,
        code,
        message,
        detail,
    }
}

/// The values of a DataRow body (`None` for NULL), as text.
///
/// # Errors
/// Protocol errors for a malformed row.
pub fn data_row(body: &[u8]) -> Result<Vec<Option<String>>, ClientError> {
    let bad = || ClientError::Protocol("malformed DataRow".into());
    let mut b = body;
    if b.len() < 2 {
        return Err(bad());
    }
    let n = b.get_u16() as usize;
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        if b.len() < 4 {
            return Err(bad());
        }
        let len = b.get_i32();
        if len < 0 {
            out.push(None);
            continue;
        }
        let len = len as usize;
        if b.len() < len {
            return Err(bad());
        }
        out.push(Some(String::from_utf8_lossy(&b[..len]).into_owned()));
        b.advance(len);
    }
    Ok(out)
}

impl ReplClient {
    /// Connects and authenticates with `replication=true`, up to ReadyForQuery.
    ///
    /// # Errors
    /// I/O errors, the server's refusal (FATAL), or an authentication method other than trust
    /// and SCRAM-SHA-256.
    pub fn connect(ci: &ConnInfo) -> Result<ReplClient, ClientError> {
        let stream = connect_timeout(&ci.host, ci.port, CONNECT_TIMEOUT)?;
        stream.set_nodelay(true)?;
        let mut c = ReplClient {
            stream,
            buf: BytesMut::with_capacity(64 * 1024),
        };
        let mut out = BytesMut::new();
        frontend::startup_message(
            [
                ("user", ci.user.as_str()),
                ("database", "replication"),
                ("replication", "true"),
                ("application_name", ci.application_name.as_str()),
            ],
            &mut out,
        )?;
        c.stream.write_all(&out)?;
        let mut scram: Option<ScramSha256> = None;
        loop {
            let m = c.read()?;
            match m.tag {
                b'R' => {
                    let mut b = &m.body[..];
                    if b.len() < 4 {
                        return Err(ClientError::Protocol("short authentication request".into()));
                    }
                    match b.get_i32() {
                        0 => {}
                        10 => {
                            let mechanisms = String::from_utf8_lossy(b);
                            if !mechanisms.split('\0').any(|s| s == "SCRAM-SHA-256") {
                                return Err(ClientError::Protocol(format!(
                                    "no supported SASL mechanism in {mechanisms:?}"
                                )));
                            }
                            let pw = ci.password.as_deref().ok_or_else(|| {
                                ClientError::Protocol(
                                    "the server asks for a password: set PGPASSWORD".into(),
                                )
                            })?;
                            let s = ScramSha256::new(pw.as_bytes(), ChannelBinding::unsupported());
                            let mut out = BytesMut::new();
                            frontend::sasl_initial_response("SCRAM-SHA-256", s.message(), &mut out)?;
                            c.stream.write_all(&out)?;
                            scram = Some(s);
                        }
                        11 => {
                            let s = scram.as_mut().ok_or_else(|| {
                                ClientError::Protocol("SASLContinue without SASL".into())
                            })?;
                            s.update(b)?;
                            let mut out = BytesMut::new();
                            frontend::sasl_response(s.message(), &mut out)?;
                            c.stream.write_all(&out)?;
                        }
                        12 => {
                            let s = scram.as_mut().ok_or_else(|| {
                                ClientError::Protocol("SASLFinal without SASL".into())
                            })?;
                            s.finish(b)?;
                        }
                        other => {
                            return Err(ClientError::Protocol(format!(
                                "authentication method {other} is not supported (trust and SCRAM-SHA-256 are)"
                            )))
                        }
                    }
                }
                b'Z' => return Ok(c),
                b'E' => return Err(server_error(&m.body)),
                // ParameterStatus, BackendKeyData, notices.
                _ => {}
            }
        }
    }

    /// Sets a read timeout (`None`: wait forever).
    ///
    /// # Errors
    /// I/O errors.
    pub fn set_read_timeout(&self, t: Option<Duration>) -> Result<(), ClientError> {
        Ok(self.stream.set_read_timeout(t)?)
    }

    /// The next backend message.
    ///
    /// # Errors
    /// I/O errors (EOF included); a length below 4 is a protocol error.
    pub fn read(&mut self) -> Result<Message, ClientError> {
        loop {
            if let Some(m) = self.buffered()? {
                return Ok(m);
            }
            let mut chunk = [0u8; 64 * 1024];
            let n = self.stream.read(&mut chunk)?;
            if n == 0 {
                return Err(ClientError::Io(std::io::ErrorKind::UnexpectedEof.into()));
            }
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }

    /// A message already received in full, if there is one, without reading the socket (the
    /// walreceiver writes every message of one read before it flushes).
    ///
    /// # Errors
    /// A bad length is a protocol error.
    pub fn buffered(&mut self) -> Result<Option<Message>, ClientError> {
        if self.buf.len() < 5 {
            return Ok(None);
        }
        let len = u32::from_be_bytes(self.buf[1..5].try_into().expect("4")) as usize;
        if len < 4 {
            return Err(ClientError::Protocol(format!("message length {len}")));
        }
        if self.buf.len() <= len {
            return Ok(None);
        }
        let tag = self.buf[0];
        self.buf.advance(5);
        let body = self.buf.split_to(len - 4);
        Ok(Some(Message { tag, body }))
    }

    /// A second handle on the connection's socket, for a thread that only writes (the
    /// walreceiver's status updates); writes from two threads must be serialized by the caller.
    ///
    /// # Errors
    /// I/O errors.
    pub fn writer(&self) -> Result<TcpStream, ClientError> {
        Ok(self.stream.try_clone()?)
    }

    /// Sends a simple Query.
    ///
    /// # Errors
    /// I/O errors.
    pub fn send_query(&mut self, sql: &str) -> Result<(), ClientError> {
        let mut out = BytesMut::new();
        frontend::query(sql, &mut out)?;
        Ok(self.stream.write_all(&out)?)
    }

    /// Runs a simple query and returns the rows of its results, as text.
    ///
    /// # Errors
    /// The server's ErrorResponse (after its ReadyForQuery), I/O errors.
    pub fn query(&mut self, sql: &str) -> Result<Vec<Vec<Option<String>>>, ClientError> {
        self.send_query(sql)?;
        let mut rows = Vec::new();
        let mut error = None;
        loop {
            let m = self.read()?;
            match m.tag {
                b'D' => rows.push(data_row(&m.body)?),
                b'E' => error = Some(server_error(&m.body)),
                b'Z' => return error.map_or(Ok(rows), Err),
                _ => {}
            }
        }
    }

    /// Sends CopyData with `data`.
    ///
    /// # Errors
    /// I/O errors.
    pub fn copy_data(&mut self, data: &[u8]) -> Result<(), ClientError> {
        let mut out = BytesMut::with_capacity(data.len() + 5);
        frontend::CopyData::new(data)?.write(&mut out);
        Ok(self.stream.write_all(&out)?)
    }

    /// Sends CopyDone.
    ///
    /// # Errors
    /// I/O errors.
    pub fn copy_done(&mut self) -> Result<(), ClientError> {
        let mut out = BytesMut::new();
        frontend::copy_done(&mut out);
        Ok(self.stream.write_all(&out)?)
    }

    /// The error a message is, if it is an ErrorResponse.
    pub fn error_of(m: &Message) -> Option<ClientError> {
        (m.tag == b'E').then(|| server_error(&m.body))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_and_errors_decode() {
        let mut b = BytesMut::new();
        b.extend_from_slice(&2u16.to_be_bytes());
        b.extend_from_slice(&2i32.to_be_bytes());
        b.extend_from_slice(b"ab");
        b.extend_from_slice(&(-1i32).to_be_bytes());
        assert_eq!(data_row(&b).unwrap(), vec![Some("ab".into()), None]);
        assert!(data_row(&b[..5]).is_err());
        let e = server_error(b"SFATAL\0C53300\0Mtoo many\0Dmore\0\0");
        assert_eq!(e.to_string(), "FATAL: too many\nDETAIL: more");
    }
}
