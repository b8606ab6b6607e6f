//! Symbolic dimensions: shapes whose sizes are named (`seq`) or derived (`batch*seq`,
//! `seq/2+1`), the shape rules of the common ops over them, and the binding of a model's
//! symbolic inputs to concrete shapes.
//!
//! A [`Network`](crate::Network) keeps concrete shapes; this module describes what a model
//! accepts and produces *before* a concrete shape is chosen, so that a server can check a new
//! input set against it (a misfit is refused naming the dimension) and key its plans by the
//! bound symbols (`seq=7`) rather than by raw shapes. Expressions are kept in a canonical
//! form (sums and products flattened, constants folded, terms ordered), so that two ways of
//! computing one size compare equal.

use std::collections::BTreeMap;
use std::fmt;

/// A dimension: a number, a named symbol, or an expression over them.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DimExpr {
    /// A known size.
    Const(i64),
    /// A named size (an ONNX `dim_param`).
    Sym(String),
    /// A sum of two or more terms (canonical: flattened, ordered, constants folded last).
    Add(Vec<DimExpr>),
    /// A product of two or more factors (canonical: flattened, ordered, one constant first).
    Mul(Vec<DimExpr>),
    /// Floor division by a positive constant.
    Div(Box<DimExpr>, i64),
    /// The smaller of two sizes (a slice end clamped to the dimension).
    Min(Box<DimExpr>, Box<DimExpr>),
}

/// A symbolic shape.
pub type SymShape = Vec<DimExpr>;

/// Why a symbolic shape rule or a binding failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SymbolicError {
    /// The rule cannot tell the result from what it knows (it is left unknown).
    #[error("unknown: {0}")]
    Unknown(String),
    /// The shapes can never fit each other.
    #[error("{0}")]
    Mismatch(String),
}

fn unknown(what: impl Into<String>) -> SymbolicError {
    SymbolicError::Unknown(what.into())
}

fn mismatch(what: impl Into<String>) -> SymbolicError {
    SymbolicError::Mismatch(what.into())
}

impl From<i64> for DimExpr {
    fn from(v: i64) -> Self {
        DimExpr::Const(v)
    }
}

impl DimExpr {
    /// A named symbol.
    pub fn sym(name: &str) -> DimExpr {
        DimExpr::Sym(name.to_string())
    }

    /// Its value when it is a constant.
    pub fn as_const(&self) -> Option<i64> {
        match self {
            DimExpr::Const(v) => Some(*v),
            _ => None,
        }
    }

    /// `self + other`, simplified.
    pub fn plus(&self, other: &DimExpr) -> DimExpr {
        let mut terms = Vec::new();
        let mut constant = 0i64;
        for e in [self, other] {
            match e {
                DimExpr::Add(ts) => terms.extend(ts.iter().cloned()),
                e => terms.push(e.clone()),
            }
        }
        terms.retain(|t| match t {
            DimExpr::Const(c) => {
                constant = constant.saturating_add(*c);
                false
            }
            _ => true,
        });
        // Cancel a term against its negation (k*x + -k*x).
        let mut merged: Vec<(i64, DimExpr)> = Vec::new();
        for t in terms {
            let (k, base) = t.split_coefficient();
            match merged.iter_mut().find(|(_, b)| *b == base) {
                Some((kk, _)) => *kk = kk.saturating_add(k),
                None => merged.push((k, base)),
            }
        }
        let mut terms: Vec<DimExpr> = merged
            .into_iter()
            .filter(|(k, _)| *k != 0)
            .map(|(k, base)| DimExpr::Const(k).times(&base))
            .collect();
        terms.sort();
        if constant != 0 || terms.is_empty() {
            terms.push(DimExpr::Const(constant));
        }
        if terms.len() == 1 {
            return terms.remove(0);
        }
        DimExpr::Add(terms)
    }

    /// `self - other`, simplified.
    pub fn minus(&self, other: &DimExpr) -> DimExpr {
        self.plus(&DimExpr::Const(-1).times(other))
    }

