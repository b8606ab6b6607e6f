//! Sliding-window geometry shared by convolution and pooling: output sizes and padding.

use crate::{CoreError, Result};

/// ONNX `auto_pad`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum AutoPad {
    /// Use the explicit pads.
    #[default]
    NotSet,
    /// Pad so that output = ceil(input / stride); extra padding at the end.
    SameUpper,
    /// Pad so that output = ceil(input / stride); extra padding at the beginning.
    SameLower,
    /// No padding.
    Valid,
}

/// Window parameters of a convolution or pooling, per spatial axis.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Window {
    /// Kernel extent per spatial axis.
    pub kernel: Vec<usize>,
    /// Strides per spatial axis (empty means all 1).
    pub strides: Vec<usize>,
    /// Dilations per spatial axis (empty means all 1).
    pub dilations: Vec<usize>,
    /// Explicit pads: all beginnings then all ends (empty means all 0).
    pub pads: Vec<usize>,
    /// Automatic padding, overriding `pads` unless `NotSet`.
    pub auto_pad: AutoPad,
}

/// The resolved geometry of a window over a concrete input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Geometry {
    /// Output extent per spatial axis.
    pub output: Vec<usize>,
    /// Padding before each spatial axis.
    pub pads_begin: Vec<usize>,
    /// Padding after each spatial axis.
    pub pads_end: Vec<usize>,
    /// Stride per spatial axis.
    pub strides: Vec<usize>,
    /// Dilation per spatial axis.
    pub dilations: Vec<usize>,
    /// Kernel extent per spatial axis.
    pub kernel: Vec<usize>,
}

fn expand(v: &[usize], n: usize, default: usize, what: &str) -> Result<Vec<usize>> {
    if v.is_empty() {
        Ok(vec![default; n])
    } else if v.len() == n {
        if v.contains(&0) {
            return Err(CoreError::op(
                "window",
                format!("{what} must be positive, got {v:?}"),
            ));
        }
        Ok(v.to_vec())
    } else {
        Err(CoreError::op(
            "window",
            format!("{what} has {} values, expected {n}", v.len()),
        ))
    }
}

impl Window {
    /// Resolve the window over `input` spatial dims. `ceil_mode` rounds the output up (pooling).
    pub fn geometry(&self, input: &[usize], ceil_mode: bool) -> Result<Geometry> {
        let n = input.len();
        if self.kernel.len() != n {
            return Err(CoreError::op(
                "window",
                format!(
                    "kernel has {} dims but input has {n} spatial dims",
                    self.kernel.len()
                ),
            ));
        }
        let strides = expand(&self.strides, n, 1, "strides")?;
        let dilations = expand(&self.dilations, n, 1, "dilations")?;
        let pads = if self.pads.is_empty() {
            vec![0; 2 * n]
        } else if self.pads.len() == 2 * n {
            self.pads.clone()
        } else {
            return Err(CoreError::op(
                "window",
                format!("pads has {} values, expected {}", self.pads.len(), 2 * n),
            ));
        };
        let mut g = Geometry {
            output: vec![0; n],
            pads_begin: vec![0; n],
            pads_end: vec![0; n],
            strides: strides.clone(),
            dilations: dilations.clone(),
            kernel: self.kernel.clone(),
        };
        for i in 0..n {
            let dk = (self.kernel[i].saturating_sub(1))
                .checked_mul(dilations[i])
                .and_then(|x| x.checked_add(1))
                .ok_or_else(|| CoreError::op("window", "kernel extent overflows"))?;
            let s = strides[i];
            match self.auto_pad {
                AutoPad::SameUpper | AutoPad::SameLower => {
                    let out = input[i].div_ceil(s);
                    let needed = (out.saturating_sub(1)) * s + dk;
                    let total = needed.saturating_sub(input[i]);
                    let small = total / 2;
                    let (b, e) = if self.auto_pad == AutoPad::SameUpper {
                        (small, total - small)
                    } else {
                        (total - small, small)
                    };
                    g.output[i] = out;
                    g.pads_begin[i] = b;
                    g.pads_end[i] = e;
                }
                AutoPad::Valid | AutoPad::NotSet => {
                    let (b, e) = if self.auto_pad == AutoPad::Valid {
                        (0, 0)
                    } else {
                        (pads[i], pads[n + i])
                    };
                    let padded = input[i] + b + e;
                    if padded < dk {
                        return Err(CoreError::op(
                            "window",
                            format!(
                                "kernel extent {dk} is larger than the padded input {padded} on spatial axis {i}"
                            ),
                        ));
                    }
                    let span = padded - dk;
                    let mut out = if ceil_mode {
                        span.div_ceil(s)
                    } else {
                        span / s
                    } + 1;
                    // A window must start inside the input or the left padding.
                    if ceil_mode && (out - 1) * s >= input[i] + b {
                        out -= 1;
                    }
                    g.output[i] = out;
                    g.pads_begin[i] = b;
                    g.pads_end[i] = e;
                }
            }
        }
        Ok(g)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn win(kernel: Vec<usize>, strides: Vec<usize>, pads: Vec<usize>, auto_pad: AutoPad) -> Window {
        Window {
            kernel,
            strides,
            dilations: vec![],
            pads,
            auto_pad,
        }
    }

    #[test]
    fn explicit_pads() {
        let g = win(vec![3, 3], vec![1, 1], vec![1, 1, 1, 1], AutoPad::NotSet)
            .geometry(&[5, 5], false)
            .unwrap();
        assert_eq!(g.output, vec![5, 5]);
        let g = win(vec![3], vec![2], vec![], AutoPad::NotSet)
            .geometry(&[7], false)
            .unwrap();
        assert_eq!(g.output, vec![3]);
    }

    #[test]
    fn same_padding_puts_the_odd_pad_where_asked() {
        let g = win(vec![2], vec![1], vec![], AutoPad::SameUpper)
            .geometry(&[4], false)
            .unwrap();
        assert_eq!((g.output[0], g.pads_begin[0], g.pads_end[0]), (4, 0, 1));
        let g = win(vec![2], vec![1], vec![], AutoPad::SameLower)
            .geometry(&[4], false)
            .unwrap();
        assert_eq!((g.output[0], g.pads_begin[0], g.pads_end[0]), (4, 1, 0));
    }

    #[test]
    fn ceil_mode_rounds_up_but_never_starts_in_the_end_padding() {
        let g = win(vec![3], vec![2], vec![], AutoPad::NotSet)
            .geometry(&[6], true)
            .unwrap();
        assert_eq!(g.output, vec![3]);
        let g = win(vec![2], vec![2], vec![0, 1], AutoPad::NotSet)
            .geometry(&[4], true)
            .unwrap();
        assert_eq!(g.output, vec![2]);
    }

    #[test]
    fn kernel_larger_than_input_is_an_error() {
        assert!(win(vec![5], vec![], vec![], AutoPad::NotSet)
            .geometry(&[3], false)
            .is_err());
    }
}
