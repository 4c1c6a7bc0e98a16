//! Timeline picture of one run, as a hand-written SVG: one row per elector process, its
//! reigns (light: held the lease, dark: acting, from first to last check), every write the
//! resource decided on (green tick: accepted, red cross: rejected by the token), the faults
//! (bands on top, dashed line through the rows) and Redis coming back (blue line).

use crate::checker::{reigns, RunData};
use crate::history::RunEvent;
use std::fmt::Write;

const LEFT: f64 = 120.0;
const WIDTH: f64 = 1400.0;
const ROW: f64 = 24.0;
const FAULT_LANE: f64 = 16.0;

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn fault_color(kind: &str) -> &'static str {
    match kind {
        "kill" => "#d62728",
        "pause" => "#9467bd",
        "partition" => "#8c564b",
        "blackhole" => "#7f7f7f",
        "delay" => "#bcbd22",
        "resign" => "#17becf",
        "restart" | "restart-aof" => "#1f77b4",
        "failover" => "#ff7f0e",
        "clock-jump" => "#e377c2",
        _ => "#444444",
    }
}

const PALETTE: [&str; 6] = [
    "#4c78a8", "#f58518", "#54a24b", "#b279a2", "#e45756", "#72b7b2",
];

/// Render the run; `title` goes on top.
pub fn timeline(data: &RunData, title: &str) -> String {
    let reigns = reigns(data);
    let faults: Vec<&RunEvent> = data
        .run
        .iter()
        .filter(|e| matches!(e, RunEvent::Fault { skipped: None, .. }))
        .collect();
    // Time range: the run start to its end (or the last thing recorded).
    let mut t0 = u64::MAX;
    let mut t1 = 0u64;
    for e in &data.run {
        let t = match e {
            RunEvent::RunStart { t, .. } | RunEvent::RunEnd { t } | RunEvent::RedisUp { t, .. } => {
                *t
            }
            RunEvent::Fault { t_end, .. } => *t_end,
        };
        t0 = t0.min(t);
        t1 = t1.max(t);
    }
    for w in &data.resource {
        t0 = t0.min(w.t);
        t1 = t1.max(w.t);
    }
    if t0 >= t1 {
        t1 = t0.saturating_add(1_000_000_000);
    }
    let span = (t1 - t0) as f64;
    let x = |t: u64| LEFT + (t.saturating_sub(t0) as f64 / span) * (WIDTH - LEFT - 20.0);

    let rows: Vec<&str> = data.electors.iter().map(|(id, _)| id.as_str()).collect();
    let lanes = 2.0;
    let top = 40.0 + lanes * FAULT_LANE + 6.0;
    let height = top + rows.len() as f64 * ROW + 70.0;
    let row_y = |id: &str| {
        rows.iter()
            .position(|r| *r == id)
            .map(|i| top + i as f64 * ROW)
    };

    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" font-family="sans-serif" font-size="11">"#
    );
    let _ = writeln!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="10" y="20" font-size="14" font-weight="bold">{}</text>"#,
        esc(title)
    );
    if let Some(RunEvent::RunStart {
        seed,
        electors,
        ttl_ms,
        grace_ms,
        elector_mode,
        fence,
        ..
    }) = data
        .run
        .iter()
        .find(|e| matches!(e, RunEvent::RunStart { .. }))
    {
        let _ = writeln!(
            s,
            r#"<text x="{}" y="20" font-size="11">seed {seed}, {electors} electors, TTL {ttl_ms} ms, grace {grace_ms} ms, elector {}, resource {}</text>"#,
            LEFT + 330.0,
            esc(elector_mode),
            if *fence { "fences" } else { "does NOT fence" }
        );
    }

    // Row backgrounds and labels.
    for (i, id) in rows.iter().enumerate() {
        let y = top + i as f64 * ROW;
        let fill = if i % 2 == 0 { "#f7f7f7" } else { "#ffffff" };
        let _ = writeln!(
            s,
            r#"<rect x="{LEFT}" y="{y}" width="{}" height="{ROW}" fill="{fill}"/>"#,
            WIDTH - LEFT - 20.0
        );
        let _ = writeln!(
            s,
            r#"<text x="10" y="{}">{}</text>"#,
            y + ROW * 0.65,
            esc(id)
        );
    }

    // Time axis.
    let axis_y = top + rows.len() as f64 * ROW + 4.0;
    let secs = span / 1e9;
    let tick = if secs > 120.0 {
        10.0
    } else if secs > 30.0 {
        5.0
    } else {
        1.0
    };
    let mut k = 0.0;
    while k <= secs && k < 10_000.0 {
        let xx = x(t0 + (k * 1e9) as u64);
        let _ = writeln!(
            s,
            r##"<line x1="{xx:.1}" y1="{top}" x2="{xx:.1}" y2="{axis_y}" stroke="#e0e0e0"/>"##
        );
        let _ = writeln!(
            s,
            r#"<text x="{xx:.1}" y="{}" text-anchor="middle">{k}s</text>"#,
            axis_y + 12.0
        );
        k += tick;
    }

    // Reigns.
    for (i, r) in reigns.iter().enumerate() {
        let Some(y) = row_y(&r.elector) else { continue };
        let color = PALETTE[i % PALETTE.len()];
        let end = r.stop.or(r.last_check).unwrap_or(r.deadline).max(r.grant);
        let (a, b) = (x(r.grant), x(end));
        let _ = writeln!(
            s,
            r#"<rect x="{a:.1}" y="{:.1}" width="{:.1}" height="{:.1}" fill="{color}" fill-opacity="0.25"><title>{} token {}</title></rect>"#,
            y + 3.0,
            (b - a).max(1.0),
            ROW - 6.0,
            esc(&r.elector),
            r.token
        );
        if let (Some(f), Some(l)) = (r.first_check, r.last_check) {
            let (a, b) = (x(f), x(l));
            let _ = writeln!(
                s,
                r#"<rect x="{a:.1}" y="{:.1}" width="{:.1}" height="{:.1}" fill="{color}"/>"#,
                y + 8.0,
                (b - a).max(1.0),
                ROW - 16.0
            );
        }
        // Local deadline of the reign as a thin black tick.
        let d = x(r.deadline);
        let _ = writeln!(
            s,
            r##"<line x1="{d:.1}" y1="{:.1}" x2="{d:.1}" y2="{:.1}" stroke="#000" stroke-width="1"/>"##,
            y + 2.0,
            y + ROW - 2.0
        );
        // Tokens are ~16 digits (server ms x 1000); the last 7 tell neighbours apart.
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{:.1}" font-size="9">…{:07}</text>"#,
            a + 2.0,
            y + 10.0,
            r.token % 10_000_000
        );
    }

    // Writes.
    for w in &data.resource {
        let Some(y) = row_y(&w.writer) else { continue };
        let xx = x(w.t);
        if w.accepted {
            let _ = writeln!(
                s,
                r##"<line x1="{xx:.1}" y1="{:.1}" x2="{xx:.1}" y2="{:.1}" stroke="#2ca02c" stroke-width="0.6"/>"##,
                y + ROW - 7.0,
                y + ROW - 2.0
            );
        } else {
            let _ = writeln!(
                s,
                r##"<g stroke="#d62728" stroke-width="1.5"><line x1="{:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}"/><line x1="{:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}"/><title>rejected: token {} &lt; {}</title></g>"##,
                xx - 3.0,
                y + 4.0,
                xx + 3.0,
                y + 10.0,
                xx - 3.0,
                y + 10.0,
                xx + 3.0,
                y + 4.0,
                w.token,
                w.highest
            );
        }
    }

    // Faults.
    for (i, f) in faults.iter().enumerate() {
        if let RunEvent::Fault {
            kind,
            t,
            t_end,
            target,
            detail,
            ..
        } = f
        {
            let (a, b) = (x(*t), x(*t_end));
            let lane = 40.0 + (i % 2) as f64 * FAULT_LANE;
            let c = fault_color(kind);
            let _ = writeln!(
                s,
                r#"<rect x="{a:.1}" y="{lane}" width="{:.1}" height="{}" fill="{c}" fill-opacity="0.8"><title>{} {} {}</title></rect>"#,
                (b - a).max(2.0),
                FAULT_LANE - 2.0,
                esc(kind),
                esc(target),
                esc(detail)
            );
            let _ = writeln!(
                s,
                r#"<text x="{:.1}" y="{:.1}" font-size="10">{} {}</text>"#,
                a + 2.0,
                lane + 11.0,
                esc(kind),
                esc(target)
            );
            let _ = writeln!(
                s,
                r#"<line x1="{a:.1}" y1="{top}" x2="{a:.1}" y2="{axis_y}" stroke="{c}" stroke-dasharray="4,3"/>"#
            );
            if let Some(y) = row_y(target) {
                let _ = writeln!(
                    s,
                    r#"<rect x="{a:.1}" y="{y}" width="{:.1}" height="{ROW}" fill="{c}" fill-opacity="0.15"/>"#,
                    (b - a).max(2.0)
                );
            }
        }
    }
    for e in &data.run {
        if let RunEvent::RedisUp { t, why } = e {
            let xx = x(*t);
            let _ = writeln!(
                s,
                r#"<line x1="{xx:.1}" y1="{top}" x2="{xx:.1}" y2="{axis_y}" stroke="blue" stroke-width="1.5" stroke-dasharray="1,2"><title>redis up: {}</title></line>"#,
                esc(why)
            );
        }
    }

    // Legend.
    let ly = axis_y + 30.0;
    let _ = writeln!(
        s,
        r##"<rect x="{LEFT}" y="{}" width="20" height="10" fill="#4c78a8" fill-opacity="0.25"/><text x="{}" y="{ly}">holds lease (grant..stop)</text>"##,
        ly - 9.0,
        LEFT + 24.0
    );
    let _ = writeln!(
        s,
        r##"<rect x="{}" y="{}" width="20" height="6" fill="#4c78a8"/><text x="{}" y="{ly}">acting (first..last check)</text>"##,
        LEFT + 190.0,
        ly - 7.0,
        LEFT + 214.0
    );
    let _ = writeln!(
        s,
        r##"<line x1="{0}" y1="{1}" x2="{0}" y2="{2}" stroke="#000"/><text x="{3}" y="{ly}">local deadline</text>"##,
        LEFT + 380.0,
        ly - 10.0,
        ly + 2.0,
        LEFT + 386.0
    );
    let _ = writeln!(
        s,
        r##"<line x1="{0}" y1="{1}" x2="{0}" y2="{2}" stroke="#2ca02c" stroke-width="2"/><text x="{3}" y="{ly}">write accepted</text>"##,
        LEFT + 490.0,
        ly - 10.0,
        ly + 2.0,
        LEFT + 496.0
    );
    let _ = writeln!(
        s,
        r##"<g stroke="#d62728" stroke-width="1.5"><line x1="{0}" y1="{1}" x2="{2}" y2="{3}"/><line x1="{0}" y1="{3}" x2="{2}" y2="{1}"/></g><text x="{4}" y="{ly}">write rejected (fenced)</text>"##,
        LEFT + 597.0,
        ly - 8.0,
        LEFT + 603.0,
        ly - 2.0,
        LEFT + 608.0
    );
    let _ = writeln!(
        s,
        r##"<line x1="{0}" y1="{1}" x2="{0}" y2="{2}" stroke="blue" stroke-dasharray="1,2" stroke-width="1.5"/><text x="{3}" y="{ly}">redis up</text>"##,
        LEFT + 750.0,
        ly - 10.0,
        ly + 2.0,
        LEFT + 756.0
    );
    let _ = writeln!(
        s,
        r#"<text x="{}" y="{ly}">faults: coloured bands on top</text>"#,
        LEFT + 830.0
    );
    s.push_str("</svg>\n");
    s
}