    /// `self * other`, simplified (products of sums are not expanded).
    pub fn times(&self, other: &DimExpr) -> DimExpr {
        let mut factors = Vec::new();
        let mut constant = 1i64;
        for e in [self, other] {
            match e {
                DimExpr::Mul(fs) => factors.extend(fs.iter().cloned()),
                e => factors.push(e.clone()),
            }
        }
        factors.retain(|f| match f {
            DimExpr::Const(c) => {
                constant = constant.saturating_mul(*c);
                false
            }
            _ => true,
        });
        if constant == 0 || factors.is_empty() {
            return DimExpr::Const(constant);
        }
        factors.sort();
        if constant != 1 {
            factors.insert(0, DimExpr::Const(constant));
        }
        if factors.len() == 1 {
            return factors.remove(0);
        }
        DimExpr::Mul(factors)
    }

    /// `self / d` rounded down, for a positive constant `d`; `None` for `d <= 0`.
    pub fn div_floor(&self, d: i64) -> Option<DimExpr> {
        if d <= 0 {
            return None;
        }
        if d == 1 {
            return Some(self.clone());
        }
        Some(match self {
            DimExpr::Const(v) => DimExpr::Const(v.div_euclid(d)),
            // (k*x)/d = (k/d)*x when d divides k.
            e => match e.split_coefficient() {
                (k, base) if k % d == 0 => DimExpr::Const(k / d).times(&base),
                _ => DimExpr::Div(Box::new(self.clone()), d),
            },
        })
    }

    /// The smaller of `self` and `other` (folded when both are constants or equal).
    pub fn min_with(&self, other: &DimExpr) -> DimExpr {
        match (self, other) {
            (DimExpr::Const(a), DimExpr::Const(b)) => DimExpr::Const(*a.min(b)),
            (a, b) if a == b => a.clone(),
            (a, b) => {
                let (a, b) = if a <= b { (a, b) } else { (b, a) };
                DimExpr::Min(Box::new(a.clone()), Box::new(b.clone()))
            }
        }
    }

    /// `(k, base)` with `self = k * base`.
    fn split_coefficient(&self) -> (i64, DimExpr) {
        match self {
            DimExpr::Mul(fs) => match fs.first() {
                Some(DimExpr::Const(k)) => {
                    let rest: Vec<DimExpr> = fs[1..].to_vec();
                    let base = if rest.len() == 1 {
                        rest[0].clone()
                    } else {
                        DimExpr::Mul(rest)
                    };
                    (*k, base)
                }
                _ => (1, self.clone()),
            },
            e => (1, e.clone()),
        }
    }

    /// Its value with the symbols bound; `None` if a symbol is unbound or a step overflows.
    pub fn eval(&self, bindings: &Bindings) -> Option<i64> {
        match self {
            DimExpr::Const(v) => Some(*v),
            DimExpr::Sym(s) => bindings.get(s),
            DimExpr::Add(ts) => ts
                .iter()
                .try_fold(0i64, |acc, t| acc.checked_add(t.eval(bindings)?)),
            DimExpr::Mul(fs) => fs
                .iter()
                .try_fold(1i64, |acc, f| acc.checked_mul(f.eval(bindings)?)),
            DimExpr::Div(e, d) => Some(e.eval(bindings)?.div_euclid(*d)),
            DimExpr::Min(a, b) => Some(a.eval(bindings)?.min(b.eval(bindings)?)),
        }
    }

    /// The symbols it names, in order, once each.
    pub fn symbols(&self) -> Vec<String> {
        let mut out = Vec::new();
        self.collect_symbols(&mut out);
        out
    }

