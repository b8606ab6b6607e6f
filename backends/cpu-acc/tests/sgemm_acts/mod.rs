//! The SGEMM's activations that its micro-kernels do not apply in registers (SiLU, hard
//! swish, sigmoid, hard sigmoid, tanh, exact GELU), applied to each block of C as it is
//! finished:
//! every driver of `gemm::sgemm` (the packed-A loop, the column split of few rows, a small
//! prepacked A, a large prepacked A against a narrow B, the tiles reading A in place, a
//! single row) gives the same bits as the product without the activation followed by the
//! elementwise pass (`simd::unary_in_place`), for odd shapes, at 1, 2 and 3 threads, with
//! and without accumulation onto C (a residual), on whatever tier the test binary runs
//! (each binary that includes this module caps the tier first).

use backplane_cpu_acc::act::Activation;
use backplane_cpu_acc::gemm::{sgemm, ASrc, BSrc, Epilogue, MatView, Packed, Shifted};
use backplane_cpu_acc::simd;
use backplane_cpu_acc::threads::Threads;

/// Values in [-4, 4) from a seed (an LCG), with NaN, ±∞ and the hard swish's corners (±3)
/// among every 97 values when `specials`.
fn values(len: usize, seed: u64, specials: bool) -> Vec<f32> {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..len)
        .map(|i| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let v = ((s >> 40) as f32 / (1u64 << 24) as f32) * 8.0 - 4.0;
            match (specials, i % 97) {
                (true, 13) => f32::NAN,
                (true, 29) => f32::INFINITY,
                (true, 41) => f32::NEG_INFINITY,
                (true, 53) => 3.0,
                (true, 67) => -3.0,
                _ => v,
            }
        })
        .collect()
}

const ACTS: [Activation; 6] = [
    Activation::Silu,
    Activation::HardSwish,
    Activation::Sigmoid,
    Activation::HardSigmoid {
        alpha: 1.0 / 6.0,
        beta: 0.5,
    },
    Activation::Tanh,
    Activation::Gelu {
        tanh_approximation: false,
    },
];

/// Whether two outputs hold the same bits (NaN payloads aside: any NaN matches any NaN).
fn same_bits(got: &[f32], want: &[f32]) -> Option<usize> {
    got.iter()
        .zip(want)
        .position(|(g, w)| !(g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan())))
}

/// `sgemm` with `act` against `sgemm` without it and the pass after it; C starts from
/// `c0` (accumulated onto when `ep.accumulate`), rows `ldc` apart.
#[allow(clippy::too_many_arguments)]
fn check(
    what: &str,
    th: &Threads,
    (m, n, k): (usize, usize, usize),
    a: &ASrc<'_>,
    b: &BSrc<'_>,
    c0: &[f32],
    ldc: usize,
    ep: &Epilogue<'_>,
) {
    let plain = Epilogue {
        act: Activation::None,
        ..*ep
    };
    let mut plain_c = c0.to_vec();
    sgemm(th, m, n, k, a, b, &mut plain_c, ldc, &plain).unwrap();
    let mut want = plain_c.clone();
    for row in want.chunks_mut(ldc) {
        let len = n.min(row.len());
        simd::unary_in_place(ep.act, &mut row[..len]);
    }
    let mut got = c0.to_vec();
    sgemm(th, m, n, k, a, b, &mut got, ldc, ep).unwrap();
    if let Some(i) = same_bits(&got, &want) {
        panic!(
            "{what} {m}x{n}x{k} {:?} threads {}: at ({}, {}) {} vs unfused {}",
            ep.act,
            th.count(),
            i / ldc,
            i % ldc,
            got[i],
            want[i]
        );
    }
    // The activation did something (a product left unchanged would pass trivially; one
    // value may lie where the function is the identity).
    assert!(
        m * n < 16 || same_bits(&got, &plain_c).is_some(),
        "{what} {m}x{n}x{k} {:?}: the activation changed nothing",
        ep.act
    );
}

/// Every driver and activation against the unfused pass (see the module's comment).
pub fn activations_in_the_tiles_match_the_unfused_pass() {
    // (pixels M, output channels N, depth K): MobileNetV3's and EfficientNet's large
    // pointwise layers (14×14 112→672, 7×7 160→960 and 192→1152, the 320→1280 head), a
    // batch-1 row, 56×56 and a K of two blocks, and odd shapes (1, 3, 17 channels).
    let shapes = [
        (196, 672, 112),
        (49, 960, 160),
        (49, 1152, 192),
        (49, 1280, 320),
        (1, 1280, 960),
        (3136, 96, 17),
        (196, 17, 300),
        (49, 3, 1),
        (1, 1, 1),
        (17, 96, 3),
        (61, 33, 97),
        // Few rows against large weights: the column split between threads.
        (10, 1152, 320),
        (24, 1056, 500),
    ];
    for th in [1, 2, 3].map(|t| Threads::new(t).unwrap()) {
        for (si, &(m, n, k)) in shapes.iter().enumerate() {
            let a = values(m * k, 3 + si as u64, false);
            let b = values(k * n, 5 + si as u64, false);
            // NaN and ±∞ reach the activation through the bias of a few columns.
            let bias = values(n, 7, true);
            let ldc = n + 3;
            let c0 = values(m * ldc, 11, false);
            let av = MatView {
                data: &a,
                rs: k,
                cs: 1,
            };
            let bv = MatView {
                data: &b,
                rs: n,
                cs: 1,
            };
            let pb = Packed::pack_b(k, n, bv);
            let pa = Packed::pack_a(m, k, av);
            let rows: Vec<usize> = (0..k).map(|l| l * n).collect();
            let shifted = Shifted::contiguous(&b, &rows);
            let routes = [
                // Packed weights, A read from the layer's input (a pointwise layer).
                ("view A, packed B", ASrc::View(av), BSrc::Packed(&pb)),
                // B packed on the fly.
                ("view A, view B", ASrc::View(av), BSrc::View(bv)),
                // A prepacked (convolution weights), B packed on the fly.
                ("packed A, view B", ASrc::Packed(&pa), BSrc::View(bv)),
                (
                    "packed A, shifted B",
                    ASrc::Packed(&pa),
                    BSrc::Shifted(shifted),
                ),
            ];
            for (ri, (what, asrc, bsrc)) in routes.iter().enumerate() {
                // Two activations per route, every one over a shape's routes; accumulation
                // onto C (a residual) only where A is read in place (the prepacked-A
                // routes write C whole).
                for ai in [si + ri, si + ri + 3] {
                    let act = ACTS[ai % ACTS.len()];
                    let ep = Epilogue {
                        accumulate: ri < 2 && ai % 2 == 1,
                        col_bias: Some(&bias),
                        act,
                        ..Epilogue::default()
                    };
                    check(what, &th, (m, n, k), asrc, bsrc, &c0, ldc, &ep);
                }
            }
        }
    }
}
