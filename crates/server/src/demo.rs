//! `walnut demo`: the README's first command. Creates a temporary data directory, starts the
//! engine and the server in-process on an ephemeral localhost port, loads pgbench's tables
//! the way `pgbench -i` does, runs pgbench's simple-update script from several clients with
//! prepared statements, and prints throughput, latency and group-commit figures. The
//! temporary directory is removed at the end.
//!
//! The client is tokio-postgres, so everything goes through the real wire protocol.

use crate::config::{self, ServerConfig};
use crate::{engine, server};
use bytes::Bytes;
use futures::{pin_mut, SinkExt};
use hdrhistogram::Histogram;
use indicatif::{ProgressBar, ProgressStyle};
use std::hash::BuildHasher;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_postgres::types::Type;
use tokio_postgres::{Client, NoTls, SimpleQueryMessage};

/// `walnut demo` options.
#[derive(Clone, Copy, Debug)]
pub struct DemoOptions {
    /// Duration of the workload.
    pub seconds: u64,
    /// Concurrent client connections.
    pub clients: usize,
    /// pgbench scale factor.
    pub scale: u32,
}

/// Accounts per scale unit, as pgbench.
const ACCOUNTS_PER_SCALE: u64 = 100_000;
/// Tellers per scale unit, as pgbench.
const TELLERS_PER_SCALE: u64 = 10;

/// pgbench -i's DDL, verbatim.
const DDL: &[&str] = &[
    "drop table if exists pgbench_accounts, pgbench_branches, pgbench_history, pgbench_tellers",
    "create table pgbench_history(tid int,bid int,aid    int,delta int,mtime timestamp,filler char(22))",
    "create table pgbench_tellers(tid int not null,bid int,tbalance int,filler char(84)) with (fillfactor=100)",
    "create table pgbench_accounts(aid    int not null,bid int,abalance int,filler char(84)) with (fillfactor=100)",
    "create table pgbench_branches(bid int not null,bbalance int,filler char(88)) with (fillfactor=100)",
];

/// pgbench -i's post-load steps.
const VACUUM: &[&str] = &[
    "vacuum analyze pgbench_branches",
    "vacuum analyze pgbench_tellers",
    "vacuum analyze pgbench_accounts",
    "vacuum analyze pgbench_history",
];
const PRIMARY_KEYS: &[&str] = &[
    "alter table pgbench_branches add primary key (bid)",
    "alter table pgbench_tellers add primary key (tid)",
    "alter table pgbench_accounts add primary key (aid)",
];

/// Runs the demo. Returns an error message on failure.
///
/// # Errors
/// Any failure to set up, load or run; the message says which step.
pub fn run(opts: DemoOptions) -> Result<(), String> {
    if opts.clients == 0 || opts.scale == 0 || opts.seconds == 0 {
        return Err("--seconds, --clients and --scale must be at least 1".into());
    }
    let tmp = tempfile::Builder::new()
        .prefix("walnut-demo-")
        .tempdir()
        .map_err(|e| format!("could not create temporary directory: {e}"))?;
    let dir = tmp.path().join("data");
    println!("walnut demo: temporary data directory {}", dir.display());
    engine::initdb(&dir).map_err(|e| format!("initdb failed: {e}"))?;

    // The settings initdb wrote, on an ephemeral localhost port.
    let cfg = config::load(&dir, &[], None).map_err(|e| format!("reading walnut.conf: {e}"))?;
    let mut server_config = ServerConfig::new(cfg.clone());
    server_config.listen_addresses = "127.0.0.1".into();
    server_config.port = 0;
    server_config.max_connections = server_config.max_connections.max(opts.clients + 5);

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("could not start runtime: {e}"))?;
    let result = runtime.block_on(async {
        let dir2 = dir.clone();
        let engine = tokio::task::spawn_blocking(move || engine::open(&dir2, &cfg))
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| format!("could not open the database: {e}"))?;
        let handle = server::start(&server_config, engine.clone())
            .await
            .map_err(|e| format!("could not start the server: {e}"))?;
        let result = drive(handle.local_addr(), opts).await;
        handle.shutdown(Duration::from_secs(10)).await;
        let _ = tokio::task::spawn_blocking(move || drop(engine)).await;
        result
    });
    drop(runtime);
    tmp.close()
        .map_err(|e| format!("could not remove temporary directory: {e}"))?;
    result
}

fn conn_string(addr: SocketAddr) -> String {
    format!(
        "host={} port={} user=walnut dbname=walnut application_name=walnut-demo",
        addr.ip(),
        addr.port()
    )
}

