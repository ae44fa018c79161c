//! The peers' table and chart: every row measured beside a peer library (`Row::peer`),
//! backstop's figure and the peer's side by side, what each drain costs per 100 000 tasks
//! (peak RSS, CPU seconds of the process(es), CPU seconds of the database server), and an
//! SVG chart of the same figures for the guide, one pair of bars per comparison.

use crate::sys::Row;

/// The rows beside a peer, in the order they were measured.
fn peer_rows(rows: &[Row]) -> impl Iterator<Item = (&Row, &str)> {
    rows.iter()
        .filter_map(|r| r.peer.as_deref().map(|p| (r, p)))
}

/// What a peer row measures, without the peer's name: "drain, each at its best" or the
/// scenario's text after `vs <peer>: `.
fn work(r: &Row) -> String {
    if r.scenario.contains(" at its best: ") {
        return "drain, each at its best".into();
    }
    match r.scenario.split_once(": ") {
        Some((_, what)) => what.to_owned(),
        None => r.scenario.clone(),
    }
}

fn rate(tps: f64) -> String {
    let n = tps.round() as u64;
    let s = n.to_string();
    // thousands with a thin space, as the guide writes them
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(' ');
        }
        out.push(c);
    }
    format!("{out}/s")
}

fn latency(l: [f64; 4]) -> String {
    format!("{:.2} / {:.2} ms", l[0], l[2])
}

/// One side's figure: a rate, or p50 / p99.
fn figure(tps: Option<f64>, lat: Option<[f64; 4]>) -> String {
    match (tps, lat) {
        (Some(t), _) => rate(t),
        (None, Some(l)) => latency(l),
        _ => "–".into(),
    }
}

/// How far backstop leads (> 1) or trails (< 1): the rate's ratio, or the peer's latency
/// over ours at p50 and p99.
fn lead(r: &Row) -> String {
    match (r.tps, r.base_tps, r.lat, r.base_lat) {
        (Some(a), Some(b), _, _) if b > 0.0 => format!("{:.2}×", a / b),
        (_, _, Some(a), Some(b)) if a[0] > 0.0 && a[2] > 0.0 => {
            format!("{:.2}× / {:.2}×", b[0] / a[0], b[2] / a[2])
        }
        _ => "–".into(),
    }
}

/// The markdown section: the peers' table, or nothing without peer rows.
pub fn markdown(rows: &[Row]) -> String {
    if peer_rows(rows).next().is_none() {
        return String::new();
    }
    let mut s = String::from(
        "\n## Peers\n\nbackstop beside each peer on the same database in the same run. \
         Lead: backstop's rate over the peer's, or the peer's latency over backstop's at \
         p50 / p99 (above 1: backstop ahead). Cost per 100 000 tasks of each drain: the \
         process's (processes') peak RSS and CPU seconds, and the database server's CPU \
         seconds (SQLite runs in the process).\n\n\
         | backend | work | peer | backstop | peer's | lead | peak RSS MB (backstop / peer) | CPU s per 100k (backstop / peer) | server CPU s per 100k (backstop / peer) |\n\
         |---|---|---|---:|---:|---:|---:|---:|---:|\n",
    );
    for (r, peer) in peer_rows(rows) {
        let per = |cpu: f64, tasks: usize| {
            if tasks == 0 {
                "–".to_owned()
            } else {
                format!("{:.2}", cpu * 100_000.0 / tasks as f64)
            }
        };
        let (rss, cpu, server) = match &r.cost {
            Some(c) => (
                format!("{:.0} / {:.0}", r.rss_mb, c.peer_rss_mb),
                format!(
                    "{} / {}",
                    per(r.cpu_s, c.tasks),
                    per(c.peer_cpu_s, c.peer_tasks)
                ),
                if r.backend == "sqlite" {
                    "–".to_owned()
                } else {
                    format!(
                        "{} / {}",
                        per(c.server_cpu_s, c.tasks),
                        per(c.peer_server_cpu_s, c.peer_tasks)
                    )
                },
            ),
            None => ("–".into(), "–".into(), "–".into()),
        };
        s.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
            r.backend,
            work(r),
            peer,
            figure(r.tps, r.lat),
            figure(r.base_tps, r.base_lat),
            lead(r),
            rss,
            cpu,
            server,
        ));
    }
    s
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