    fn collect_symbols(&self, out: &mut Vec<String>) {
        match self {
            DimExpr::Const(_) => {}
            DimExpr::Sym(s) => {
                if !out.contains(s) {
                    out.push(s.clone());
                }
            }
            DimExpr::Add(ts) | DimExpr::Mul(ts) => ts.iter().for_each(|t| t.collect_symbols(out)),
            DimExpr::Div(e, _) => e.collect_symbols(out),
            DimExpr::Min(a, b) => {
                a.collect_symbols(out);
                b.collect_symbols(out);
            }
        }
    }

    /// Whether it needs parentheses as a factor or a dividend.
    fn compound(&self) -> bool {
        matches!(self, DimExpr::Add(_))
    }
}

impl fmt::Display for DimExpr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DimExpr::Const(v) => write!(f, "{v}"),
            DimExpr::Sym(s) => write!(f, "{s}"),
            DimExpr::Add(ts) => {
                for (i, t) in ts.iter().enumerate() {
                    if i == 0 {
                        write!(f, "{t}")?;
                        continue;
                    }
                    if let Some(c) = t.as_const() {
                        if c < 0 {
                            write!(f, "-{}", c.unsigned_abs())?;
                        } else {
                            write!(f, "+{c}")?;
                        }
                        continue;
                    }
                    match t.split_coefficient() {
                        (-1, base) => write!(f, "-{}", Factor(&base))?,
                        (k, base) if k < 0 => write!(f, "-{}*{}", k.unsigned_abs(), Factor(&base))?,
                        _ => write!(f, "+{t}")?,
                    }
                }
                Ok(())
            }
            DimExpr::Mul(fs) => {
                for (i, x) in fs.iter().enumerate() {
                    if i > 0 {
                        write!(f, "*")?;
                    }
                    write!(f, "{}", Factor(x))?;
                }
                Ok(())
            }
            DimExpr::Div(e, d) => write!(f, "{}/{d}", Factor(e)),
            DimExpr::Min(a, b) => write!(f, "min({a}, {b})"),
        }
    }
}

/// An expression written as a factor (parenthesized when it is a sum).
struct Factor<'a>(&'a DimExpr);

impl fmt::Display for Factor<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.compound() {
            write!(f, "({})", self.0)
        } else {
            write!(f, "{}", self.0)
        }
    }
}

/// `[1, seq, 768]`.
pub fn display_shape(shape: &[DimExpr]) -> String {
    let dims: Vec<String> = shape.iter().map(ToString::to_string).collect();
    format!("[{}]", dims.join(", "))
}

/// Values of symbols, by name.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Bindings(BTreeMap<String, i64>);

impl Bindings {
    /// No symbol bound.
    pub fn new() -> Self {
        Bindings::default()
    }

    /// The value of `symbol`, if bound.
    pub fn get(&self, symbol: &str) -> Option<i64> {
        self.0.get(symbol).copied()
    }

    /// Bind `symbol` to `value`.
    pub fn insert(&mut self, symbol: &str, value: i64) {
        self.0.insert(symbol.to_string(), value);
    }

    /// Every binding, ordered by name.
    pub fn iter(&self) -> impl Iterator<Item = (&str, i64)> {
        self.0.iter().map(|(k, v)| (k.as_str(), *v))
    }

    /// Whether nothing is bound.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Display for Bindings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self.0.iter().map(|(k, v)| format!("{k}={v}")).collect();
        write!(f, "{}", parts.join(", "))
    }
}

/// What a model accepts and produces, with symbolic dimensions.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SymbolicSignature {
    /// Each graph input with its shape (`None`: the model declares no shape).
    pub inputs: Vec<(String, Option<SymShape>)>,
    /// Each graph output with its shape as far as shape inference could tell.
    pub outputs: Vec<(String, Option<SymShape>)>,
}

