//! Front-end tests: the server on an ephemeral port over a mock engine whose transactions all
//! fail. They exercise only what does not depend on the SQL layer's results: errors arrive as
//! ErrorResponse with ReadyForQuery after them and the connection stays usable, the
//! extended protocol skips to Sync after an error, empty queries, cancel keys,
//! `max_connections` and session teardown, DISCARD ALL dropping prepared statements. Statements used are syntax errors or queries of
//! missing tables, which fail whatever the SQL layer does.

use bytes::{Buf, BufMut, BytesMut};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use walnut_common::{ColumnDef, Error, Result, Value};
use walnut_server::config::ServerConfig;
use walnut_server::server::{self, ServerHandle};
use walnut_sql::storage::{Engine, Transaction};

/// An engine that cannot begin transactions.
struct NoEngine;

impl Engine for NoEngine {
    fn begin(&self, _cancel: Arc<AtomicBool>) -> Result<Box<dyn Transaction>> {
        Err(Error::unsupported("transactions in the mock engine"))
    }
    fn checkpoint(&self) -> Result<()> {
        Ok(())
    }
    fn system_view(&self, _name: &str) -> Option<(Vec<ColumnDef>, Vec<Vec<Value>>)> {
        None
    }
}

async fn start(max_connections: usize) -> ServerHandle {
    let config = ServerConfig {
        listen_addresses: "127.0.0.1".into(),
        port: 0,
        max_connections,
        ..ServerConfig::default()
    };
    server::start(&config, Arc::new(NoEngine))
        .await
        .expect("server starts")
}

async fn connect(
    server: &ServerHandle,
) -> std::result::Result<tokio_postgres::Client, tokio_postgres::Error> {
    connect_with(server, "").await
}

async fn connect_with(
    server: &ServerHandle,
    extra: &str,
) -> std::result::Result<tokio_postgres::Client, tokio_postgres::Error> {
    let addr = server.local_addr();
    let conn = format!(
        "host={} port={} user=tester dbname=test {extra}",
        addr.ip(),
        addr.port()
    );
    let (client, connection) = tokio_postgres::connect(&conn, tokio_postgres::NoTls).await?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(client)
}

