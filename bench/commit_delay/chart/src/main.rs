//! Draws the commit_delay experiment that `bench/commit_delay/run.sh` measured.
//!
//! Input: `OUT/results.tsv` (tab separated, one header line) with the columns
//! `server mode commit_delay_us clients tps lat_avg_ms lat_p50_ms lat_p99_ms write_iops`, where
//! `server` is `pg18` or `walnut`, `mode` is `fixed` or `adaptive`, and an adaptive row has
//! `adaptive` as its `commit_delay_us`. Optionally `OUT/test-fsync.txt`, the output of
//! `walnut test-fsync` under the same throttle.
//!
//! Output:
//! - `OUT/chart.svg`: tps against commit_delay (µs), one line per fixed-delay series, and walnut's
//!   adaptive result as a dashed horizontal line (it has no delay to plot against).
//! - `OUT/table.md`: the same numbers side by side with p50/p99 latency, then the ratios the
//!   anchors ask for: walnut adaptive ÷ PostgreSQL's best fixed delay, ÷ walnut's best fixed
//!   delay, and ÷ the flush ceiling (clients × buffered fdatasync flushes/s), when test-fsync
//!   printed a rate this program can read.
//!
//! The SVG uses no font files (plotters without `ttf`): the viewer renders the text.
#![forbid(unsafe_code)]

use plotters::prelude::*;
use std::collections::BTreeSet;
use std::error::Error;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

type Result<T> = std::result::Result<T, Box<dyn Error>>;

/// One line of results.tsv.
#[derive(Debug, Clone)]
struct Run {
    server: String,
    mode: String,
    /// `None` for the adaptive run, which sets no commit_delay.
    commit_delay_us: Option<u32>,
    clients: u32,
    tps: f64,
    lat_p50_ms: f64,
    lat_p99_ms: f64,
}

fn main() {
    let Some(out) = std::env::args_os().nth(1).map(PathBuf::from) else {
        eprintln!("usage: commit-delay-chart OUT_DIR   (reads OUT_DIR/results.tsv)");
        std::process::exit(2);
    };
    if let Err(e) = run(&out) {
        eprintln!("commit-delay-chart: {e}");
        std::process::exit(1);
    }
}

fn run(out: &Path) -> Result<()> {
    let tsv = out.join("results.tsv");
    let text = std::fs::read_to_string(&tsv).map_err(|e| format!("{}: {e}", tsv.display()))?;
    let runs = parse_results(&text)?;
    let fsync_rate = std::fs::read_to_string(out.join("test-fsync.txt"))
        .ok()
        .and_then(|t| buffered_fdatasync_rate(&t));
    draw_chart(&runs, &out.join("chart.svg"))?;
    std::fs::write(out.join("table.md"), table_md(&runs, fsync_rate))?;
    println!(
        "wrote {} and {}",
        out.join("chart.svg").display(),
        out.join("table.md").display()
    );
    Ok(())
}

fn parse_results(text: &str) -> Result<Vec<Run>> {
    let mut lines = text.lines().filter(|l| !l.trim().is_empty());
    let header: Vec<&str> = lines
        .next()
        .ok_or("results.tsv is empty")?
        .split('\t')
        .collect();
    let col = |name: &str| {
        header
            .iter()
            .position(|h| h.trim() == name)
            .ok_or_else(|| format!("results.tsv has no column {name}"))
    };
    let (server, mode, delay, clients) = (
        col("server")?,
        col("mode")?,
        col("commit_delay_us")?,
        col("clients")?,
    );
    let (tps, p50, p99) = (col("tps")?, col("lat_p50_ms")?, col("lat_p99_ms")?);
    let mut runs = Vec::new();
    for (n, line) in lines.enumerate() {
        let f: Vec<&str> = line.split('\t').map(str::trim).collect();
        let get = |i: usize| {
            f.get(i)
                .copied()
                .ok_or_else(|| format!("results.tsv line {}: too few columns", n + 2))
        };
        let num = |i: usize| -> Result<f64> { Ok(get(i)?.parse::<f64>().unwrap_or(f64::NAN)) };
        runs.push(Run {
            server: get(server)?.to_string(),
            mode: get(mode)?.to_string(),
            commit_delay_us: get(delay)?.parse().ok(),
            clients: get(clients)?
                .parse()
                .map_err(|e| format!("results.tsv line {}: clients: {e}", n + 2))?,
            tps: num(tps)?,
            lat_p50_ms: num(p50)?,
            lat_p99_ms: num(p99)?,
        });
    }
    Ok(runs)
}

/// The fixed-delay runs of one server, sorted by delay.
fn fixed(runs: &[Run], server: &str) -> Vec<(u32, Run)> {
    let mut v: Vec<(u32, Run)> = runs
        .iter()
        .filter(|r| r.server == server && r.mode == "fixed")
        .filter_map(|r| r.commit_delay_us.map(|d| (d, r.clone())))
        .collect();
    v.sort_by_key(|(d, _)| *d);
    v
}