impl SymbolicSignature {
    /// Bind the symbols of the inputs to the shapes given (by input name). Every dimension
    /// is checked: a number must match, a symbol takes one value across all inputs, a
    /// derived expression must evaluate to the given size. An input not given, or one the
    /// model declares no shape for, is not checked.
    pub fn bind(&self, given: &[(&str, &[usize])]) -> Result<Bindings, SymbolicError> {
        let mut bindings = Bindings::new();
        // Where each symbol was bound, for the error.
        let mut source: BTreeMap<String, String> = BTreeMap::new();
        let mut derived: Vec<(String, usize, &DimExpr, i64)> = Vec::new();
        for (name, shape) in &self.inputs {
            let Some(shape) = shape else { continue };
            let Some((_, dims)) = given.iter().find(|(n, _)| n == name) else {
                continue;
            };
            if dims.len() != shape.len() {
                return Err(mismatch(format!(
                    "input '{name}' has {} dimensions {dims:?}; the model declares {} {}",
                    dims.len(),
                    shape.len(),
                    display_shape(shape)
                )));
            }
            for (k, (expr, &size)) in shape.iter().zip(dims.iter()).enumerate() {
                let size = i64::try_from(size).map_err(|_| mismatch("a dimension overflows"))?;
                match expr {
                    DimExpr::Const(c) if *c != size => {
                        return Err(mismatch(format!(
                            "input '{name}' dimension {k} is {size}; the model declares {c} \
                             (shape {})",
                            display_shape(shape)
                        )))
                    }
                    DimExpr::Const(_) => {}
                    DimExpr::Sym(s) => match bindings.get(s) {
                        Some(v) if v != size => {
                            return Err(mismatch(format!(
                                "input '{name}' dimension {k} ('{s}') is {size}, but '{s}' is {v} \
                                 from {}",
                                source.get(s).map(String::as_str).unwrap_or("another input")
                            )))
                        }
                        Some(_) => {}
                        None => {
                            bindings.insert(s, size);
                            source.insert(s.clone(), format!("input '{name}' dimension {k}"));
                        }
                    },
                    e => derived.push((name.clone(), k, e, size)),
                }
            }
        }
        for (name, k, expr, size) in derived {
            if let Some(v) = expr.eval(&bindings) {
                if v != size {
                    return Err(mismatch(format!(
                        "input '{name}' dimension {k} ('{expr}') is {size}; with {bindings} it \
                         must be {v}"
                    )));
                }
            }
        }
        Ok(bindings)
    }
}

/// Numpy broadcasting of two shapes. Two different non-1 expressions are assumed equal at
/// run time (broadcasting requires it) and the simpler is kept; two different numbers other
/// than 1 are a mismatch.
pub fn broadcast(a: &[DimExpr], b: &[DimExpr]) -> Result<SymShape, SymbolicError> {
    let rank = a.len().max(b.len());
    let one = DimExpr::Const(1);
    (0..rank)
        .map(|i| {
            let x = if i + a.len() >= rank {
                &a[i + a.len() - rank]
            } else {
                &one
            };
            let y = if i + b.len() >= rank {
                &b[i + b.len() - rank]
            } else {
                &one
            };
            match (x, y) {
                (x, y) if x == y => Ok(x.clone()),
                (DimExpr::Const(1), y) => Ok(y.clone()),
                (x, DimExpr::Const(1)) => Ok(x.clone()),
                (DimExpr::Const(p), DimExpr::Const(q)) => {
                    Err(mismatch(format!("dimensions {p} and {q} do not broadcast")))
                }
                // A symbol may be 1 at run time; keep the one that is more specific.
                (DimExpr::Const(_), _) => Ok(x.clone()),
                (_, DimExpr::Const(_)) => Ok(y.clone()),
                (x, y) => Ok(if weight(x) <= weight(y) { x } else { y }.clone()),
            }
        })
        .collect()
}

/// The size of an expression tree (to prefer `seq` over `min(seq, 128)`).
fn weight(e: &DimExpr) -> usize {
    match e {
        DimExpr::Const(_) | DimExpr::Sym(_) => 1,
        DimExpr::Add(ts) | DimExpr::Mul(ts) => 1 + ts.iter().map(weight).sum::<usize>(),
        DimExpr::Div(e, _) => 1 + weight(e),
        DimExpr::Min(a, b) => 1 + weight(a) + weight(b),
    }
}

