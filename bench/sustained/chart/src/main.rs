//! Draws what `bench/sustained/run.sh` sampled.
//!
//! Input: `OUT/samples.tsv`, a header, then `server<TAB>second<TAB>data_mb<TAB>xact_kb<TAB>tps`
//! lines (tps empty for the sample taken after the load).
//!
//! Output: `OUT/chart.svg`, two panels against the minute of the run, one line per server: the
//! data size (MB, its relation files) above, the tps of each sampling interval below.
//!
//! The SVG uses no font files (plotters without `ttf`): the viewer renders the text.
#![forbid(unsafe_code)]

use plotters::prelude::*;
use std::error::Error;
use std::path::{Path, PathBuf};

type Result<T> = std::result::Result<T, Box<dyn Error>>;

/// One server's samples: (minute, data MB, tps if measured).
struct Series {
    server: String,
    points: Vec<(f64, f64, Option<f64>)>,
}

fn main() {
    let mut args = std::env::args_os().skip(1);
    let Some(out) = args.next().map(PathBuf::from) else {
        eprintln!("usage: sustained-chart OUT_DIR [TITLE]   (reads OUT_DIR/samples.tsv)");
        std::process::exit(2);
    };
    let title = args
        .next()
        .map(|t| t.to_string_lossy().into_owned())
        .unwrap_or_else(|| "pgbench tpcb-like: data size and tps".to_string());
    if let Err(e) = run(&out, &title) {
        eprintln!("sustained-chart: {e}");
        std::process::exit(1);
    }
}

fn run(out: &Path, title: &str) -> Result<()> {
    let path = out.join("samples.tsv");
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let series = parse(&text);
    if series.is_empty() {
        return Err("samples.tsv holds no samples".into());
    }
    draw(&series, title, &out.join("chart.svg"))?;
    println!("wrote {}", out.join("chart.svg").display());
    Ok(())
}

fn parse(text: &str) -> Vec<Series> {
    let mut series: Vec<Series> = Vec::new();
    for line in text.lines().skip(1) {
        let f: Vec<&str> = line.split('\t').map(str::trim).collect();
        let (Some(server), Some(sec), Some(mb)) = (
            f.first(),
            f.get(1).and_then(|s| s.parse::<f64>().ok()),
            f.get(2).and_then(|s| s.parse::<f64>().ok()),
        ) else {
            continue;
        };
        let tps = f.get(4).and_then(|s| s.parse::<f64>().ok());
        let point = (sec / 60.0, mb, tps);
        match series.iter_mut().find(|s| s.server == *server) {
            Some(s) => s.points.push(point),
            None => series.push(Series {
                server: (*server).to_string(),
                points: vec![point],
            }),
        }
    }
    series
}

fn color_of(server: &str) -> RGBColor {
    match server {
        "pg18" => RGBColor(30, 90, 200),
        "walnut" => RGBColor(200, 40, 40),
        _ => RGBColor(0, 140, 60),
    }
}

fn draw(series: &[Series], title: &str, path: &Path) -> Result<()> {
    let x_max = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.0))
        .fold(1.0, f64::max);
    let mb_max = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1))
        .fold(1.0, f64::max);
    let tps_max = series
        .iter()
        .flat_map(|s| s.points.iter().filter_map(|p| p.2))
        .fold(1.0, f64::max);
    let root = SVGBackend::new(path, (1200, 900)).into_drawing_area();
    root.fill(&WHITE)?;
    let root = root.titled(title, ("sans-serif", 24))?;
    let (top, bottom) = root.split_vertically(440);
    for (area, what) in [(&top, "data size (MB)"), (&bottom, "tps (per sampling interval)")] {
        let size = what.starts_with("data");
        let y_top = if size { mb_max * 1.25 } else { tps_max * 1.25 };
        let mut chart = ChartBuilder::on(area)
            .margin(20)
            .x_label_area_size(45)
            .y_label_area_size(70)
            .build_cartesian_2d(0f64..x_max, 0f64..y_top)?;
        chart
            .configure_mesh()
            .x_desc("minute of the run")
            .y_desc(what)
            .axis_desc_style(("sans-serif", 17))
            .label_style(("sans-serif", 14))
            .x_label_formatter(&|x| format!("{x:.0}"))
            .y_label_formatter(&|y| format!("{y:.0}"))
            .light_line_style(WHITE.mix(0.0))
            .draw()?;
        for s in series {
            let color = color_of(&s.server);
            let pts: Vec<(f64, f64)> = s
                .points
                .iter()
                .filter_map(|&(m, mb, tps)| if size { Some((m, mb)) } else { tps.map(|t| (m, t)) })
                .collect();
            chart
                .draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))?
                .label(s.server.clone())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
                });
            chart.draw_series(pts.into_iter().map(|p| Circle::new(p, 3, color.filled())))?;
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .background_style(WHITE.mix(0.9))
            .border_style(BLACK)
            .label_font(("sans-serif", 15))
            .draw()?;
    }
    root.present()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_samples() {
        let s = parse("server\tsecond\tdata_mb\txact_kb\ttps\npg18\t0\t300\t8\t\npg18\t30\t310\t8\t900\nwalnut\t0\t145\t8\t\n");
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].points, vec![(0.0, 300.0, None), (0.5, 310.0, Some(900.0))]);
        assert_eq!(s[1].server, "walnut");
    }
}
