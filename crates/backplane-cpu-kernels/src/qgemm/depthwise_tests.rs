//! The channels-last int8 depthwise convolution ([`super::depthwise`]) on every integer
//! tier this CPU has, against exact sums requantized by the scalar rule, and against the
//! portable tier: channel counts around the block widths and periods of lanes, kernels 1×1
//! to 7×7, strides, dilations, asymmetric pads, windows wider than the image, i8 and u8
//! inputs and weights, extreme values and zero points at the ends of their types.

use super::depthwise::portable;
use super::*;

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// The tiers this CPU runs, named on stderr.
fn tiers() -> Vec<Int8Isa> {
    let have: Vec<Int8Isa> = Int8Isa::ALL.into_iter().filter(|t| t.available()).collect();
    eprintln!(
        "int8 tiers depthwise: tested {}",
        have.iter().map(|t| t.name()).collect::<Vec<_>>().join(" ")
    );
    have
}

/// Deterministic bytes.
fn bytes(n: usize, seed: u64) -> Vec<u8> {
    let mut s = seed.wrapping_mul(0x2545_f491_4f6c_dd1d).wrapping_add(17);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (s >> 56) as u8
        })
        .collect()
}

/// An 8-bit value as its type reads it.
fn widen(signed: bool, b: u8) -> i32 {
    if signed {
        i32::from(b as i8)
    } else {
        i32::from(b)
    }
}

/// One layer's data: raw input and weights (`[tap][channel]`), their zero points (the
/// weights' per channel), bias, scale and output range.
struct Case {
    geo: DwGeometry,
    c: usize,
    x_signed: bool,
    w_signed: bool,
    x: Vec<u8>,
    zx: i32,
    w: Vec<u8>,
    zw: Vec<i32>,
    bias: Vec<i32>,
    scale: Vec<f32>,
    range: RequantRange,
}

impl Case {
    /// `extreme`: inputs and weights at the ends of their types, zero points at the other
    /// ends (products of ±255·255); else random bytes and zero points. `symmetric`: int8
    /// weights with zero points 0 (TFLite's), which the VNNI tier runs as bytes.
    fn new(
        geo: DwGeometry,
        c: usize,
        x_signed: bool,
        w_signed: bool,
        extreme: bool,
        symmetric: bool,
    ) -> Case {
        let w_signed = w_signed || symmetric;
        let taps = geo.kernel[0] * geo.kernel[1];
        let seed = (c * 7919 + taps * 31 + geo.h * 7 + geo.w) as u64 + u64::from(extreme);
        let nx = geo.n * geo.h * geo.w * c;
        let (lo_x, hi_x) = if x_signed { (0x80u8, 0x7fu8) } else { (0, 255) };
        let (lo_w, hi_w) = if w_signed { (0x80u8, 0x7fu8) } else { (0, 255) };
        let (x, zx, w, mut zw) = if extreme {
            let r = bytes(nx, seed);
            let x: Vec<u8> = r
                .iter()
                .map(|&b| if b < 200 { hi_x } else { lo_x })
                .collect();
            let rw = bytes(taps * c, seed + 1);
            let w: Vec<u8> = rw
                .iter()
                .map(|&b| if b < 40 { hi_w } else { lo_w })
                .collect();
            let zw: Vec<i32> = (0..c)
                .map(|ch| widen(w_signed, if ch % 3 == 0 { lo_w } else { hi_w }))
                .collect();
            let zx = widen(x_signed, if c % 2 == 1 { hi_x } else { lo_x });
            (x, zx, w, zw)
        } else {
            let zb = bytes(c + 1, seed + 2);
            (
                bytes(nx, seed),
                widen(x_signed, zb[c]),
                bytes(taps * c, seed + 1),
                zb[..c].iter().map(|&b| widen(w_signed, b)).collect(),
            )
        };
        if symmetric {
            zw.iter_mut().for_each(|z: &mut i32| *z = 0);
        }
        let spread = 255.0 * 64.0 * (taps as f32).sqrt();
        let bias = (0..c as i32).map(|i| (i * 7919) % 40001 - 20000).collect();
        let scale = (0..c).map(|ch| (1.0 + (ch % 5) as f32) / spread).collect();
        let range = match seed % 3 {
            0 => RequantRange {
                zero: -3.0,
                lo: -125.0,
                hi: 130.0,
            },
            1 => RequantRange {
                zero: 0.0,
                lo: 0.0,
                hi: 255.0,
            },
            _ => RequantRange {
                zero: 128.0,
                lo: -28.0,
                hi: 12.0,
            },
        };
        Case {
            geo,
            c,
            x_signed,
            w_signed,
            x,
            zx,
            w,
            zw,
            bias,
            scale,
            range,
        }
    }