/// MatMul (numpy semantics: 1-D operands promoted, batch dimensions broadcast).
pub fn matmul(a: &[DimExpr], b: &[DimExpr]) -> Result<SymShape, SymbolicError> {
    if a.is_empty() || b.is_empty() {
        return Err(mismatch("MatMul of a scalar"));
    }
    let a2: SymShape = if a.len() == 1 {
        vec![DimExpr::Const(1), a[0].clone()]
    } else {
        a.to_vec()
    };
    let b2: SymShape = if b.len() == 1 {
        vec![b[0].clone(), DimExpr::Const(1)]
    } else {
        b.to_vec()
    };
    let (m, ka) = (&a2[a2.len() - 2], &a2[a2.len() - 1]);
    let (kb, n) = (&b2[b2.len() - 2], &b2[b2.len() - 1]);
    if let (Some(p), Some(q)) = (ka.as_const(), kb.as_const()) {
        if p != q {
            return Err(mismatch(format!(
                "MatMul inner dimensions {p} and {q} differ"
            )));
        }
    }
    let mut out = broadcast(&a2[..a2.len() - 2], &b2[..b2.len() - 2])?;
    if a.len() > 1 {
        out.push(m.clone());
    }
    if b.len() > 1 {
        out.push(n.clone());
    }
    Ok(out)
}

/// Gemm: `[M, K] x [K, N]` after the optional transposes.
pub fn gemm(
    a: &[DimExpr],
    b: &[DimExpr],
    trans_a: bool,
    trans_b: bool,
) -> Result<SymShape, SymbolicError> {
    if a.len() != 2 || b.len() != 2 {
        return Err(mismatch("Gemm takes 2-D operands"));
    }
    let m = if trans_a { &a[1] } else { &a[0] };
    let n = if trans_b { &b[0] } else { &b[1] };
    Ok(vec![m.clone(), n.clone()])
}

/// The output size of a convolution or pooling window along one axis: `(size + pads -
/// dilation*(kernel-1) - 1) / stride + 1`, rounded up when `ceil`.
pub fn window_output(
    size: &DimExpr,
    kernel: i64,
    stride: i64,
    pads: (i64, i64),
    dilation: i64,
    ceil: bool,
) -> Result<DimExpr, SymbolicError> {
    if stride <= 0 || kernel <= 0 || dilation <= 0 {
        return Err(mismatch(
            "a window's kernel, stride and dilation must be positive",
        ));
    }
    let span = dilation * (kernel - 1) + 1;
    let mut reach = size.plus(&DimExpr::Const(pads.0 + pads.1 - span));
    if ceil {
        reach = reach.plus(&DimExpr::Const(stride - 1));
    }
    reach
        .div_floor(stride)
        .map(|q| q.plus(&DimExpr::Const(1)))
        .ok_or_else(|| mismatch("a window's stride must be positive"))
}

/// Reshape to `target` (0 copies the input's dimension unless `allow_zero`; one -1 takes what
/// remains). The -1 is solved symbolically when the other target dimensions divide the
/// input's product factor by factor.
pub fn reshape(
    input: &[DimExpr],
    target: &[DimExpr],
    allow_zero: bool,
) -> Result<SymShape, SymbolicError> {
    let mut out: SymShape = Vec::with_capacity(target.len());
    let mut infer = None;
    for (i, t) in target.iter().enumerate() {
        match t.as_const() {
            Some(0) if !allow_zero => out.push(input.get(i).cloned().ok_or_else(|| {
                mismatch(format!(
                    "Reshape copies dimension {i}, which the input lacks"
                ))
            })?),
            Some(-1) if infer.is_none() => {
                infer = Some(i);
                out.push(DimExpr::Const(-1));
            }
            Some(v) if v < 0 => return Err(mismatch(format!("Reshape to a dimension of {v}"))),
            _ => out.push(t.clone()),
        }
    }
    if let Some(at) = infer {
        let others: Vec<DimExpr> = out
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != at)
            .map(|(_, d)| d.clone())
            .collect();
        out[at] = quotient(input, &others)?;
    }
    Ok(out)
}

