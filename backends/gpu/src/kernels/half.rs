//! The f16 variants of the compute kernels, generated from their one WGSL source.
//!
//! Every compute kernel is written once, for tensors bound as `array<f32>`, computing in f32.
//! Its f16 variant takes the scalar type of each layer tensor as a parameter: the tensors
//! stored as f16 are bound as `array<f16>` (under `enable f16;`, which needs the device
//! feature `SHADER_F16`), each load of one of them is widened (`f32(x0[k])`) and each store
//! narrowed once (`y[k] = f16(value);`). Everything between (workgroup tiles, accumulators,
//! row reductions, split-K's partial sums in their scratch buffer) stays f32, so an f16
//! layer accumulates in f32 and rounds once per output element.
//!
//! The rewrite knows the shapes the kernels of this crate use: a tensor binding is declared
//! on its own line as `@group(0) @binding(N) var<storage, MODE> NAME: array<f32>;`; its
//! elements are read as `NAME[index]` and written by a whole statement `NAME[index] = value;`.
//! Bindings that are not layer tensors (parameters, scratch, the status word) keep their
//! types.

use super::{Bind, Step};

/// The WGSL directive an f16 kernel starts with.
const ENABLE: &str = "enable f16;\n";

/// `step` with each layer tensor for which `half` answers true stored as f16 (see the module
/// documentation); unchanged when it binds none of them as `array<f32>` (the kernels of
/// [`super::typed`] read f16 tensors as 16-bit words and need no variant).
pub fn specialize(step: Step, half: impl Fn(Bind) -> bool) -> Result<Step, String> {
    let mut names = Vec::new();
    let mut decls = String::new();
    for line in step.source.lines() {
        match declared(line) {
            Some((binding, name)) if binding > 0 => {
                let bind = step.binds.get(binding - 1).copied().ok_or_else(|| {
                    format!("a kernel declares binding {binding} but binds fewer tensors")
                })?;
                if matches!(bind, Bind::Input(_) | Bind::Output(_)) && half(bind) {
                    names.push(name.to_string());
                    decls.push_str(&line.replace("array<f32>", "array<f16>"));
                    decls.push('\n');
                    continue;
                }
            }
            _ => {}
        }
        decls.push_str(line);
        decls.push('\n');
    }
    if names.is_empty() {
        return Ok(step);
    }
    let source = format!("{ENABLE}{}", rewrite(&decls, &names)?);
    Ok(Step { source, ..step })
}

/// The binding number and name of a tensor declaration line of element type f32.
fn declared(line: &str) -> Option<(usize, &str)> {
    let rest = line.trim().strip_prefix("@group(0) @binding(")?;
    let (number, rest) = rest.split_once(')')?;
    let binding = number.parse().ok()?;
    let (_, rest) = rest.split_once('>')?;
    let (name, ty) = rest.trim().split_once(':')?;
    (ty.trim() == "array<f32>;").then_some((binding, name.trim()))
}