    fn centered_w(&self, t: usize, ch: usize) -> i16 {
        (widen(self.w_signed, self.w[t * self.c + ch]) - self.zw[ch]) as i16
    }

    fn layer(&self) -> DwLayer {
        let taps = self.geo.kernel[0] * self.geo.kernel[1];
        let w = DwWeights::new(
            self.c,
            taps,
            |t, ch| self.centered_w(t, ch),
            &self.bias,
            &self.scale,
            self.range,
            self.zx,
            self.x_signed,
        )
        .expect("weights");
        DwLayer::new(w, self.geo).expect("layer")
    }

    /// The exact sums over the taps within the image, requantized by the scalar rule.
    fn expected(&self) -> Vec<u8> {
        let g = &self.geo;
        let c = self.c;
        let [kh, kw] = g.kernel;
        let mut out = Vec::new();
        for n in 0..g.n {
            for oy in 0..g.oh {
                for ox in 0..g.ow {
                    for ch in 0..c {
                        let mut s = i64::from(self.bias[ch]);
                        for ky in 0..kh {
                            for kx in 0..kw {
                                let iy = (oy * g.strides[0] + ky * g.dilations[0]) as i64
                                    - g.pads[0] as i64;
                                let ix = (ox * g.strides[1] + kx * g.dilations[1]) as i64
                                    - g.pads[1] as i64;
                                if iy < 0 || ix < 0 || iy >= g.h as i64 || ix >= g.w as i64 {
                                    continue;
                                }
                                let at = ((n * g.h + iy as usize) * g.w + ix as usize) * c + ch;
                                let xv = widen(self.x_signed, self.x[at]) - self.zx;
                                let wv = i32::from(self.centered_w(ky * kw + kx, ch));
                                s += i64::from(xv * wv);
                            }
                        }
                        let r = self.range;
                        let v = (s as i32 as f32 * self.scale[ch]).max(r.lo).min(r.hi);
                        out.push((v.round_ties_even() as i32 + r.zero as i32) as u8);
                    }
                }
            }
        }
        out
    }
}

/// A geometry with the output extent that trailing pads `[bottom, right]` give.
fn geometry(
    hw: [usize; 2],
    kernel: [usize; 2],
    strides: [usize; 2],
    dilations: [usize; 2],
    pads: [usize; 4],
) -> DwGeometry {
    let out = |i: usize, lead: usize, trail: usize| {
        (hw[i] + lead + trail - ((kernel[i] - 1) * dilations[i] + 1)) / strides[i] + 1
    };
    DwGeometry {
        n: 2,
        h: hw[0],
        w: hw[1],
        oh: out(0, pads[0], pads[2]),
        ow: out(1, pads[1], pads[3]),
        kernel,
        strides,
        dilations,
        pads: [pads[0], pads[1]],
    }
}