fn adaptive(runs: &[Run]) -> Option<&Run> {
    runs.iter()
        .find(|r| r.server == "walnut" && r.mode == "adaptive")
}

fn best(series: &[(u32, Run)]) -> Option<&(u32, Run)> {
    series
        .iter()
        .filter(|(_, r)| r.tps.is_finite())
        .max_by(|a, b| a.1.tps.total_cmp(&b.1.tps))
}

fn draw_chart(runs: &[Run], path: &Path) -> Result<()> {
    let pg = fixed(runs, "pg18");
    let wf = fixed(runs, "walnut");
    let wa = adaptive(runs);
    let x_max = pg
        .iter()
        .chain(&wf)
        .map(|(d, _)| *d)
        .max()
        .unwrap_or(0)
        .max(100);
    let y_max = runs
        .iter()
        .map(|r| r.tps)
        .filter(|t| t.is_finite())
        .fold(0.0, f64::max)
        .max(1.0)
        * 1.15;

    let root = SVGBackend::new(path, (960, 600)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "pgbench simple-update: tps against commit_delay",
            ("sans-serif", 26),
        )
        .margin(20)
        .x_label_area_size(50)
        .y_label_area_size(70)
        .build_cartesian_2d(0f64..f64::from(x_max) * 1.02, 0f64..y_max)?;
    chart
        .configure_mesh()
        .x_desc("commit_delay (µs)")
        .y_desc("transactions per second")
        .axis_desc_style(("sans-serif", 18))
        .label_style(("sans-serif", 15))
        .x_label_formatter(&|x| format!("{x:.0}"))
        .y_label_formatter(&|y| format!("{y:.0}"))
        .light_line_style(WHITE.mix(0.0))
        .draw()?;

    let points = |s: &[(u32, Run)]| -> Vec<(f64, f64)> {
        s.iter()
            .filter(|(_, r)| r.tps.is_finite())
            .map(|(d, r)| (f64::from(*d), r.tps))
            .collect()
    };
    for (series, label, color) in [
        (points(&pg), "pg18 fixed", BLUE),
        (points(&wf), "walnut fixed", RED),
    ] {
        if series.is_empty() {
            continue;
        }
        chart
            .draw_series(LineSeries::new(series.clone(), color.stroke_width(2)))?
            .label(label)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
        chart.draw_series(series.iter().map(|&p| Circle::new(p, 4, color.filled())))?;
    }
    if let Some(a) = wa.filter(|a| a.tps.is_finite()) {
        let green = RGBColor(0, 140, 60);
        chart
            .draw_series(DashedLineSeries::new(
                vec![(0.0, a.tps), (f64::from(x_max), a.tps)],
                10,
                6,
                green.stroke_width(2),
            ))?
            .label(format!("walnut adaptive ({:.0} tps)", a.tps))
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], green.stroke_width(2))
            });
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .label_font(("sans-serif", 16))
        .draw()?;
    root.present()?;
    Ok(())
}

fn table_md(runs: &[Run], fsync_rate: Option<f64>) -> String {
    let pg = fixed(runs, "pg18");
    let wf = fixed(runs, "walnut");
    let wa = adaptive(runs);
    let delays: BTreeSet<u32> = pg.iter().chain(&wf).map(|(d, _)| *d).collect();
    let at = |s: &[(u32, Run)], d: u32| s.iter().find(|(x, _)| *x == d).map(|(_, r)| r.clone());
    let tps = |r: &Option<Run>| {
        r.as_ref()
            .map_or("–".to_string(), |r| format!("{:.0}", r.tps))
    };
    let lat = |r: &Option<Run>| {
        r.as_ref().map_or("–".to_string(), |r| {
            format!("{:.2} / {:.2}", r.lat_p50_ms, r.lat_p99_ms)
        })
    };

    let mut s = String::new();
    s.push_str("| commit_delay (µs) | pg18 tps | pg18 p50 / p99 (ms) | walnut fixed tps | walnut p50 / p99 (ms) |\n");
    s.push_str("|---:|---:|---:|---:|---:|\n");
    for d in delays {
        let (p, w) = (at(&pg, d), at(&wf, d));
        let _ = writeln!(
            s,
            "| {d} | {} | {} | {} | {} |",
            tps(&p),
            lat(&p),
            tps(&w),
            lat(&w)
        );
    }
    let a = wa.cloned();
    let _ = writeln!(s, "| walnut adaptive | – | – | {} | {} |", tps(&a), lat(&a));

    s.push_str("\n| ratio | value |\n|---|---:|\n");
    let ratio = |num: Option<f64>, den: Option<f64>| match (num, den) {
        (Some(n), Some(d)) if d > 0.0 && n.is_finite() => format!("{:.2}", n / d),
        _ => "–".to_string(),
    };
    let a_tps = wa.map(|r| r.tps);
    if let Some((d, r)) = best(&pg) {
        let _ = writeln!(
            s,
            "| walnut adaptive ÷ pg18 best fixed ({d} µs, {:.0} tps) | {} |",
            r.tps,
            ratio(a_tps, Some(r.tps))
        );
    }
    if let Some((d, r)) = best(&wf) {
        let _ = writeln!(
            s,
            "| walnut adaptive ÷ walnut best fixed ({d} µs, {:.0} tps) | {} |",
            r.tps,
            ratio(a_tps, Some(r.tps))
        );
    }
    match (fsync_rate, wa) {
        (Some(rate), Some(a)) => {
            let ceiling = f64::from(a.clients) * rate;
            let _ = writeln!(
                s,
                "| walnut adaptive ÷ ceiling ({} clients × {rate:.0} flushes/s = {ceiling:.0}) | {} |",
                a.clients,
                ratio(a_tps, Some(ceiling))
            );
        }
        _ => s.push_str(
            "\n(no ceiling ratio: test-fsync.txt has no readable buffered fdatasync rate)\n",
        ),
    }
    s
}