fn is_ident(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

/// Widen every load of the tensors `names` and narrow every store (see [`specialize`]).
fn rewrite(source: &str, names: &[String]) -> Result<String, String> {
    let bytes = source.as_bytes();
    let mut out = String::with_capacity(source.len() + 256);
    let mut at = 0;
    let mut copied = 0;
    while at < bytes.len() {
        let boundary = at == 0 || !(is_ident(bytes[at - 1]) || bytes[at - 1] == b'.');
        let found = names.iter().find(|n| {
            source[at..].starts_with(n.as_str()) && bytes.get(at + n.len()) == Some(&b'[')
        });
        let Some(name) = found.filter(|_| boundary) else {
            at += 1;
            continue;
        };
        let open = at + name.len();
        let close = matching(bytes, open, b'[', b']')
            .ok_or_else(|| format!("an unclosed index of {name} in a kernel"))?;
        let mut next = close + 1;
        while bytes.get(next).is_some_and(u8::is_ascii_whitespace) {
            next += 1;
        }
        out.push_str(&source[copied..at]);
        let access = format!("{name}[{}]", rewrite(&source[open + 1..close], names)?);
        let after = (bytes.get(next).copied(), bytes.get(next + 1).copied());
        match after {
            (Some(b'='), second) if second != Some(b'=') => {
                let end = statement_end(bytes, next + 1)
                    .ok_or_else(|| format!("a store to {name} without its ';' in a kernel"))?;
                let value = rewrite(source[next + 1..end].trim(), names)?;
                out.push_str(&format!("{access} = f16({value})"));
                copied = end;
                at = end;
            }
            (Some(b'+' | b'-' | b'*' | b'/'), Some(b'=')) => {
                return Err(format!(
                    "a compound store to {name} has no f16 variant (write `{name}[k] = ...;`)"
                ));
            }
            _ => {
                out.push_str(&format!("f32({access})"));
                copied = close + 1;
                at = close + 1;
            }
        }
    }
    out.push_str(&source[copied..]);
    Ok(out)
}

/// The index of the bracket closing the one at `open`.
fn matching(bytes: &[u8], open: usize, left: u8, right: u8) -> Option<usize> {
    let mut depth = 0usize;
    for (k, &c) in bytes.iter().enumerate().skip(open) {
        if c == left {
            depth += 1;
        } else if c == right {
            depth = depth.checked_sub(1)?;
            if depth == 0 {
                return Some(k);
            }
        }
    }
    None
}

/// The index of the `;` ending the statement from `from`, outside parentheses.
fn statement_end(bytes: &[u8], from: usize) -> Option<usize> {
    let mut depth = 0i32;
    for (k, &c) in bytes.iter().enumerate().skip(from) {
        match c {
            b'(' | b'[' => depth += 1,
            b')' | b']' => depth -= 1,
            b';' if depth == 0 => return Some(k),
            _ => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(source: &str, binds: Vec<Bind>) -> Step {
        Step {
            source: source.to_string(),
            params: vec![],
            binds,
            groups: [1, 1, 1],
        }
    }

    #[test]
    fn loads_widen_stores_narrow_and_other_bindings_keep_their_type() {
        let src = "@group(0) @binding(0) var<storage, read> p: array<u32>;
@group(0) @binding(1) var<storage, read> x0: array<f32>;
@group(0) @binding(2) var<storage, read> x1: array<f32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;
fn main() {
    let v = x0[p[1] + (2u * 3u)] * x1[0u];
    y[i] = act(v + x10[2] + q.y[0]);
    if (y[i] == 0.0) { return; }
}
";
        let binds = vec![
            Bind::Input(0),
            Bind::Scratch { slot: 0, bytes: 4 },
            Bind::Output(0),
        ];
        let s = specialize(step(src, binds), |_| true).unwrap_or_else(|e| panic!("{e}"));
        assert!(s.source.starts_with("enable f16;\n"), "{}", s.source);
        assert!(s.source.contains("x0: array<f16>;"));
        assert!(s.source.contains("x1: array<f32>;"), "scratch keeps f32");
        assert!(s.source.contains("y: array<f16>;"));
        assert!(s
            .source
            .contains("let v = f32(x0[p[1] + (2u * 3u)]) * x1[0u];"));
        assert!(s.source.contains("y[i] = f16(act(v + x10[2] + q.y[0]));"));
        assert!(s.source.contains("if (f32(y[i]) == 0.0)"));
        // Nothing stored as f16: the step is unchanged.
        let same = specialize(step(src, vec![Bind::Input(0); 3]), |_| false);
        assert_eq!(same.map(|s| s.source), Ok(src.to_string()));
        // A compound store is refused, not miscompiled.
        let bad = "@group(0) @binding(1) var<storage, read_write> y: array<f32>;\nfn f() { y[0] += 1.0; }";
        assert!(specialize(step(bad, vec![Bind::Output(0)]), |_| true).is_err());
    }
}
