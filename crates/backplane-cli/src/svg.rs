//! A picture of the partitioned graph: one box per layer coloured by backend, arrows for
//! tensors, edges between backends drawn dashed. Plain SVG text, no external program.

use backplane::core::TensorKind;
use backplane::runtime::OptimizedNetwork;
use std::collections::HashMap;
use std::fmt::Write;

const PALETTE: [&str; 8] = [
    "#8ecae6", "#ffb703", "#90be6d", "#f4a261", "#cdb4db", "#e76f51", "#a8dadc", "#f6bd60",
];
const BOX_W: f64 = 190.0;
const BOX_H: f64 = 46.0;
const GAP_X: f64 = 30.0;
const GAP_Y: f64 = 40.0;
const MARGIN: f64 = 20.0;

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// Render the optimized network as SVG.
pub fn render(optimized: &OptimizedNetwork) -> String {
    let net = optimized.network();
    let layers = net.layers();
    // Layer depth = longest path from an input; layers are already in topological order.
    let mut depth = vec![0usize; layers.len()];
    for (i, l) in layers.iter().enumerate() {
        for t in &l.inputs {
            if let TensorKind::Produced { layer, .. } = net.tensor(*t).kind {
                depth[i] = depth[i].max(depth[layer.0] + 1);
            }
        }
    }
    let mut rows: HashMap<usize, Vec<usize>> = HashMap::new();
    for (i, d) in depth.iter().enumerate() {
        rows.entry(*d).or_default().push(i);
    }
    let widest = rows.values().map(Vec::len).max().unwrap_or(1);
    let legend_h = 30.0;
    let width = MARGIN * 2.0 + widest as f64 * (BOX_W + GAP_X);
    let height = MARGIN * 2.0 + legend_h + (rows.len() as f64) * (BOX_H + GAP_Y);
    let mut pos = vec![(0.0, 0.0); layers.len()];
    for (d, members) in &rows {
        let row_w = members.len() as f64 * (BOX_W + GAP_X) - GAP_X;
        let x0 = (width - row_w) / 2.0;
        for (k, &i) in members.iter().enumerate() {
            pos[i] = (
                x0 + k as f64 * (BOX_W + GAP_X),
                MARGIN + legend_h + *d as f64 * (BOX_H + GAP_Y),
            );
        }
    }
    let backends: Vec<String> = optimized
        .layer_counts()
        .iter()
        .map(|(b, _)| b.to_string())
        .collect();
    let colour =
        |b: &str| PALETTE[backends.iter().position(|x| x == b).unwrap_or(0) % PALETTE.len()];

    let mut svg = String::new();
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0}" height="{height:.0}" viewBox="0 0 {width:.0} {height:.0}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(
        svg,
        r##"<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="6" markerHeight="6" orient="auto"><path d="M0,0 L10,5 L0,10 z" fill="#555"/></marker></defs>"##
    );
    let _ = writeln!(svg, r#"<rect width="100%" height="100%" fill="white"/>"#);
    for (k, b) in backends.iter().enumerate() {
        let x = MARGIN + k as f64 * 140.0;
        let _ = writeln!(
            svg,
            r##"<rect x="{x:.0}" y="{MARGIN:.0}" width="14" height="14" fill="{}" stroke="#333"/><text x="{:.0}" y="{:.0}">{}</text>"##,
            colour(b),
            x + 20.0,
            MARGIN + 12.0,
            escape(b)
        );
    }
    // Edges first, so boxes draw over them.
    for (i, l) in layers.iter().enumerate() {
        for t in &l.inputs {
            if let TensorKind::Produced { layer, .. } = net.tensor(*t).kind {
                let (x1, y1) = (pos[layer.0].0 + BOX_W / 2.0, pos[layer.0].1 + BOX_H);
                let (x2, y2) = (pos[i].0 + BOX_W / 2.0, pos[i].1);
                let crossing = optimized.assignment()[layer.0] != optimized.assignment()[i];
                let style = if crossing {
                    r##" stroke="#d62828" stroke-dasharray="6 3""##
                } else {
                    r##" stroke="#555""##
                };
                let _ = writeln!(
                    svg,
                    r#"<line x1="{x1:.1}" y1="{y1:.1}" x2="{x2:.1}" y2="{y2:.1}"{style} marker-end="url(#arrow)"><title>{}{}</title></line>"#,
                    escape(&net.tensor(*t).name),
                    if crossing { " (crosses backends)" } else { "" }
                );
            }
        }
    }
    for (i, l) in layers.iter().enumerate() {
        let (x, y) = pos[i];
        let b = optimized.assignment()[i].as_str();
        let _ = writeln!(
            svg,
            r##"<g><title>{name} ({op}) on {b}</title><rect x="{x:.1}" y="{y:.1}" width="{BOX_W}" height="{BOX_H}" rx="6" fill="{}" stroke="#333"/><text x="{:.1}" y="{:.1}" text-anchor="middle" font-weight="bold">{name}</text><text x="{:.1}" y="{:.1}" text-anchor="middle">{op} · {b}</text></g>"##,
            colour(b),
            x + BOX_W / 2.0,
            y + 19.0,
            x + BOX_W / 2.0,
            y + 36.0,
            name = escape(&l.name),
            op = escape(l.op.name()),
        );
    }
    svg.push_str("</svg>\n");
    svg
}