/// The buffered fdatasync rate (flushes/s) from `walnut test-fsync` output, read leniently
/// because the format is young. From the first line that mentions both "fdatasync" and
/// "buffered" (and not "direct"), take either
/// - the column under a "flushes/s" heading of an earlier header line (a table), or
/// - a number followed by a per-second unit ("4821 flushes/s", "512/s", "700 ops/sec").
fn buffered_fdatasync_rate(text: &str) -> Option<f64> {
    let mut column = None;
    for line in text.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        let lower = line.to_ascii_lowercase();
        let wanted = lower.contains("fdatasync") && lower.contains("buffered");
        if wanted && !lower.contains("direct") {
            let in_column = column
                .and_then(|i: usize| words.get(i))
                .and_then(|w| w.parse::<f64>().ok());
            if let Some(v) = rate_in_line(line).or(in_column) {
                return Some(v);
            }
        } else if let Some(i) = words
            .iter()
            .position(|w| w.eq_ignore_ascii_case("flushes/s"))
        {
            column = Some(i);
        }
    }
    None
}

fn rate_in_line(line: &str) -> Option<f64> {
    let tokens: Vec<&str> = line
        .split(|c: char| c.is_whitespace() || c == ',' || c == ':' || c == '=')
        .filter(|t| !t.is_empty())
        .collect();
    for (i, t) in tokens.iter().enumerate() {
        let lower = t.to_ascii_lowercase();
        // "4821/s" or "4821flushes/s" in one token.
        if let Some(num) = lower
            .strip_suffix("/s")
            .map(|p| p.trim_end_matches(|c: char| c.is_ascii_alphabetic()))
        {
            if let Ok(v) = num.parse::<f64>() {
                return Some(v);
            }
        }
        let next = tokens
            .get(i + 1)
            .map(|n| n.to_ascii_lowercase())
            .unwrap_or_default();
        let per_second = next.ends_with("/s")
            || next.starts_with("per")
            || next == "ops/sec"
            || next.ends_with("/sec");
        if per_second {
            if let Ok(v) = t.parse::<f64>() {
                return Some(v);
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_rates_leniently() {
        let r = |s: &str| buffered_fdatasync_rate(s);
        assert_eq!(
            r("fdatasync buffered 8kB: 4821 flushes/s (207 µs each)"),
            Some(4821.0)
        );
        assert_eq!(r("buffered write+fdatasync  = 512.5/s"), Some(512.5));
        assert_eq!(r("Buffered fdatasync 700 ops/sec"), Some(700.0));
        assert_eq!(r("direct fdatasync 900 flushes/s"), None);
        assert_eq!(r("test-fsync: not implemented yet"), None);
        let table = "method         I/O        flushes/s     mean µs\n\
                     fsync          buffered       310.3      3285.5\n\
                     fdatasync      buffered       304.0      3289.0\n\
                     fdatasync      direct         268.6      3721.3\n";
        assert_eq!(r(table), Some(304.0));
    }

    #[test]
    fn parses_results() {
        let t = "server\tmode\tcommit_delay_us\tclients\ttps\tlat_avg_ms\tlat_p50_ms\tlat_p99_ms\twrite_iops\n\
                 pg18\tfixed\t0\t10\t1100\t9.1\t8.0\t20.0\t999\n\
                 walnut\tadaptive\tadaptive\t10\t4000\t2.5\t2.0\t6.0\t990\n";
        let runs = parse_results(t).expect("valid tsv");
        assert_eq!(runs.len(), 2);
        assert_eq!(runs[0].commit_delay_us, Some(0));
        assert_eq!(adaptive(&runs).map(|r| r.tps), Some(4000.0));
        let md = table_md(&runs, Some(500.0));
        assert!(
            md.contains("| walnut adaptive ÷ pg18 best fixed (0 µs, 1100 tps) | 3.64 |"),
            "{md}"
        );
        assert!(md.contains("= 5000) | 0.80 |"), "{md}");
    }
}