/// Waits until the server has `n` sessions.
async fn wait_for_sessions(server: &ServerHandle, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while server.registry().connection_count() != n {
        assert!(
            Instant::now() < deadline,
            "expected {n} sessions, have {}",
            server.registry().connection_count()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

// ---------------------------------------------------------------------------------------------
// A raw protocol client, to see every message.

struct Raw {
    stream: TcpStream,
    buf: BytesMut,
    pid: i32,
    secret: Vec<u8>,
}

/// One backend message: type byte and body.
#[derive(Debug)]
struct Msg {
    tag: u8,
    body: Vec<u8>,
}

impl Msg {
    /// A field of an ErrorResponse/NoticeResponse.
    fn field(&self, code: u8) -> Option<String> {
        let mut b = &self.body[..];
        while let Some((&c, rest)) = b.split_first() {
            if c == 0 {
                return None;
            }
            let end = rest.iter().position(|&x| x == 0)?;
            if c == code {
                return Some(String::from_utf8_lossy(&rest[..end]).into_owned());
            }
            b = &rest[end + 1..];
        }
        None
    }
}

fn cstr(buf: &mut BytesMut, s: &str) {
    buf.put_slice(s.as_bytes());
    buf.put_u8(0);
}

fn message(tag: u8, body: impl FnOnce(&mut BytesMut)) -> BytesMut {
    let mut b = BytesMut::new();
    body(&mut b);
    let mut out = BytesMut::new();
    out.put_u8(tag);
    out.put_i32(b.len() as i32 + 4);
    out.put_slice(&b);
    out
}

fn query(sql: &str) -> BytesMut {
    message(b'Q', |b| cstr(b, sql))
}
fn parse(name: &str, sql: &str) -> BytesMut {
    message(b'P', |b| {
        cstr(b, name);
        cstr(b, sql);
        b.put_i16(0);
    })
}
fn bind(portal: &str, stmt: &str) -> BytesMut {
    message(b'B', |b| {
        cstr(b, portal);
        cstr(b, stmt);
        b.put_i16(0);
        b.put_i16(0);
        b.put_i16(0);
    })
}
fn describe(kind: u8, name: &str) -> BytesMut {
    message(b'D', |b| {
        b.put_u8(kind);
        cstr(b, name);
    })
}
fn execute(portal: &str) -> BytesMut {
    message(b'E', |b| {
        cstr(b, portal);
        b.put_i32(0);
    })
}
fn sync() -> BytesMut {
    message(b'S', |_| {})
}

impl Raw {
    /// Connects and completes startup with the given extra startup parameters.
    async fn connect(
        server: &ServerHandle,
        params: &[(&str, &str)],
    ) -> std::result::Result<Raw, Msg> {
        let stream = TcpStream::connect(server.local_addr())
            .await
            .expect("tcp connect");
        let mut raw = Raw {
            stream,
            buf: BytesMut::new(),
            pid: 0,
            secret: Vec::new(),
        };
        let mut body = BytesMut::new();
        body.put_i32(196608); // protocol 3.0
        for (k, v) in [("user", "raw"), ("database", "test")].iter().chain(params) {
            cstr(&mut body, k);
            cstr(&mut body, v);
        }
        body.put_u8(0);
        let mut packet = BytesMut::new();
        packet.put_i32(body.len() as i32 + 4);
        packet.put_slice(&body);
        raw.send(&packet).await;
        loop {
            let m = raw.recv().await.expect("startup reply");
            match m.tag {
                b'K' => {
                    let mut b = &m.body[..];
                    raw.pid = b.get_i32();
                    raw.secret = b.to_vec();
                }
                b'E' => return Err(m),
                b'Z' => return Ok(raw),
                _ => {}
            }
        }
    }

    async fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).await.expect("write");
    }

    /// The next message, or `None` at EOF.
    async fn recv(&mut self) -> Option<Msg> {
        loop {
            if self.buf.len() >= 5 {
                let len = i32::from_be_bytes(self.buf[1..5].try_into().unwrap()) as usize;
                if self.buf.len() > len {
                    let tag = self.buf[0];
                    self.buf.advance(5);
                    let body = self.buf.split_to(len - 4).to_vec();
                    return Some(Msg { tag, body });
                }
            }
            let n =
                tokio::time::timeout(Duration::from_secs(10), self.stream.read_buf(&mut self.buf))
                    .await
                    .expect("server answers within 10 s");
            match n {
                Ok(0) => return None,
                Ok(_) => {}
                // A reset is a close too (the server dropped the connection with data unread).
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return None,
                Err(e) => panic!("read: {e}"),
            }
        }
    }

    /// Sends `messages` and a Sync; the replies up to and including ReadyForQuery.
    async fn round(&mut self, messages: &[BytesMut]) -> Vec<Msg> {
        let mut batch = BytesMut::new();
        for m in messages {
            batch.put_slice(m);
        }
        batch.put_slice(&sync());
        self.send(&batch).await;
        self.until_ready().await
    }

    /// Messages up to and including the next ReadyForQuery.
    async fn until_ready(&mut self) -> Vec<Msg> {
        let mut out = Vec::new();
        loop {
            let m = self
                .recv()
                .await
                .expect("connection open until ReadyForQuery");
            let done = m.tag == b'Z';
            out.push(m);
            if done {
                return out;
            }
        }
    }
}

fn tags(msgs: &[Msg]) -> String {
    msgs.iter().map(|m| m.tag as char).collect()
}

// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn simple_query_error_keeps_connection_usable() {
    let server = start(10).await;
    let mut raw = Raw::connect(&server, &[]).await.expect("startup succeeds");
    assert!(
        raw.pid != 0 && raw.secret.len() == 4,
        "BackendKeyData was sent"
    );

    for _ in 0..3 {
        raw.send(&query("SELEC 1")).await;
        let msgs = raw.until_ready().await;
        assert_eq!(tags(&msgs).chars().last(), Some('Z'));
        let err = msgs
            .iter()
            .find(|m| m.tag == b'E')
            .expect("an ErrorResponse");
        assert_eq!(err.field(b'S').as_deref(), Some("ERROR"));
        assert_eq!(
            err.field(b'C').map(|c| c.len()),
            Some(5),
            "SQLSTATE present"
        );
        assert!(err.field(b'M').is_some_and(|m| !m.is_empty()));
        assert_eq!(
            msgs.last().unwrap().body,
            b"I",
            "idle after an error outside a block"
        );
    }

    // Empty query string: EmptyQueryResponse, then ReadyForQuery.
    raw.send(&query(" ; ")).await;
    assert_eq!(tags(&raw.until_ready().await), "IZ");

    // The same through tokio-postgres: an error, and the client stays usable.
    let client = connect(&server).await.expect("connect");
    for _ in 0..2 {
        let err = client
            .simple_query("SELECT * FROM no_such_table")
            .await
            .expect_err("must fail");
        assert!(
            err.as_db_error().is_some(),
            "a server error, not a broken connection: {err}"
        );
    }
    assert!(!client.is_closed());
    server.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extended_protocol_skips_to_sync_after_error() {
    let server = start(10).await;
    let mut raw = Raw::connect(&server, &[]).await.expect("startup");

    // Parse fails; Bind/Describe/Execute must be skipped; Sync answers ReadyForQuery.
    let msgs = raw
        .round(&[
            parse("s1", "SELEC 1"),
            bind("", "s1"),
            describe(b'P', ""),
            execute(""),
        ])
        .await;
    assert_eq!(tags(&msgs), "EZ", "{msgs:?}");
    assert_eq!(msgs[1].body, b"I");

    // Bind of a statement that does not exist: 26000, then skip to Sync.
    let msgs = raw.round(&[bind("", "nope"), execute("")]).await;
    assert_eq!(tags(&msgs), "EZ");
    assert_eq!(msgs[0].field(b'C').as_deref(), Some("26000"));

    // Empty statement through the whole extended cycle, unnamed and named.
    let msgs = raw
        .round(&[
            parse("", ""),
            describe(b'S', ""),
            bind("", ""),
            describe(b'P', ""),
            execute(""),
            parse("e", "  "),
            bind("p", "e"),
            execute("p"),
        ])
        .await;
    assert_eq!(tags(&msgs), "1tn2nI12IZ", "{msgs:?}");

    // A second Parse of the same statement name is an error (42P05).
    let msgs = raw.round(&[parse("e", "")]).await;
    assert_eq!(tags(&msgs), "EZ");
    assert_eq!(msgs[0].field(b'C').as_deref(), Some("42P05"));

    // Close then re-Parse works.
    let mut batch = BytesMut::new();
    batch.put_slice(&message(b'C', |b| {
        b.put_u8(b'S');
        cstr(b, "e");
    }));
    batch.put_slice(&parse("e", ""));
    batch.put_slice(&sync());
    raw.send(&batch).await;
    assert_eq!(tags(&raw.until_ready().await), "31Z");

    // tokio-postgres prepare of a bad statement: error, connection still fine.
    let client = connect(&server).await.expect("connect");
    assert!(client
        .prepare("SELEC 1")
        .await
        .expect_err("syntax error")
        .as_db_error()
        .is_some());
    assert!(client
        .query("SELECT * FROM no_such_table WHERE a = $1", &[&1i32])
        .await
        .is_err());
    assert!(!client.is_closed());
    server.shutdown(Duration::from_secs(5)).await;
}

/// DISCARD ALL (pgbouncer's reset query) deallocates the connection's prepared statements
/// and closes its portals: a Bind of an old statement is 26000, and its name can be parsed
/// again (not 42P05). (Its 25001 in a transaction block: slt/alter.slt; this mock engine has
/// no transactions.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discard_all_deallocates_prepared_statements() {
    let server = start(10).await;
    let mut raw = Raw::connect(&server, &[]).await.expect("startup");
    assert_eq!(
        tags(&raw.round(&[parse("e", ""), bind("p", "e")]).await),
        "12Z"
    );

    raw.send(&query("DISCARD ALL")).await;
    let msgs = raw.until_ready().await;
    assert_eq!(tags(&msgs), "CZ", "{msgs:?}");
    let msgs = raw.round(&[bind("", "e")]).await;
    assert_eq!(tags(&msgs), "EZ");
    assert_eq!(msgs[0].field(b'C').as_deref(), Some("26000"));
    let msgs = raw.round(&[execute("p")]).await;
    assert_eq!(tags(&msgs), "EZ", "the portal is closed: {msgs:?}");
    assert_eq!(tags(&raw.round(&[parse("e", "")]).await), "1Z");
    server.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_request_finds_the_session() {
    let server = start(10).await;
    let raw = Raw::connect(&server, &[]).await.expect("startup");
    let secret = pgwire::messages::startup::SecretKey::Bytes(raw.secret.clone().into());
    assert!(
        server.registry().cancel(raw.pid, &secret),
        "key of a live session matches"
    );
    assert!(
        !server.registry().cancel(
            raw.pid,
            &pgwire::messages::startup::SecretKey::Bytes(vec![0; 4].into())
        ) || raw.secret == [0; 4]
    );
    assert!(!server.registry().cancel(raw.pid + 1_000_000, &secret));
    // Idle session: nothing to cancel.
    assert_eq!(server.registry().cancels_delivered(), 0);

    // A real CancelRequest over the wire: the server accepts and closes that connection.
    let client = connect(&server).await.expect("connect");
    tokio::time::timeout(
        Duration::from_secs(5),
        client.cancel_token().cancel_query(tokio_postgres::NoTls),
    )
    .await
    .expect("cancel completes")
    .expect("cancel request accepted");
    assert!(!client.is_closed());
    drop(raw);
    server.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_connections_and_session_teardown() {
    let server = start(2).await;
    let a = connect(&server).await.expect("first");
    let b = connect(&server).await.expect("second");
    let err = connect(&server).await.expect_err("third must be refused");
    let db = err.as_db_error().expect("a server error");
    assert_eq!(db.code().code(), "53300");
    assert_eq!(db.message(), "sorry, too many clients already");
    assert_eq!(db.severity(), "FATAL");
    wait_for_sessions(&server, 2).await;

    // A client going away (Terminate) frees its slot once its backend thread has exited.
    drop(a);
    wait_for_sessions(&server, 1).await;
    let c = connect(&server).await.expect("slot is free again");

    // A client vanishing without Terminate frees it too.
    drop(b);
    drop(c);
    wait_for_sessions(&server, 0).await;
    let raw = Raw::connect(&server, &[]).await.expect("startup");
    wait_for_sessions(&server, 1).await;
    drop(raw);
    wait_for_sessions(&server, 0).await;
    server.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_startup_options_are_fatal() {
    let server = start(10).await;
    let err = Raw::connect(&server, &[("options", "-B 100")])
        .await
        .err()
        .expect("refused");
    assert_eq!(err.field(b'S').as_deref(), Some("FATAL"));
    assert_eq!(err.field(b'C').as_deref(), Some("42601"));
    let err = connect_with(&server, "options='-c'")
        .await
        .expect_err("refused");
    assert_eq!(err.as_db_error().map(|d| d.code().code()), Some("42601"));
    wait_for_sessions(&server, 0).await;
    // Well-formed options are accepted or rejected by the session (unknown names: 42704).
    match connect_with(
        &server,
        "options='-c application_name=x\\\\ y --statement-timeout=0'",
    )
    .await
    {
        Ok(c) => assert!(!c.is_closed()),
        Err(e) => panic!("valid options refused: {e:?}"),
    }
    server.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_closes_connections() {
    let server = start(10).await;
    let client = connect(&server).await.expect("connect");
    let mut raw = Raw::connect(&server, &[]).await.expect("startup");
    assert!(
        server.shutdown(Duration::from_secs(5)).await,
        "all sessions ended"
    );
    assert!(raw.recv().await.is_none(), "connection closed by shutdown");
    let deadline = Instant::now() + Duration::from_secs(5);
    while !client.is_closed() {
        assert!(Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Front-end round trips per second with the session doing no work: simple Query (one
/// backend hop) and Sync (one hop). `cargo test --release -- --ignored --nocapture hop_rate`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore]
async fn hop_rate() {
    let server = start(10).await;
    let mut raw = Raw::connect(&server, &[]).await.expect("startup");
    let mut parse_sync = parse("", "SELEC 1");
    parse_sync.put_slice(&sync());
    for (what, msg) in [
        ("empty query (no hop)", query(";")),
        ("simple query (1 hop)", query("SELEC 1")),
        ("sync (1 hop)", sync()),
        ("parse+sync (2 hops)", parse_sync),
    ] {
        let n = 20_000;
        let started = Instant::now();
        for _ in 0..n {
            raw.send(&msg).await;
            raw.until_ready().await;
        }
        let secs = started.elapsed().as_secs_f64();
        println!(
            "{what}: {:.0} round trips/s ({:.1} µs each)",
            n as f64 / secs,
            secs * 1e6 / n as f64
        );
    }
    server.shutdown(Duration::from_secs(5)).await;
}

/// Malformed messages get an answer (an ErrorResponse, or a ReadyForQuery) or a closed
/// connection — never a crash or a hang (`recv` fails the test if the server says nothing for
/// 10 s) — and another session is not harmed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_messages_get_an_error_or_a_close_and_harm_no_one_else() {
    let server = start(20).await;
    let mut bystander = Raw::connect(&server, &[]).await.unwrap();
    let mut huge = vec![b'Q'];
    huge.extend_from_slice(&0x7fff_fff0u32.to_be_bytes());
    huge.extend_from_slice(b"select 1\0");
    let cases: Vec<(&str, Vec<u8>)> = vec![
        (
            "an unknown message type",
            message(b'!', |b| b.put_slice(b"abc")).to_vec(),
        ),
        ("a length below 4", vec![b'Q', 0, 0, 0, 2]),
        ("a length of 2 GiB", huge),
        (
            "a query without its terminator",
            message(b'Q', |b| b.put_slice(b"select 1")).to_vec(),
        ),
        (
            "a bind with a negative format count",
            message(b'B', |b| {
                cstr(b, "");
                cstr(b, "nope");
                b.put_i16(-5);
            })
            .to_vec(),
        ),
        (
            "a parse with a negative parameter count",
            message(b'P', |b| {
                cstr(b, "");
                cstr(b, "select $1");
                b.put_i16(-1);
            })
            .to_vec(),
        ),
        (
            "a describe of an unknown kind",
            message(b'D', |b| {
                b.put_u8(b'Z');
                cstr(b, "");
            })
            .to_vec(),
        ),
    ];
    for (what, bytes) in cases {
        let mut c = Raw::connect(&server, &[]).await.unwrap();
        c.send(&bytes).await;
        c.send(&sync()).await;
        // An ErrorResponse, a ReadyForQuery (pgwire reads a short Query as an empty one) or
        // EOF: any answer is fine, silence is not (`recv` fails after 10 s of it).
        while let Some(m) = c.recv().await {
            if m.tag == b'E' || m.tag == b'Z' {
                break;
            }
        }
        bystander.send(&query("select 1")).await;
        let t = tags(&bystander.until_ready().await);
        assert!(t.ends_with('Z'), "{what}: the other session got {t}");
    }
    // The server still accepts new sessions.
    let mut fresh = Raw::connect(&server, &[]).await.unwrap();
    fresh.send(&query("select 1")).await;
    assert!(tags(&fresh.until_ready().await).ends_with('Z'));
}