const WIDTH: f64 = 860.0;
const LABEL: f64 = 190.0;
const BAR: f64 = 16.0;
const OURS: &str = "#1f6feb";
const THEIRS: &str = "#8c959f";

/// One side of a panel: its name, colour, bars (width, opacity) and value.
type Side<'a> = (&'a str, &'a str, Vec<(f64, f64)>, String);

/// One side's line of a panel at height `y`: its name, its bars (width, opacity: the
/// longest first, each at least a pixel) in `colour`, and its value after the longest.
fn bar_row(y: f64, who: &str, colour: &str, bars: &[(f64, f64)], value: &str) -> String {
    let mut s = format!(
        "<text x=\"{}\" y=\"{}\" class=\"l\">{}</text>",
        LABEL - 8.0,
        y + 12.5,
        esc(who)
    );
    for &(w, opacity) in bars {
        let opacity = if opacity < 1.0 {
            format!(" fill-opacity=\"{opacity}\"")
        } else {
            String::new()
        };
        s.push_str(&format!(
            "<rect x=\"{LABEL}\" y=\"{y}\" width=\"{:.1}\" height=\"{BAR}\" fill=\"{colour}\"{opacity}/>",
            w.max(1.0)
        ));
    }
    let longest = bars.iter().map(|b| b.0.max(1.0)).fold(0.0, f64::max);
    s.push_str(&format!(
        "<text x=\"{:.1}\" y=\"{}\" class=\"v\">{}</text>\n",
        LABEL + longest + 6.0,
        y + 12.5,
        esc(value)
    ));
    s
}