async fn connect(addr: SocketAddr) -> Result<Client, String> {
    let (client, connection) = tokio_postgres::connect(&conn_string(addr), NoTls)
        .await
        .map_err(|e| format!("could not connect: {}", db_error(&e)))?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(client)
}

/// The server's message for a tokio-postgres error when there is one.
fn db_error(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("{} (SQLSTATE {})", db.message(), db.code().code()),
        None => e.to_string(),
    }
}

async fn drive(addr: SocketAddr, opts: DemoOptions) -> Result<(), String> {
    let client = connect(addr).await?;
    load(&client, opts.scale).await?;
    let before = WalStats::read(&client).await;
    let outcome = run_clients(addr, opts).await?;
    let after = WalStats::read(&client).await;
    report(&opts, &outcome, &before, &after);
    if outcome.failed > 0 {
        return Err(format!("{} transactions failed", outcome.failed));
    }
    Ok(())
}

async fn exec(client: &Client, sql: &str) -> Result<(), String> {
    client
        .batch_execute(sql)
        .await
        .map_err(|e| format!("{sql}: {}", db_error(&e)))
}

/// Loads pgbench's tables as `pgbench -i` (client-side generation) does.
async fn load(client: &Client, scale: u32) -> Result<(), String> {
    let started = Instant::now();
    let scale = u64::from(scale);
    println!(
        "loading pgbench tables, scale {scale} ({} accounts)...",
        scale * ACCOUNTS_PER_SCALE
    );
    for sql in DDL {
        exec(client, sql).await?;
    }
    exec(client, "begin").await?;
    copy(
        client,
        "copy pgbench_branches from stdin",
        (1..=scale).map(|bid| format!("{bid}\t0\t\n")),
    )
    .await?;
    copy(
        client,
        "copy pgbench_tellers from stdin",
        (1..=scale * TELLERS_PER_SCALE)
            .map(|tid| format!("{tid}\t{}\t0\t\n", (tid - 1) / TELLERS_PER_SCALE + 1)),
    )
    .await?;
    copy(
        client,
        "copy pgbench_accounts from stdin",
        (1..=scale * ACCOUNTS_PER_SCALE)
            .map(|aid| format!("{aid}\t{}\t0\t\n", (aid - 1) / ACCOUNTS_PER_SCALE + 1)),
    )
    .await?;
    exec(client, "commit").await?;
    for sql in VACUUM {
        // VACUUM reclaims nothing walnut needs for this run; do not fail the demo over it.
        if let Err(e) = exec(client, sql).await {
            eprintln!("warning: {e}");
        }
    }
    for sql in PRIMARY_KEYS {
        exec(client, sql).await?;
    }
    println!("loaded in {:.1} s", started.elapsed().as_secs_f64());
    Ok(())
}

/// COPY FROM STDIN with `lines`, sent in chunks of about 64 kB.
async fn copy(
    client: &Client,
    sql: &str,
    lines: impl Iterator<Item = String>,
) -> Result<(), String> {
    let err = |e: tokio_postgres::Error| format!("{sql}: {}", db_error(&e));
    let sink = client.copy_in::<_, Bytes>(sql).await.map_err(err)?;
    pin_mut!(sink);
    let mut chunk = String::with_capacity(64 * 1024);
    for line in lines {
        chunk.push_str(&line);
        if chunk.len() >= 60 * 1024 {
            let data = Bytes::from(std::mem::replace(
                &mut chunk,
                String::with_capacity(64 * 1024),
            ));
            sink.send(data).await.map_err(err)?;
        }
    }
    if !chunk.is_empty() {
        sink.send(Bytes::from(chunk)).await.map_err(err)?;
    }
    sink.as_mut().finish().await.map_err(err)?;
    Ok(())
}

/// What the clients did.
struct Outcome {
    committed: u64,
    failed: u64,
    latency_us: Histogram<u64>,
    elapsed: Duration,
}

/// A small deterministic PRNG (splitmix64), one per client.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `lo..=hi`.
    fn range(&mut self, lo: i64, hi: i64) -> i64 {
        let span = (hi - lo + 1) as u64;
        lo + (self.next() % span) as i64
    }
}

