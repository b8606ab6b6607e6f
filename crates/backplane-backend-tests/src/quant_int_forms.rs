//! Quantized sweep family "QIntForm": the 8-bit integer forms TFLite's int8 HARD_SWISH and
//! AVERAGE_POOL_2D import as (issue 31) — `Lookup` through a random 256-entry table, then
//! `IntegerAveragePool` (TFLite's integer average: half away from zero) with 2×2 or 3×3
//! windows, strides 1 or 2, SAME or VALID, or the whole image — on int8 and uint8 images of
//! odd sizes and 1, 3, 17 or 257 channels, handed NHWC → NCHW as the importer does, after a
//! quantized 1×1 convolution or not (with one, a backend that runs int8 channels-last, CpuAcc,
//! runs them inside its region). Every backend must give CpuRef's bytes.

use crate::quant_blocks::{Block, Q};
use crate::quant_sweeps::{bytes, QuantCase};
use crate::sweeps::Rng;
use backplane::core::ops::{AutoPad, PoolDesc, PoolKind, Window};
use backplane::core::Op;
use backplane::DataType;

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// One lookup-then-pool chain.
pub(crate) fn int_forms(r: &mut Rng) -> Result<QuantCase, String> {
    let dt = r.pick(&[DataType::I8, DataType::U8]);
    let (n, h, w) = (
        r.pick(&[1, 1, 2]),
        r.pick(&[1, 2, 3, 7, 8]),
        r.pick(&[1, 2, 5, 9, 13]),
    );
    let c = r.pick(&[1, 3, 17, 257]);
    let x = bytes(r, dt, &[n, h, w, c])?;
    let (mut b, xt) = Block::nhwc_image(r, dt, &x)?;
    let conv = b.r.below(2) == 0;
    let mut t = xt;
    if conv {
        let zx = if dt == DataType::I8 { -5 } else { 120 };
        let x0 = Q {
            t: xt,
            scale: 0.05,
            zero: zx,
            channels: c,
        };
        t = b.conv("conv", x0, c, 1, 1, false)?.t;
    }
    let table = bytes(b.r, dt, &[256])?;
    let tc = b.constant("table", table)?;
    t = b.one("lookup", Op::Lookup, &[t, tc])?;
    let global = b.r.below(4) == 0;
    let k = b.r.pick(&[2, 3]);
    let s = b.r.pick(&[1, 2]);
    let same = global || b.r.below(2) == 0 || h < k || w < k;
    let window = if global {
        Window {
            kernel: vec![h, w],
            strides: vec![1, 1],
            dilations: vec![1, 1],
            pads: Vec::new(),
            auto_pad: AutoPad::Valid,
        }
    } else {
        Window {
            kernel: vec![k, k],
            strides: vec![s, s],
            dilations: vec![1, 1],
            pads: Vec::new(),
            auto_pad: if same {
                AutoPad::SameUpper
            } else {
                AutoPad::Valid
            },
        }
    };
    let pool = Op::IntegerAveragePool(PoolDesc {
        kind: PoolKind::Average,
        window,
        ceil_mode: false,
        count_include_pad: false,
    });
    let y = b.one("pool", pool, &[t])?;
    b.net.mark_output(y).map_err(err)?;
    Ok(QuantCase {
        family: "QIntForm",
        about: format!(
            "{dt} NHWC [{n},{h},{w},{c}]{} → Lookup → IntegerAveragePool {}",
            if conv { " → 1×1 conv" } else { "" },
            if global {
                "over the image".to_string()
            } else {
                format!("{k}×{k}/{s} {}", if same { "SAME" } else { "VALID" })
            }
        ),
        network: b.net,
        feed: vec![("x".into(), x)],
    })
}
