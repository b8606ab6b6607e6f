//! The transposes against their definitions and the plain loops.

use super::*;

/// Transpose tiles of every size around the 8×8 blocks (1, 7, 8, 9, 17, 33 rows and
/// columns), with strides wider than the tile, leave the rest of `dst` alone; short
/// buffers are refused.
#[test]
fn transpose_tiles_match_the_definition() {
    for rows in [1, 7, 8, 9, 17, 33] {
        for cols in [1, 7, 8, 9, 17, 33] {
            let (ss, ds) = (cols + 3, rows + 5);
            let src: Vec<f32> = (0..rows * ss).map(|v| v as f32 * 0.5 - 7.0).collect();
            let mut dst = vec![f32::NAN; cols * ds];
            assert!(transpose_tile(&src, ss, rows, cols, &mut dst, ds));
            for j in 0..cols {
                for i in 0..ds {
                    let got = dst[j * ds + i];
                    if i < rows {
                        assert_eq!(got, src[i * ss + j], "{rows}x{cols} at ({i}, {j})");
                    } else {
                        assert!(got.is_nan(), "{rows}x{cols}: ({i}, {j}) written");
                    }
                }
            }
            let short = &mut dst[..(cols - 1) * ds + rows - 1];
            assert!(!transpose_tile(&src, ss, rows, cols, short, ds));
        }
    }
}

/// The vector transposes (AVX-512's 16×16 or AVX2's 8×8, whichever this CPU runs)
/// against the plain loops, on partial blocks (fewer than 16 or 8 lanes, runs that are
/// not a multiple of 16 or 8) and strides wider than the runs.
#[test]
fn lane_transposes_match_plain_loops() {
    for (n, len, stride) in [
        (8, 8, 8),
        (9, 24, 31),
        (16, 16, 16),
        (16, 37, 40),
        (5, 3, 3),
        (1, 1, 1),
        (16, 100, 100),
        (11, 17, 29),
    ] {
        let src: Vec<f32> = (0..(n - 1) * stride + len)
            .map(|i| i as f32 * 0.5 - 7.0)
            .collect();
        let mut want = vec![f32::NAN; len * BLOCK_LANES];
        gather_lanes_portable(&src, stride, n, len, &mut want, BLOCK_LANES);
        for i in 0..len {
            for l in 0..BLOCK_LANES {
                let v = if l < n { src[l * stride + i] } else { 0.0 };
                assert_eq!(want[i * BLOCK_LANES + l], v);
            }
        }
        let mut got = vec![f32::NAN; len * BLOCK_LANES];
        gather_lanes(&src, stride, n, len, &mut got);
        assert_eq!(got, want, "gather n{n} len{len} stride{stride}");
        let mut back_want = vec![-1.0f32; src.len()];
        scatter_lanes_portable(&want, len, n, &mut back_want, stride);
        let mut back = vec![-1.0f32; src.len()];
        scatter_lanes(&want, len, n, &mut back, stride);
        assert_eq!(back, back_want, "scatter n{n} len{len} stride{stride}");
        for l in 0..n {
            assert_eq!(
                back[l * stride..l * stride + len],
                src[l * stride..l * stride + len]
            );
        }
        // Twelve lanes a pixel (a GEMM A panel), and five (a masked last run), against
        // the plain loop.
        for pitch in [12, 5, 32] {
            if n <= pitch {
                let mut want_p = vec![f32::NAN; len * pitch];
                gather_lanes_portable(&src, stride, n, len, &mut want_p, pitch);
                let mut got_p = vec![f32::NAN; len * pitch];
                assert!(gather_lanes_pitched(
                    &src, stride, n, len, &mut got_p, pitch
                ));
                assert_eq!(got_p, want_p, "pitch {pitch}: n{n} len{len} stride{stride}");
                for i in 0..len {
                    for l in 0..pitch {
                        let v = if l < n { src[l * stride + i] } else { 0.0 };
                        assert_eq!(want_p[i * pitch + l], v);
                    }
                }
            } else {
                assert!(!gather_lanes_pitched(&src, stride, n, len, &mut got, pitch));
            }
        }
        // Too-short slices: nothing is touched.
        let mut short = vec![f32::NAN; len * BLOCK_LANES - 1];
        gather_lanes(&src, stride, n, len, &mut short);
        assert!(short.iter().all(|v| v.is_nan()));
    }
    // Up to 32 lanes a pixel (32 columns of a column-major GEMM B into one panel).
    for (n, len, stride) in [(17, 9, 11), (29, 40, 45), (32, 16, 16), (20, 3, 7)] {
        let src: Vec<f32> = (0..(n - 1) * stride + len)
            .map(|i| i as f32 * 0.25 - 3.0)
            .collect();
        let mut got = vec![f32::NAN; len * 32];
        assert!(gather_lanes_pitched(&src, stride, n, len, &mut got, 32));
        for i in 0..len {
            for l in 0..32 {
                let v = if l < n { src[l * stride + i] } else { 0.0 };
                assert_eq!(got[i * 32 + l], v, "pitch 32: n{n} len{len} ({i}, {l})");
            }
        }
    }
}