/// The geometries the tests run: (input extent, kernel, strides, dilations, pads
/// top/left/bottom/right).
fn geometries() -> Vec<DwGeometry> {
    vec![
        geometry([7, 9], [3, 3], [1, 1], [1, 1], [1, 1, 1, 1]),
        geometry([9, 8], [3, 3], [2, 2], [1, 1], [0, 1, 1, 0]),
        geometry([8, 13], [3, 3], [2, 2], [1, 1], [1, 1, 1, 1]),
        geometry([6, 11], [5, 5], [1, 1], [1, 1], [2, 1, 2, 3]),
        geometry([13, 10], [5, 5], [2, 2], [2, 2], [3, 4, 4, 3]),
        geometry([9, 9], [3, 3], [1, 1], [2, 2], [2, 2, 2, 2]),
        geometry([5, 3], [1, 1], [1, 1], [1, 1], [0, 0, 0, 0]),
        geometry([5, 7], [1, 1], [2, 2], [1, 1], [0, 0, 0, 0]),
        geometry([8, 8], [7, 7], [1, 1], [1, 1], [3, 3, 3, 3]),
        geometry([7, 12], [3, 5], [2, 1], [1, 2], [1, 0, 0, 4]),
        // The window wider than the image: no column has its whole window inside.
        geometry([3, 2], [5, 5], [1, 1], [1, 1], [2, 2, 2, 2]),
        geometry([6, 6], [3, 3], [1, 1], [1, 1], [0, 0, 0, 0]),
    ]
}

/// Every layer on every tier equals the exact sums requantized, and writes nothing past its
/// rows; the portable body over all channels too.
#[test]
fn layers_equal_exact_sums_on_every_tier() {
    let tiers = tiers();
    let chans = [1usize, 3, 8, 15, 16, 17, 24, 31, 32, 33, 72, 96, 144, 257];
    for (gi, geo) in geometries().into_iter().enumerate() {
        for (ci, &c) in chans.iter().enumerate() {
            for variant in 0..6 {
                let (x_signed, extreme) = (variant % 2 == 0, variant % 4 >= 2);
                let symmetric = variant >= 4;
                let w_signed = (gi + ci + variant) % 2 == 0;
                let case = Case::new(geo, c, x_signed, w_signed, extreme, symmetric);
                let want = case.expected();
                let layer = case.layer();
                // Symmetric weights run as bytes on the VNNI tier where it has whole blocks.
                #[cfg(target_arch = "x86_64")]
                if symmetric {
                    let bytes = layer.weights().has_byte_weights();
                    let periodic = c * 64 / gcd(c, 64) <= (8 * c).max(64);
                    assert_eq!(bytes, c >= 64 || periodic, "byte weights, c {c}");
                }
                let what = format!(
                    "{geo:?} c {c} x {} w {} extreme {extreme} symmetric {symmetric}",
                    if x_signed { "i8" } else { "u8" },
                    if w_signed { "i8" } else { "u8" }
                );
                let rows = geo.n * geo.oh;
                let row = geo.ow * c;
                for &isa in &tiers {
                    let mut got = vec![0x5au8; want.len() + 5];
                    assert!(
                        depthwise_rows_on(isa, &layer, &case.x, 0..rows, &mut got),
                        "{}: refused {what}",
                        isa.name()
                    );
                    assert_eq!(got[..want.len()], want, "{}: {what}", isa.name());
                    assert_eq!(got[want.len()..], [0x5a; 5], "{}: wrote past", isa.name());
                    // A band of rows from the middle, as a thread computes it.
                    if rows >= 3 {
                        let mut band = vec![0u8; row];
                        assert!(depthwise_rows_on(isa, &layer, &case.x, 1..2, &mut band));
                        assert_eq!(band, want[row..2 * row], "{}: band {what}", isa.name());
                    }
                }
            }
        }
    }
}