/// `product(num) / product(den)`, cancelling equal factors; the constants must divide.
fn quotient(num: &[DimExpr], den: &[DimExpr]) -> Result<DimExpr, SymbolicError> {
    let mut factors: Vec<DimExpr> = Vec::new();
    let mut constant = 1i64;
    let push = |e: &DimExpr, into: &mut Vec<DimExpr>, c: &mut i64| match e {
        DimExpr::Mul(fs) => {
            for f in fs {
                match f {
                    DimExpr::Const(k) => *c = c.saturating_mul(*k),
                    f => into.push(f.clone()),
                }
            }
        }
        DimExpr::Const(k) => *c = c.saturating_mul(*k),
        e => into.push(e.clone()),
    };
    for e in num {
        push(e, &mut factors, &mut constant);
    }
    let mut divisor = 1i64;
    let mut den_factors = Vec::new();
    for e in den {
        push(e, &mut den_factors, &mut divisor);
    }
    for f in den_factors {
        match factors.iter().position(|x| *x == f) {
            Some(at) => {
                factors.remove(at);
            }
            None => return Err(unknown(format!("Reshape's -1 divides by {f}"))),
        }
    }
    if divisor == 0 || constant % divisor != 0 {
        return Err(unknown("Reshape's -1 does not divide the constants"));
    }
    Ok(factors
        .iter()
        .fold(DimExpr::Const(constant / divisor), |acc, f| acc.times(f)))
}

/// Concat along `axis` (negative counts from the end): the sizes along it add up.
pub fn concat(shapes: &[&[DimExpr]], axis: i64) -> Result<SymShape, SymbolicError> {
    let first = shapes
        .first()
        .ok_or_else(|| mismatch("Concat of nothing"))?;
    let axis = normalize_axis(axis, first.len())?;
    let mut out = first.to_vec();
    for s in &shapes[1..] {
        if s.len() != out.len() {
            return Err(mismatch("Concat of different ranks"));
        }
        out[axis] = out[axis].plus(&s[axis]);
    }
    Ok(out)
}

/// An axis in `[-rank, rank)` as an index.
pub fn normalize_axis(axis: i64, rank: usize) -> Result<usize, SymbolicError> {
    let r = i64::try_from(rank).map_err(|_| mismatch("rank overflows"))?;
    let a = if axis < 0 { axis + r } else { axis };
    if (0..r).contains(&a) {
        usize::try_from(a).map_err(|_| mismatch("axis overflows"))
    } else {
        Err(mismatch(format!(
            "axis {axis} is out of range for rank {rank}"
        )))
    }
}

/// The length of `dim[start:end:step]` (ONNX Slice on one axis). Constant bounds on a
/// constant dimension are exact; on a symbolic one a start of 0 or more and a step of 1 are
/// handled (an end past any size means the whole dimension, a negative end counts from its
/// end, a symbolic end is clamped to it).
pub fn slice_len(
    dim: &DimExpr,
    start: &DimExpr,
    end: &DimExpr,
    step: i64,
) -> Result<DimExpr, SymbolicError> {
    if step == 0 {
        return Err(mismatch("Slice with a step of 0"));
    }
    if let (Some(d), Some(s), Some(e)) = (dim.as_const(), start.as_const(), end.as_const()) {
        return Ok(DimExpr::Const(const_slice_len(d, s, e, step)));
    }
    if step != 1 {
        return Err(unknown("a strided Slice of a symbolic dimension"));
    }
    let start = match start.as_const() {
        Some(s) if s >= 0 => DimExpr::Const(s),
        _ => return Err(unknown("a Slice from a symbolic or negative start")),
    };
    let end = match end.as_const() {
        Some(e) if e >= i64::from(i32::MAX) => dim.clone(),
        Some(e) if e < 0 => dim.plus(&DimExpr::Const(e)),
        Some(e) => dim.min_with(&DimExpr::Const(e)),
        None => dim.min_with(end),
    };
    // A start past the end gives 0 elements; a constant start is assumed within the end.
    Ok(end.minus(&start))
}

