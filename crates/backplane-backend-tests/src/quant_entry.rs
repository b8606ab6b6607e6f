//! Quantized sweep family "QEntry": a random int8/uint8 network as an ONNX QDQ export starts
//! and ends — an f32 NCHW image quantized per tensor, a 3×3 convolution (stride 1 or 2),
//! a depthwise 3×3 and a 1×1 projection as QDQ chains, then the classifier's pooling:
//! `DequantizeLinear → GlobalAveragePool | ReduceMean over H, W → QuantizeLinear`. A backend
//! that runs the chains channels-last (CpuAcc) quantizes the image inside its region and
//! pools the channels-last tensor: both ends of a region are checked here, on odd shapes.

use crate::quant_blocks::Block;
use crate::sweeps::Rng;
use backplane::core::ops::{PoolKind, ReduceDesc, ReduceKind};
use backplane::core::Op;
use backplane::{DataType, Network};

use super::quant_sweeps::QuantCase;

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// A random network of the family (see the module's description).
pub(crate) fn entry(r: &mut Rng) -> Result<QuantCase, String> {
    let dt = r.pick(&[DataType::I8, DataType::U8]);
    let (n, h, w) = (
        r.pick(&[1, 1, 2]),
        r.pick(&[1, 2, 5, 11, 24]),
        r.pick(&[1, 3, 7, 13, 24]),
    );
    let c = r.pick(&[1, 3, 4, 5]);
    let stem = r.pick(&[8, 16, 17, 32]);
    let stride = r.pick(&[1, 2, 2]);
    let cout = r.pick(&[1, 5, 16, 24]);
    let global = r.below(2) == 0;
    let x = r.tensor(DataType::F32, &[n, c, h, w], -1.0, 1.0)?;
    let mut b = Block {
        net: Network::new(),
        r,
        dt,
        requant: backplane::core::quant::Requantization::F32,
    };
    let xi = b.net.add_input("image", x.info().clone()).map_err(err)?;
    let x0 = b.quantize("image_q", xi, 1.0 / 100.0, c)?;
    let s = b.conv("stem", x0, stem, 3, stride, false)?;
    let d = b.conv("depthwise", s, stem, 3, 1, true)?;
    let p = b.conv("project", d, cout, 1, 1, false)?;
    let pf = b.dequantize("pool_dq", p)?;
    let pool = if global {
        Op::GlobalPool(PoolKind::Average)
    } else {
        Op::Reduce(ReduceDesc {
            kind: ReduceKind::Mean,
            axes: vec![2, 3],
            keepdims: false,
            noop_with_empty_axes: false,
        })
    };
    let pooled = b.one("pool", pool, &[pf])?;
    let out = b.quantize("pool_q", pooled, p.scale * 0.5, cout)?;
    b.net.mark_output(out.t).map_err(err)?;
    Ok(QuantCase {
        family: "QEntry",
        about: format!(
            "{dt} from an f32 image [{n},{c},{h},{w}]: 3×3 stride {stride} to {stem}, \
             depthwise, 1×1 to {cout}, {}",
            if global {
                "GlobalAveragePool"
            } else {
                "ReduceMean over H, W"
            }
        ),
        network: b.net,
        feed: vec![("image".into(), x)],
    })
}
