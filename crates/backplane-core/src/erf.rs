//! The Gauss error function and its complement, in f64 (Rust's std has neither).
//!
//! * `|x| <= 1.5`: the Maclaurin series
//!   `erf(x) = 2/sqrt(pi) * sum_n (-1)^n x^(2n+1) / (n! (2n+1))`, summed until the terms stop
//!   mattering. Its terms stay below 2 there, so cancellation costs at most a few ulps of f64,
//!   also for `erfc = 1 - erf` (erfc(1.5) = 0.034).
//! * `|x| > 1.5`: the continued fraction (Laplace)
//!   `erfc(x) = exp(-x^2)/sqrt(pi) * 1/(x + (1/2)/(x + 1/(x + (3/2)/(x + 2/(x + ...)))))`,
//!   evaluated bottom-up at a fixed depth, which is accurate to f64 precision there and keeps
//!   full *relative* accuracy for the tiny tails (needed by exact Gelu at large negative x).

/// Beyond this magnitude the continued fraction is used instead of the series.
const SERIES_LIMIT: f64 = 1.5;
/// Depth of the continued fraction (ample for x > 1.5; see the convergence test).
const FRACTION_DEPTH: u32 = 120;

/// erf(x) by its Maclaurin series; meant for |x| <= SERIES_LIMIT.
fn erf_series(x: f64) -> f64 {
    let x2 = x * x;
    // power = (-1)^n x^(2n+1) / n!
    let mut power = x;
    let mut sum = 0.0;
    for n in 0..200u32 {
        let term = power / f64::from(2 * n + 1);
        sum += term;
        if term.abs() <= 1e-17 * sum.abs() {
            break;
        }
        power *= -x2 / f64::from(n + 1);
    }
    sum * std::f64::consts::FRAC_2_SQRT_PI
}

/// erfc(x) by the continued fraction; meant for x > SERIES_LIMIT.
fn erfc_fraction(x: f64) -> f64 {
    // Bottom-up: f = x + (k/2) / f for k = depth..1.
    let mut f = x;
    for k in (1..=FRACTION_DEPTH).rev() {
        f = x + f64::from(k) / 2.0 / f;
    }
    (-x * x).exp() / (std::f64::consts::PI.sqrt() * f)
}

/// The Gauss error function.
pub fn erf(x: f64) -> f64 {
    if x.is_nan() {
        x
    } else if x > SERIES_LIMIT {
        1.0 - erfc_fraction(x)
    } else if x < -SERIES_LIMIT {
        erfc_fraction(-x) - 1.0
    } else {
        erf_series(x)
    }
}

/// The complementary error function `1 - erf(x)`, accurate in the tails.
pub fn erfc(x: f64) -> f64 {
    if x.is_nan() {
        x
    } else if x > SERIES_LIMIT {
        erfc_fraction(x)
    } else if x < -SERIES_LIMIT {
        2.0 - erfc_fraction(-x)
    } else {
        1.0 - erf_series(x)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_rel(actual: f64, expected: f64, tol: f64) {
        let err = ((actual - expected) / expected).abs();
        assert!(
            err <= tol,
            "got {actual:e}, expected {expected:e} (relative error {err:e})"
        );
    }

    #[test]
    fn matches_tabulated_values() {
        // Reference values of erf / erfc (Abramowitz & Stegun tables, extended precision).
        assert_eq!(erf(0.0), 0.0);
        assert_rel(erf(0.1), 0.112_462_916_018_284_9, 1e-14);
        assert_rel(erf(0.5), 0.520_499_877_813_046_5, 1e-14);
        assert_rel(erf(1.0), 0.842_700_792_949_714_9, 1e-14);
        assert_rel(erf(-1.0), -0.842_700_792_949_714_9, 1e-14);
        assert_rel(erf(1.5), 0.966_105_146_475_310_7, 1e-14);
        assert_rel(erf(2.0), 0.995_322_265_018_952_7, 1e-14);
        assert_rel(erf(3.0), 0.999_977_909_503_001_4, 1e-14);
        assert_rel(erfc(2.0), 4.677_734_981_047_266e-3, 1e-12);
        assert_rel(erfc(3.0), 2.209_049_699_858_544e-5, 1e-12);
        assert_rel(erfc(4.0), 1.541_725_790_028_002e-8, 1e-12);
        assert_rel(erfc(5.0), 1.537_459_794_428_035e-12, 1e-12);
        assert_rel(erfc(10.0), 2.088_487_583_762_545e-45, 1e-12);
        assert_rel(erfc(-3.0), 1.999_977_909_503_001_4, 1e-15);
        assert_eq!(erf(f64::INFINITY), 1.0);
        assert_eq!(erf(f64::NEG_INFINITY), -1.0);
        assert_eq!(erfc(f64::INFINITY), 0.0);
        assert!(erf(f64::NAN).is_nan());
    }

    #[test]
    fn both_methods_agree_where_they_meet() {
        for x in [1.4, 1.5, 1.6] {
            let series = 1.0 - erf_series(x);
            let fraction = erfc_fraction(x);
            assert_rel(fraction, series, 1e-13);
        }
        // erfc(2.5) = 4.069520174449590e-4 (where the series would have lost 1e-11).
        assert_rel(erfc(2.5), 4.069_520_174_449_59e-4, 1e-14);
        assert_rel(erfc(1.5), 3.389_485_352_468_927e-2, 1e-14);
    }

    #[test]
    fn fraction_has_converged_at_its_depth() {
        // Doubling the depth at the worst point (smallest x) must not change the result.
        let x: f64 = SERIES_LIMIT;
        let mut f = x;
        for k in (1..=2 * FRACTION_DEPTH).rev() {
            f = x + f64::from(k) / 2.0 / f;
        }
        let deeper = (-x * x).exp() / (std::f64::consts::PI.sqrt() * f);
        assert_rel(erfc_fraction(x), deeper, 1e-15);
    }
}