/// The length of a constant slice, with ONNX's clamping.
fn const_slice_len(dim: i64, start: i64, end: i64, step: i64) -> i64 {
    let clamp = |v: i64, lo: i64, hi: i64| v.max(lo).min(hi);
    let fix = |v: i64| if v < 0 { v.saturating_add(dim) } else { v };
    let (s, e) = if step > 0 {
        (clamp(fix(start), 0, dim), clamp(fix(end), 0, dim))
    } else {
        (clamp(fix(start), -1, dim - 1), clamp(fix(end), -1, dim - 1))
    };
    if step > 0 {
        if e > s {
            (e - s + step - 1) / step
        } else {
            0
        }
    } else if s > e {
        (s - e + (-step) - 1) / (-step)
    } else {
        0
    }
}

/// Gather along `axis`: the data's dimensions with the one at `axis` replaced by the
/// indices' shape.
pub fn gather(data: &[DimExpr], indices: &[DimExpr], axis: i64) -> Result<SymShape, SymbolicError> {
    let axis = normalize_axis(axis, data.len())?;
    let mut out = data[..axis].to_vec();
    out.extend(indices.iter().cloned());
    out.extend(data[axis + 1..].iter().cloned());
    Ok(out)
}

/// Transpose by `perm` (empty: reversed).
pub fn transpose(shape: &[DimExpr], perm: &[i64]) -> Result<SymShape, SymbolicError> {
    if perm.is_empty() {
        return Ok(shape.iter().rev().cloned().collect());
    }
    if perm.len() != shape.len() {
        return Err(mismatch("Transpose's perm does not match the rank"));
    }
    perm.iter()
        .map(|&p| Ok(shape[normalize_axis(p, shape.len())?].clone()))
        .collect()
}

/// Unsqueeze: a 1 inserted at each axis (of the output's rank).
pub fn unsqueeze(shape: &[DimExpr], axes: &[i64]) -> Result<SymShape, SymbolicError> {
    let rank = shape.len() + axes.len();
    let mut at: Vec<usize> = axes
        .iter()
        .map(|&a| normalize_axis(a, rank))
        .collect::<Result<_, _>>()?;
    at.sort_unstable();
    at.dedup();
    if at.len() != axes.len() {
        return Err(mismatch("Unsqueeze names an axis twice"));
    }
    let mut rest = shape.iter();
    (0..rank)
        .map(|i| {
            if at.contains(&i) {
                Ok(DimExpr::Const(1))
            } else {
                rest.next()
                    .cloned()
                    .ok_or_else(|| mismatch("Unsqueeze's axes do not fit the rank"))
            }
        })
        .collect()
}

/// Squeeze the given axes (empty: every dimension that is the number 1).
pub fn squeeze(shape: &[DimExpr], axes: &[i64]) -> Result<SymShape, SymbolicError> {
    if axes.is_empty() {
        if shape.iter().any(|d| d.as_const().is_none()) {
            return Err(unknown("Squeeze without axes of a symbolic shape"));
        }
        return Ok(shape
            .iter()
            .filter(|d| d.as_const() != Some(1))
            .cloned()
            .collect());
    }
    let at: Vec<usize> = axes
        .iter()
        .map(|&a| normalize_axis(a, shape.len()))
        .collect::<Result<_, _>>()?;
    Ok(shape
        .iter()
        .enumerate()
        .filter(|(i, _)| !at.contains(i))
        .map(|(_, d)| d.clone())
        .collect())
}

#[cfg(test)]
mod tests;