async fn run_clients(addr: SocketAddr, opts: DemoOptions) -> Result<Outcome, String> {
    println!(
        "running pgbench simple-update: {} clients, {} s, prepared statements...",
        opts.clients, opts.seconds
    );
    // Connect and prepare everything before the clock starts.
    let mut clients = Vec::with_capacity(opts.clients);
    for _ in 0..opts.clients {
        let client = connect(addr).await?;
        let stmts = Statements::prepare(&client).await?;
        clients.push((client, stmts));
    }
    let committed = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let deadline = started + Duration::from_secs(opts.seconds);
    let seeds = std::collections::hash_map::RandomState::new();
    let mut tasks = Vec::new();
    for (i, (client, stmts)) in clients.into_iter().enumerate() {
        let committed = committed.clone();
        let rng = Rng(seeds.hash_one(i));
        tasks.push(tokio::spawn(client_loop(
            client, stmts, rng, opts.scale, deadline, committed,
        )));
    }
    let progress = progress_bar(opts.seconds);
    let mut last = (Instant::now(), 0u64);
    while Instant::now() < deadline {
        tokio::time::sleep(
            Duration::from_millis(250).min(deadline.saturating_duration_since(Instant::now())),
        )
        .await;
        let now = Instant::now();
        let count = committed.load(Ordering::Relaxed);
        let tps = (count - last.1) as f64 / now.duration_since(last.0).as_secs_f64().max(1e-3);
        if now.duration_since(last.0) >= Duration::from_secs(1) {
            last = (now, count);
        }
        progress.set_position(now.duration_since(started).as_secs().min(opts.seconds));
        progress.set_message(format!("{tps:>8.0} tps, {count} transactions"));
    }
    progress.finish_and_clear();
    let mut latency_us = new_histogram();
    let mut failed = 0;
    for task in tasks {
        let (hist, fails) = task
            .await
            .map_err(|e| format!("client task failed: {e}"))??;
        latency_us.add(&hist).map_err(|e| e.to_string())?;
        failed += fails;
    }
    Ok(Outcome {
        committed: committed.load(Ordering::Relaxed),
        failed,
        latency_us,
        elapsed: started.elapsed(),
    })
}

fn progress_bar(seconds: u64) -> ProgressBar {
    let bar = ProgressBar::new(seconds);
    let style = ProgressStyle::with_template("{elapsed:>4} / {len}s [{bar:30}] {msg}")
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> ");
    bar.set_style(style);
    bar
}

fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("constant histogram bounds are valid")
}

/// pgbench simple-update's statements, prepared once per client (pgbench -M prepared).
struct Statements {
    begin: tokio_postgres::Statement,
    update: tokio_postgres::Statement,
    select: tokio_postgres::Statement,
    insert: tokio_postgres::Statement,
    end: tokio_postgres::Statement,
}

impl Statements {
    async fn prepare(client: &Client) -> Result<Statements, String> {
        let int4 = Type::INT4;
        let prep = |sql: &'static str, types: Vec<Type>| async move {
            client
                .prepare_typed(sql, &types)
                .await
                .map_err(|e| format!("prepare {sql}: {}", db_error(&e)))
        };
        Ok(Statements {
            begin: prep("BEGIN", vec![]).await?,
            update: prep(
                "UPDATE pgbench_accounts SET abalance = abalance + $1 WHERE aid = $2",
                vec![int4.clone(), int4.clone()],
            )
            .await?,
            select: prep("SELECT abalance FROM pgbench_accounts WHERE aid = $1", vec![int4.clone()]).await?,
            insert: prep(
                "INSERT INTO pgbench_history (tid, bid, aid, delta, mtime) VALUES ($1, $2, $3, $4, CURRENT_TIMESTAMP)",
                vec![int4.clone(), int4.clone(), int4.clone(), int4],
            )
            .await?,
            end: prep("END", vec![]).await?,
        })
    }
}