/// Runs of pixels at any step (a stride of the image, or an arbitrary one) on every tier
/// equal the portable body over all channels, which equals a scalar sum.
#[test]
fn pixel_runs_equal_the_portable_body() {
    let tiers = tiers();
    for c in [1usize, 5, 16, 24, 40, 64, 72, 200] {
        for taps in [1usize, 2, 9, 25] {
            for (x_signed, step) in [(true, c), (false, 2 * c + 3), (true, 0)] {
                let pixels = 7;
                let len = (pixels - 1) * step + c;
                let xs: Vec<Vec<u8>> = (0..taps)
                    .map(|t| bytes(len, (c * 100 + t) as u64))
                    .collect();
                let runs: Vec<&[u8]> = xs.iter().map(Vec::as_slice).collect();
                let wv = bytes(taps * c, 5 + c as u64);
                let cw = |t: usize, ch: usize| i16::from(wv[t * c + ch]) - 100;
                let bias: Vec<i32> = (0..c as i32).map(|i| i * 101 - 900).collect();
                let scale: Vec<f32> = (0..c).map(|i| 1e-3 + 1e-5 * i as f32).collect();
                let range = RequantRange {
                    zero: 1.0,
                    lo: -129.0,
                    hi: 126.0,
                };
                let zx = if x_signed { -7 } else { 131 };
                let w = DwWeights::new(c, taps, cw, &bias, &scale, range, zx, x_signed)
                    .expect("weights");
                let mut want = vec![0u8; pixels * c];
                portable(&w, &runs, step, pixels, &mut want);
                for p in 0..pixels {
                    for ch in 0..c {
                        let mut s = bias[ch];
                        for (t, run) in runs.iter().enumerate() {
                            s += i32::from(cw(t, ch)) * (widen(x_signed, run[p * step + ch]) - zx);
                        }
                        let v = (s as f32 * scale[ch]).max(range.lo).min(range.hi);
                        let b = (v.round_ties_even() as i32 + 1) as u8;
                        assert_eq!(want[p * c + ch], b, "portable c {c} taps {taps} at {p}");
                    }
                }
                for &isa in &tiers {
                    let mut got = vec![0xa5u8; pixels * c + 3];
                    assert!(depthwise_pixels_on(isa, &w, &runs, step, pixels, &mut got));
                    assert_eq!(
                        got[..pixels * c],
                        want,
                        "{}: c {c} taps {taps} step {step}",
                        isa.name()
                    );
                    assert_eq!(got[pixels * c..], [0xa5; 3], "{}: wrote past", isa.name());
                }
            }
        }
    }
}

#[test]
fn mismatched_operands_are_refused() {
    let r = RequantRange {
        zero: 0.0,
        lo: -128.0,
        hi: 127.0,
    };
    let w = DwWeights::new(20, 2, |_, _| 1, &[0; 20], &[1.0; 20], r, 0, true).expect("weights");
    let run = [0u8; 40];
    let short = [0u8; 39];
    let mut out = [0u8; 40];
    assert!(!depthwise_pixels(&w, &[&run], 20, 2, &mut out));
    assert!(!depthwise_pixels(&w, &[&run, &short], 20, 2, &mut out));
    assert!(!depthwise_pixels(&w, &[&run, &run], 20, 2, &mut out[..39]));
    assert!(depthwise_pixels(&w, &[&run, &run], 20, 2, &mut out));
    assert!(DwWeights::new(3, 2, |_, _| 1, &[0; 3], &[1.0; 2], r, 0, true).is_none());
    let geo = geometry([4, 4], [1, 2], [1, 1], [1, 1], [0, 0, 0, 0]);
    assert!(DwLayer::new(
        w.clone(),
        DwGeometry {
            strides: [0, 1],
            ..geo
        }
    )
    .is_none());
    assert!(DwLayer::new(
        w.clone(),
        DwGeometry {
            kernel: [2, 2],
            ..geo
        }
    )
    .is_none());
    let bad_zero = DwWeights::new(20, 2, |_, _| 1, &[0; 20], &[1.0; 20], r, 128, true);
    assert!(DwLayer::new(bad_zero.expect("weights"), geo).is_none());
    let layer = DwLayer::new(w, geo).expect("layer");
    let x = vec![0u8; 2 * 4 * 4 * 20];
    let mut y = vec![0u8; 2 * 4 * 3 * 20];
    assert!(!depthwise_rows(&layer, &x[1..], 0..8, &mut y));
    assert!(!depthwise_rows(&layer, &x, 0..9, &mut y));
    assert!(!depthwise_rows(&layer, &x, 0..8, &mut y[1..]));
    assert!(depthwise_rows(&layer, &x, 0..8, &mut y));
}
