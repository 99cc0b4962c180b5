//! The wire-protocol front end on arbitrary bytes after a valid startup: the server must answer
//! with messages or close the connection — never panic or hang — and another session must
//! still work afterwards. The server runs in-process over the in-memory SQL engine.
#![no_main]
use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use walnut_server::config::ServerConfig;
use walnut_server::server::{self, ServerHandle};

struct Env {
    rt: tokio::runtime::Runtime,
    server: ServerHandle,
}

fn env() -> &'static Env {
    static ENV: OnceLock<Env> = OnceLock::new();
    ENV.get_or_init(|| {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let config = ServerConfig {
            listen_addresses: "127.0.0.1".into(),
            port: 0,
            max_connections: 64,
            ..ServerConfig::default()
        };
        let engine = std::sync::Arc::new(walnut_sql::testing::MemEngine::new());
        let server = rt.block_on(server::start(&config, engine)).unwrap();
        Env { rt, server }
    })
}

fn startup() -> Vec<u8> {
    let mut body = Vec::new();
    body.extend_from_slice(&196608u32.to_be_bytes()); // protocol 3.0
    for s in ["user", "fuzz", "database", "postgres", ""] {
        body.extend_from_slice(s.as_bytes());
        body.push(0);
    }
    let mut m = ((body.len() + 4) as u32).to_be_bytes().to_vec();
    m.extend_from_slice(&body);
    m
}

/// ReadyForQuery (idle): `Z`, length 5, `I`.
const READY: &[u8] = b"Z\0\0\0\x05I";

/// Sends `payload` after a startup and reads until the server closes, goes quiet for
/// `quiet`, or has sent `until` ReadyForQuery messages.
async fn session(port: u16, payload: &[u8], quiet: Duration, until: usize) -> Vec<u8> {
    let mut c = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    c.write_all(&startup()).await.unwrap();
    let _ = c.write_all(payload).await;
    let mut out = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        match tokio::time::timeout(quiet, c.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) | Err(_) => break,
            Ok(Ok(n)) => out.extend_from_slice(&buf[..n]),
        }
        if out.windows(READY.len()).filter(|w| *w == READY).count() >= until {
            break;
        }
    }
    out
}

fuzz_target!(|data: &[u8]| {
    let env = env();
    let port = env.server.local_addr().port();
    env.rt.block_on(async {
        let _ = session(port, data, Duration::from_millis(20), usize::MAX).await;
        // Another session still gets through startup and a query.
        let mut q = vec![b'Q'];
        let sql = b"select 1\0";
        q.extend_from_slice(&((sql.len() + 4) as u32).to_be_bytes());
        q.extend_from_slice(sql);
        let out = session(port, &q, Duration::from_secs(10), 2).await;
        assert!(
            out.windows(READY.len()).filter(|w| *w == READY).count() >= 2,
            "a healthy session got no answer to its query after fuzz input {data:?}"
        );
    });
});
