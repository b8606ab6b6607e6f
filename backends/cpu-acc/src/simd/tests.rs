//! The multiversioned activations and the depthwise rows kernels against CpuAcc's plain
//! loops.

use super::*;
use crate::conv::depthwise::tests::{geo, naive, naive_max};
use crate::conv::window::Geo2;

/// The in-place activations (the vector code for Relu, Clip and LeakyRelu, every slope
/// sign and an infinite one, and the compiled loops for the rest) give what
/// `Activation::apply_simple` and `math::apply` give, value for value: NaN kept,
/// infinities, signed zeros, and lengths around the vector width.
#[test]
fn activations_in_place_match_the_scalar_ones() {
    let acts = [
        Activation::Relu,
        Activation::Clip {
            min: -1.0,
            max: 6.0,
        },
        Activation::LeakyRelu { alpha: 0.1 },
        Activation::LeakyRelu { alpha: 0.0 },
        Activation::LeakyRelu {
            alpha: f32::INFINITY,
        },
        Activation::Sigmoid,
        Activation::Gelu {
            tanh_approximation: false,
        },
    ];
    for act in acts {
        for len in [0, 1, 7, 8, 9, 16, 17, 33] {
            let x = crate::math::tests::with_specials(len, 5, 0.37);
            let mut y = x.clone();
            unary_in_place(act, &mut y);
            for (&v, &got) in x.iter().zip(&y) {
                let want = crate::math::apply(act, v);
                let same = got == want || (got.is_nan() && want.is_nan());
                assert!(same, "{act:?}({v}) = {got}, want {want}");
            }
        }
    }
}

/// Both kernels (where this CPU runs them), every stride, pads from 0 to 2 on each side,
/// and widths around the vectors and the four-vector group (each tap's masks and the
/// padded rows' edges), against the plain loops, for the weighted sum and the maximum
/// (with a NaN, which must reach exactly the windows that hold it); the outputs past the
/// plane are left alone; a short input is refused. The rows scratch is shared by every
/// case, so each plane must not depend on what an earlier one left there.
#[test]
fn planes_match_the_plain_loops() {
    let mut tested = 0;
    let isas = [Isa::Avx512, Isa::Avx2]
        .into_iter()
        .filter(|i| i.available());
    let mut rows = Vec::new();
    for (isa, s) in isas.flat_map(|i| [(i, 1), (i, 2)]) {
        for (h, w) in [
            (1, 1),
            (3, 16),
            (5, 17),
            (2, 31),
            (4, 32),
            (3, 33),
            (6, 63),
            (2, 64),
            (3, 65),
            (2, 113),
            (7, 7),
            (14, 14),
            (5, 9),
            (4, 8),
        ] {
            for (pt, pl, pb, pr) in [(1, 1, 1, 1), (0, 0, 0, 0), (2, 1, 0, 2), (0, 2, 1, 0)] {
                let (hp, wp) = (h + pt + pb, w + pl + pr);
                if hp < 3 || wp < 3 {
                    continue;
                }
                let g = Geo2 {
                    h,
                    w,
                    kh: 3,
                    kw: 3,
                    sh: s,
                    sw: s,
                    dh: 1,
                    dw: 1,
                    pt,
                    pl,
                    oh: (hp - 3) / s + 1,
                    ow: (wp - 3) / s + 1,
                };
                let x: Vec<f32> = (0..h * w)
                    .map(|i| ((i * 37 % 101) as f32 - 50.0) / 25.0)
                    .collect();
                let wt: Vec<f32> = (0..9).map(|t| (t as f32 - 4.0) / 3.0).collect();
                let mut y = vec![f32::NAN; g.oh * g.ow + 5];
                let act = Activation::Clip {
                    min: -4.0,
                    max: 4.0,
                };
                assert!(
                    depthwise_rows::plane_on::<false>(
                        isa, &g, &x, &wt, 0.25, act, &mut y, &mut rows
                    ),
                    "refused an applicable plane"
                );
                let want = naive(&g, &x, &wt, 0.25);
                for (i, (&got, &want)) in y.iter().zip(&want).enumerate() {
                    let want = act.apply_simple(want);
                    assert!(
                        (got - want).abs() <= 1e-5 * want.abs().max(1.0),
                        "{isa:?} s{s} {h}x{w} pads {:?} output {i}: {got} vs {want}",
                        (pt, pl, pb, pr)
                    );
                }
                assert!(
                    y[g.oh * g.ow..].iter().all(|v| v.is_nan()),
                    "wrote past the plane"
                );
                let short = &x[..h * w - 1];
                assert!(!depthwise_rows::plane_on::<false>(
                    isa, &g, short, &wt, 0.25, act, &mut y, &mut rows
                ));
                // The maximum, without a NaN and with one on the plane's last row (its
                // windows only).
                let mut ym = vec![0f32; g.oh * g.ow + 5];
                let none = Activation::None;
                assert!(depthwise_rows::plane_on::<true>(
                    isa, &g, &x, &wt, 0.0, none, &mut ym, &mut rows
                ));
                assert_eq!(
                    ym[..g.oh * g.ow],
                    naive_max(&g, &x),
                    "{isa:?} max s{s} {h}x{w}"
                );
                assert!(ym[g.oh * g.ow..].iter().all(|&v| v == 0.0), "wrote past");
                let mut xn = x.clone();
                xn[(h - 1) * w] = f32::NAN;
                ym.fill(0.0);
                assert!(depthwise_rows::plane_on::<true>(
                    isa, &g, &xn, &wt, 0.0, none, &mut ym, &mut rows
                ));
                for (i, (&got, want)) in ym.iter().zip(naive_max(&g, &xn)).enumerate() {
                    assert!(
                        got == want || (got.is_nan() && want.is_nan()),
                        "{isa:?} max s{s} {h}x{w} pads {:?} output {i}: {got} vs {want}",
                        (pt, pl, pb, pr)
                    );
                }
                assert!(ym[g.oh * g.ow..].iter().all(|&v| v == 0.0), "wrote past");
                let short = &xn[..h * w - 1];
                assert!(!depthwise_rows::plane_on::<true>(
                    isa, &g, short, &wt, 0.0, none, &mut ym, &mut rows
                ));
                tested += 1;
            }
        }
    }
    assert!(tested > 0 || !avx2_in_use());
    // The public entry points take this machine's best kernel, and refuse other windows.
    if avx2_in_use() {
        let g = geo(5, 9, 3, 1, 1, [1, 1, 1, 1]);
        let x: Vec<f32> = (0..45).map(|i| i as f32 - 20.0).collect();
        let wt = [0.5f32; 9];
        let mut y = vec![0f32; 45];
        assert!(depthwise_rows::plane(
            &g,
            &x,
            &wt,
            1.0,
            Activation::Relu,
            &mut y,
            &mut rows
        ));
        for (got, want) in y.iter().zip(naive(&g, &x, &wt, 1.0)) {
            assert!((got - want.max(0.0)).abs() <= 1e-4, "{got} vs {want}");
        }
        assert!(depthwise_rows::max_plane(&g, &x, &mut y, &mut rows));
        assert_eq!(y, naive_max(&g, &x));
        let wide = Geo2 { kw: 5, ow: 7, ..g };
        assert!(!depthwise_rows::plane(
            &wide,
            &x,
            &wt,
            1.0,
            Activation::Relu,
            &mut y,
            &mut rows
        ));
    }
}