async fn client_loop(
    client: Client,
    s: Statements,
    mut rng: Rng,
    scale: u32,
    deadline: Instant,
    committed: Arc<AtomicU64>,
) -> Result<(Histogram<u64>, u64), String> {
    let scale = i64::from(scale);
    let mut hist = new_histogram();
    let mut failed = 0;
    while Instant::now() < deadline {
        let aid = rng.range(1, ACCOUNTS_PER_SCALE as i64 * scale) as i32;
        let bid = rng.range(1, scale) as i32;
        let tid = rng.range(1, TELLERS_PER_SCALE as i64 * scale) as i32;
        let delta = rng.range(-5000, 5000) as i32;
        let started = Instant::now();
        let result = async {
            client.execute(&s.begin, &[]).await?;
            client.execute(&s.update, &[&delta, &aid]).await?;
            client.query(&s.select, &[&aid]).await?;
            client
                .execute(&s.insert, &[&tid, &bid, &aid, &delta])
                .await?;
            client.execute(&s.end, &[]).await
        }
        .await;
        match result {
            Ok(_) => {
                let us = started.elapsed().as_micros().max(1) as u64;
                hist.record(us.min(3_600_000_000))
                    .expect("value within histogram bounds");
                committed.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => {
                failed += 1;
                if failed <= 3 {
                    eprintln!("transaction failed: {}", db_error(&e));
                }
                if client.is_closed() {
                    return Err(format!("connection lost: {}", db_error(&e)));
                }
                let _ = client.batch_execute("ROLLBACK").await;
            }
        }
    }
    Ok((hist, failed))
}

/// WAL and group-commit counters; `None` where the view could not be read.
struct WalStats {
    wal_bytes: Option<f64>,
    wal_sync: Option<f64>,
    flushes: Option<f64>,
    commits: Option<f64>,
}

impl WalStats {
    async fn read(client: &Client) -> WalStats {
        let wal = view_row(client, "SELECT * FROM pg_stat_wal").await;
        let group = view_row(client, "SELECT * FROM walnut_stat_group_commit").await;
        let get = |row: &Option<Vec<(String, String)>>, name: &str| {
            row.as_ref()?
                .iter()
                .find(|(n, _)| n == name)?
                .1
                .parse::<f64>()
                .ok()
        };
        WalStats {
            wal_bytes: get(&wal, "wal_bytes"),
            wal_sync: get(&wal, "wal_sync"),
            flushes: get(&group, "flushes"),
            commits: get(&group, "commits"),
        }
    }
}

/// The first row of a query as (column, text value) pairs.
async fn view_row(client: &Client, sql: &str) -> Option<Vec<(String, String)>> {
    let messages = client.simple_query(sql).await.ok()?;
    messages.into_iter().find_map(|m| match m {
        SimpleQueryMessage::Row(row) => Some(
            row.columns()
                .iter()
                .enumerate()
                .map(|(i, c)| (c.name().to_string(), row.get(i).unwrap_or("").to_string()))
                .collect(),
        ),
        _ => None,
    })
}

fn delta(after: Option<f64>, before: Option<f64>) -> Option<f64> {
    Some(after? - before?)
}

fn report(opts: &DemoOptions, outcome: &Outcome, before: &WalStats, after: &WalStats) {
    let secs = outcome.elapsed.as_secs_f64();
    let ms = |us: u64| us as f64 / 1000.0;
    let h = &outcome.latency_us;
    let na = || "n/a".to_string();
    let wal_bytes = delta(after.wal_bytes, before.wal_bytes);
    let wal_sync = delta(after.wal_sync, before.wal_sync);
    let per_flush = match (
        delta(after.commits, before.commits),
        delta(after.flushes, before.flushes),
    ) {
        (Some(c), Some(f)) if f > 0.0 => format!("{:.2}", c / f),
        _ => na(),
    };
    println!();
    println!("transaction type: pgbench simple-update (prepared statements)");
    println!("scaling factor: {}", opts.scale);
    println!("number of clients: {}", opts.clients);
    println!("duration: {:.1} s", secs);
    println!(
        "number of transactions actually processed: {}",
        outcome.committed
    );
    println!("number of failed transactions: {}", outcome.failed);
    if !h.is_empty() {
        println!(
            "latency average = {:.3} ms, p50 = {:.3} ms, p99 = {:.3} ms",
            h.mean() / 1000.0,
            ms(h.value_at_quantile(0.50)),
            ms(h.value_at_quantile(0.99))
        );
    }
    println!("tps = {:.1}", outcome.committed as f64 / secs);
    println!(
        "WAL bytes: {}",
        wal_bytes.map_or_else(na, |b| {
            let per_txn = if outcome.committed > 0 {
                b / outcome.committed as f64
            } else {
                0.0
            };
            format!("{b:.0} ({per_txn:.0} per transaction)")
        })
    );
    println!(
        "WAL flushes: {}",
        wal_sync.map_or_else(na, |f| format!("{f:.0}"))
    );
    println!("commits per flush: {per_flush}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rng_range_is_inclusive_and_bounded() {
        let mut rng = Rng(42);
        let mut seen_lo = false;
        let mut seen_hi = false;
        for _ in 0..10_000 {
            let v = rng.range(-2, 2);
            assert!((-2..=2).contains(&v));
            seen_lo |= v == -2;
            seen_hi |= v == 2;
        }
        assert!(seen_lo && seen_hi);
    }
}