/// The chart: one panel per comparison, backstop's bar above the peer's, each panel on
/// its own scale (a rate: longer is better; a latency, p50 solid and p99 light: shorter
/// is better). `None` without peer rows.
pub fn svg(rows: &[Row], title: &str) -> Option<String> {
    let mut panels: Vec<(&Row, &str)> = peer_rows(rows)
        .filter(|(r, _)| {
            matches!((r.tps, r.base_tps), (Some(_), Some(_)))
                || matches!((r.lat, r.base_lat), (Some(_), Some(_)))
        })
        .collect();
    if panels.is_empty() {
        return None;
    }
    // the drains first, then the latencies, then the rest (batch inserts)
    panels.sort_by_key(|(r, _)| match (&r.cost, r.lat) {
        (Some(_), _) => 0,
        (None, Some(_)) => 1,
        _ => 2,
    });
    let mut body = format!(
        "<text x=\"10\" y=\"42\">backstop <tspan fill=\"{OURS}\">■</tspan>, the peer \
         <tspan fill=\"{THEIRS}\">■</tspan>; each comparison on its own scale. Rates: longer \
         is better. Latencies: p50 solid, p99 light, shorter is better.</text>\n"
    );
    let mut y = 70.0;
    let span = WIDTH - LABEL - 200.0;
    for (r, peer) in &panels {
        body.push_str(&format!(
            "<text x=\"10\" y=\"{y}\" class=\"h\">{} · {} · vs {} — backstop {}</text>\n",
            esc(&r.backend),
            esc(&work(r)),
            esc(peer),
            esc(&lead(r)),
        ));
        y += 8.0;
        // each side's bars (width, opacity), longest first, and its value
        let sides: Vec<Side> = match (r.tps, r.base_tps) {
            (Some(a), Some(b)) => {
                let max = a.max(b).max(1e-9);
                [("backstop", a, OURS), (*peer, b, THEIRS)]
                    .into_iter()
                    .map(|(who, v, colour)| (who, colour, vec![(v / max * span, 1.0)], rate(v)))
                    .collect()
            }
            _ => {
                let (Some(a), Some(b)) = (r.lat, r.base_lat) else {
                    continue;
                };
                let max = a[2].max(b[2]).max(1e-9);
                [("backstop", a, OURS), (*peer, b, THEIRS)]
                    .into_iter()
                    .map(|(who, l, colour)| {
                        let bars = vec![(l[2] / max * span, 0.35), (l[0] / max * span, 1.0)];
                        (who, colour, bars, format!("{} (p50 / p99)", latency(l)))
                    })
                    .collect()
            }
        };
        for (who, colour, bars, value) in sides {
            body.push_str(&bar_row(y, who, colour, &bars, &value));
            y += BAR + 4.0;
        }
        y += 22.0;
    }
    let height = y;
    Some(format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" height=\"{height}\" \
         viewBox=\"0 0 {WIDTH} {height}\" font-family=\"sans-serif\" font-size=\"12\">\n\
         <style>.t{{font-size:15px;font-weight:bold}} .h{{font-size:12px;font-weight:bold}} \
         .l{{text-anchor:end}} .v{{fill:#24292f}}</style>\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
         <text x=\"10\" y=\"24\" class=\"t\">{}</text>\n{body}</svg>\n",
        esc(title)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::Cost;

    fn rows() -> Vec<Row> {
        vec![
            Row {
                backend: "postgres".into(),
                scenario: "drain 1000, 1 engine(s)".into(),
                tps: Some(1.0),
                base_tps: Some(1.0),
                ..Row::default()
            },
            Row {
                backend: "postgres".into(),
                scenario: "vs River (Rust) 0.5: one job at a time, back to back".into(),
                lat: Some([0.5, 0.8, 1.0, 2.0]),
                base_lat: Some([2.0, 3.0, 4.0, 5.0]),
                peer: Some("River (Rust) 0.5".into()),
                ..Row::default()
            },
            Row {
                backend: "postgres".into(),
                scenario: "vs River (Rust) 0.5 at its best: 10000 jobs, 1 client(s)".into(),
                tps: Some(40_000.0),
                base_tps: Some(20_000.0),
                rss_mb: 20.0,
                cpu_s: 0.5,
                peer: Some("River (Rust) 0.5".into()),
                cost: Some(Cost {
                    tasks: 100_000,
                    server_cpu_s: 3.0,
                    peer_tasks: 10_000,
                    peer_rss_mb: 47.0,
                    peer_cpu_s: 0.2,
                    peer_server_cpu_s: 0.6,
                }),
                ..Row::default()
            },
        ]
    }

    #[test]
    fn the_table_has_a_line_per_peer_row_with_the_lead_and_the_cost_per_100k() {
        let md = markdown(&rows());
        let lines: Vec<&str> = md.lines().filter(|l| l.starts_with("| postgres")).collect();
        assert_eq!(lines.len(), 2, "{md}");
        assert_eq!(
            lines[0],
            "| postgres | one job at a time, back to back | River (Rust) 0.5 | 0.50 / 1.00 ms \
             | 2.00 / 4.00 ms | 4.00× / 4.00× | – | – | – |"
        );
        // the peer's 0.2 s over 10 000 tasks is 2 s per 100 000
        assert_eq!(
            lines[1],
            "| postgres | drain, each at its best | River (Rust) 0.5 | 40 000/s | 20 000/s \
             | 2.00× | 20 / 47 | 0.50 / 2.00 | 3.00 / 6.00 |"
        );
    }

    #[test]
    fn the_chart_draws_a_pair_of_bars_per_comparison_the_drains_first() {
        let svg = svg(&rows(), "t").expect("a chart");
        assert!(svg.starts_with("<svg"), "{svg}");
        let drain = svg.find("drain, each at its best").expect("the drain");
        let latency = svg.find("back to back").expect("the latency");
        assert!(drain < latency, "drains first");
        // the drain's two bars (backstop's full width, the peer's half) and the
        // latency's four (p99 light and p50 for each side)
        assert_eq!(svg.matches("<rect x=").count(), 6, "{svg}");
        assert!(
            svg.contains("width=\"470.0\""),
            "backstop's rate fills the span: {svg}"
        );
        assert!(
            svg.contains("width=\"235.0\""),
            "the peer's half of it: {svg}"
        );
    }

    #[test]
    fn without_peer_rows_there_is_neither_table_nor_chart() {
        let plain = vec![rows().remove(0)];
        assert_eq!(markdown(&plain), "");
        assert!(svg(&plain, "t").is_none());
    }
}
