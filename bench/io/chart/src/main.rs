//! Draws the per-second throughput that `bench/io/nostall.sh` measured.
//!
//! Input:
//! - `OUT/tps.csv`: a header `second,SERVER,SERVER...` (`pg18`, `walnut`), then one line per
//!   second of the run with each server's committed transactions in that second (an empty cell:
//!   that server did not run).
//! - `OUT/checkpoints.tsv` (optional): a header, then `server<TAB>second<TAB>event` lines, the
//!   second of the run at which a checkpoint started or completed.
//!
//! Output: `OUT/chart.svg`, tps against the second of the run, one line per server, each with a
//! dashed line at a quarter of its mean (the "no second below a quarter of the mean"),
//! and a triangle above the data for every completed checkpoint.
//!
//! The SVG uses no font files (plotters without `ttf`): the viewer renders the text.
#![forbid(unsafe_code)]

use plotters::prelude::*;
use std::error::Error;
use std::path::{Path, PathBuf};

type Result<T> = std::result::Result<T, Box<dyn Error>>;

/// One server's tps per second (index 0 is second 1).
struct Series {
    server: String,
    tps: Vec<Option<f64>>,
}

impl Series {
    fn mean(&self) -> f64 {
        let v: Vec<f64> = self.tps.iter().flatten().copied().collect();
        if v.is_empty() {
            0.0
        } else {
            v.iter().sum::<f64>() / v.len() as f64
        }
    }
}

fn main() {
    let mut args = std::env::args_os().skip(1);
    let Some(out) = args.next().map(PathBuf::from) else {
        eprintln!("usage: io-chart OUT_DIR [TITLE]   (reads OUT_DIR/tps.csv)");
        std::process::exit(2);
    };
    let title = args
        .next()
        .map(|t| t.to_string_lossy().into_owned())
        .unwrap_or_else(|| "pgbench simple-update: tps per second".to_string());
    if let Err(e) = run(&out, &title) {
        eprintln!("io-chart: {e}");
        std::process::exit(1);
    }
}

fn run(out: &Path, title: &str) -> Result<()> {
    let csv = out.join("tps.csv");
    let text = std::fs::read_to_string(&csv).map_err(|e| format!("{}: {e}", csv.display()))?;
    let series = parse_tps(&text)?;
    let checkpoints = std::fs::read_to_string(out.join("checkpoints.tsv"))
        .map(|t| parse_checkpoints(&t))
        .unwrap_or_default();
    draw(&series, &checkpoints, title, &out.join("chart.svg"))?;
    println!("wrote {}", out.join("chart.svg").display());
    Ok(())
}

fn parse_tps(text: &str) -> Result<Vec<Series>> {
    let mut lines = text.lines().filter(|l| !l.trim().is_empty());
    let header: Vec<&str> = lines.next().ok_or("tps.csv is empty")?.split(',').collect();
    if header.first().map(|h| h.trim()) != Some("second") {
        return Err("tps.csv: the first column must be `second`".into());
    }
    let mut series: Vec<Series> = header[1..]
        .iter()
        .map(|h| Series {
            server: h.trim().to_string(),
            tps: Vec::new(),
        })
        .collect();
    for line in lines {
        let f: Vec<&str> = line.split(',').collect();
        for (i, s) in series.iter_mut().enumerate() {
            s.tps
                .push(f.get(i + 1).and_then(|v| v.trim().parse::<f64>().ok()));
        }
    }
    series.retain(|s| s.tps.iter().any(Option::is_some));
    Ok(series)
}

/// (server, second) of every completed checkpoint.
fn parse_checkpoints(text: &str) -> Vec<(String, f64)> {
    text.lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split('\t').map(str::trim).collect();
            match f.as_slice() {
                [server, second, "complete", ..] => {
                    second.parse().ok().map(|s| ((*server).to_string(), s))
                }
                _ => None,
            }
        })
        .collect()
}

fn color_of(server: &str) -> RGBColor {
    match server {
        "pg18" => RGBColor(30, 90, 200),
        "walnut" => RGBColor(200, 40, 40),
        _ => RGBColor(0, 140, 60),
    }
}

fn draw(series: &[Series], checkpoints: &[(String, f64)], title: &str, path: &Path) -> Result<()> {
    let x_max = series.iter().map(|s| s.tps.len()).max().unwrap_or(1).max(1) as f64;
    let y_data = series
        .iter()
        .flat_map(|s| s.tps.iter().flatten())
        .fold(0.0, |a: f64, &b| a.max(b))
        .max(1.0);
    // Room above the data: checkpoint marks just over it, the legend above them.
    let y_top = y_data * 1.35;

    let root = SVGBackend::new(path, (1200, 600)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 24))
        .margin(20)
        .x_label_area_size(50)
        .y_label_area_size(70)
        .build_cartesian_2d(0f64..x_max + 1.0, 0f64..y_top)?;
    chart
        .configure_mesh()
        .x_desc("second of the run")
        .y_desc("transactions per second")
        .axis_desc_style(("sans-serif", 18))
        .label_style(("sans-serif", 15))
        .x_label_formatter(&|x| format!("{x:.0}"))
        .y_label_formatter(&|y| format!("{y:.0}"))
        .light_line_style(WHITE.mix(0.0))
        .draw()?;

    for s in series {
        let color = color_of(&s.server);
        let mean = s.mean();
        let points: Vec<(f64, f64)> = s
            .tps
            .iter()
            .enumerate()
            .filter_map(|(i, t)| t.map(|t| (i as f64 + 1.0, t)))
            .collect();
        let n_ckpt = checkpoints.iter().filter(|(c, _)| *c == s.server).count();
        chart
            .draw_series(LineSeries::new(points, color.stroke_width(1)))?
            .label(format!(
                "{} (mean {mean:.0} tps, {n_ckpt} checkpoints completed)",
                s.server
            ))
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
        chart.draw_series(DashedLineSeries::new(
            vec![(0.0, mean / 4.0), (x_max + 1.0, mean / 4.0)],
            8,
            6,
            color.mix(0.6).stroke_width(1),
        ))?;
        chart.draw_series(
            checkpoints
                .iter()
                .filter(|(c, _)| *c == s.server)
                .map(|(_, sec)| TriangleMarker::new((*sec, y_data * 1.06), 6, color.filled())),
        )?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .label_font(("sans-serif", 15))
        .draw()?;
    root.present()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_inputs() {
        let s = parse_tps("second,pg18,walnut\n1,500,\n2,600,\n").expect("valid csv");
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].server, "pg18");
        assert_eq!(s[0].mean(), 550.0);
        let c = parse_checkpoints("server\tsecond\tevent\nwalnut\t31\tcomplete\npg18\t2\tstart\n");
        assert_eq!(c, vec![("walnut".to_string(), 31.0)]);
    }
}
