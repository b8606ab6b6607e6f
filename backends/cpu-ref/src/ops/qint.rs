//! The integer forms of quantized operators whose rounding a model format defines
//! (`backplane_core::ops` `Lookup`, `IntegerAveragePool`): a byte table lookup, and TFLite's
//! integer average pool (sum of the stored integers, divided by the taps counted, rounded
//! half away from zero, saturated). These are the reference the faster backends match bit
//! for bit.

use super::indexing::{for_each_index, product};
use super::pool::average_taps;
use crate::Result;
use backplane_backend_api::BackendError;
use backplane_core::ops::{div_round_half_away, lookup_index, PoolDesc, LOOKUP_ENTRIES};
use backplane_core::shape::strides_of;
use backplane_core::{DataType, TensorView, TensorViewMut};

/// The integer value of byte `b` of an 8-bit tensor of type `dt`.
fn widen(dt: DataType, b: u8) -> i64 {
    if dt == DataType::I8 {
        i64::from(b as i8)
    } else {
        i64::from(b)
    }
}

/// The byte of an 8-bit value of type `dt`, saturated to the type's range.
fn narrow(dt: DataType, v: i64) -> u8 {
    if dt == DataType::I8 {
        v.clamp(-128, 127) as i8 as u8
    } else {
        v.clamp(0, 255) as u8
    }
}

/// Lookup: `y[i] = table[byte of x[i]]`.
pub(crate) fn lookup(
    x: &TensorView<'_>,
    table: &TensorView<'_>,
    y: &mut TensorViewMut<'_>,
) -> Result<()> {
    if table.data.len() != LOOKUP_ENTRIES || x.data.len() != y.data.len() {
        return Err(BackendError::Other(format!(
            "Lookup: a table of {} bytes, {} input and {} output bytes",
            table.data.len(),
            x.data.len(),
            y.data.len()
        )));
    }
    let dt = x.info.dtype;
    for (o, &b) in y.data.iter_mut().zip(x.data) {
        *o = table.data[lookup_index(dt, widen(dt, b) as i32)];
    }
    Ok(())
}

/// IntegerAveragePool over an `[N, C, spatial...]` 8-bit tensor.
pub(crate) fn integer_average_pool(
    desc: &PoolDesc,
    x: &TensorView<'_>,
    y: &mut TensorViewMut<'_>,
) -> Result<()> {
    let dt = x.info.dtype;
    let dims = x.dims();
    let geo = desc.geometry(dims)?;
    let spatial = &dims[2..];
    let strides = strides_of(spatial);
    let in_plane = product(spatial);
    let planes = dims[0] * dims[1];
    let out_plane = product(&geo.output);
    if x.data.len() != planes * in_plane || y.data.len() != planes * out_plane {
        return Err(BackendError::Other(format!(
            "IntegerAveragePool: {} input and {} output bytes for {dims:?}",
            x.data.len(),
            y.data.len()
        )));
    }
    let mut written = 0;
    for p in 0..planes {
        let plane = &x.data[p * in_plane..(p + 1) * in_plane];
        for_each_index(&geo.output, |o| {
            let mut sum = 0i64;
            let count = average_taps(&geo, spatial, &strides, o, desc.count_include_pad, |at| {
                sum += widen(dt, plane[at])
            }) as i64;
            // Every window of a valid geometry holds a tap; an empty one gives 0.
            let v = if count > 0 {
                div_round_half_away(sum, count)
            } else {
                0
            };
            y.data[written] = narrow(dt, v);
            written += 1;
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use backplane_core::ops::{AutoPad, PoolKind, Window};
    use backplane_core::TensorInfo;

    fn pool_desc(k: usize, s: usize, same: bool) -> PoolDesc {
        PoolDesc {
            kind: PoolKind::Average,
            window: Window {
                kernel: vec![k, k],
                strides: vec![s, s],
                dilations: Vec::new(),
                pads: Vec::new(),
                auto_pad: if same {
                    AutoPad::SameUpper
                } else {
                    AutoPad::Valid
                },
            },
            ceil_mode: false,
            count_include_pad: false,
        }
    }

    fn run_pool(desc: &PoolDesc, dt: DataType, dims: [usize; 4], x: &[u8]) -> Vec<u8> {
        let xi = TensorInfo::new(dt, dims.to_vec());
        let yi = Op::IntegerAveragePool(desc.clone())
            .infer(&[&xi])
            .unwrap()
            .remove(0);
        let mut y = vec![0u8; yi.shape.elements()];
        let xv = TensorView { info: &xi, data: x };
        let mut yv = TensorViewMut {
            info: &yi,
            data: &mut y,
        };
        integer_average_pool(desc, &xv, &mut yv).unwrap();
        y
    }
    use backplane_core::Op;

    /// The AVERAGE_POOL_2D cases `scripts/probe_tflite_q8_rules.py` recorded (NHWC): the
    /// pool's bytes equal LiteRT's (default interpreter and reference kernels).
    #[test]
    fn average_pools_equal_litert() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../testdata/tflite/q8_rules/cases.json"
        );
        let text = std::fs::read_to_string(path).unwrap();
        let cases: serde_json::Value = serde_json::from_str(&text).unwrap();
        let ints = |v: &serde_json::Value| -> Vec<i64> {
            v.as_array()
                .unwrap()
                .iter()
                .map(|e| e.as_i64().unwrap())
                .collect()
        };
        let mut checked = 0;
        for case in cases.as_array().unwrap() {
            if case["op"] != "AVERAGE_POOL_2D" {
                continue;
            }
            let shape = ints(&case["shape"]);
            let (h, w, c) = (shape[0] as usize, shape[1] as usize, shape[2] as usize);
            let k = case["kernel"].as_u64().unwrap() as usize;
            let s = case["stride"].as_u64().unwrap() as usize;
            let desc = pool_desc(k, s, case["padding"] == "same");
            let x = ints(&case["x"]);
            // NHWC → NCHW bytes.
            let mut xc = vec![0u8; x.len()];
            for (i, &v) in x.iter().enumerate() {
                let (p, ch) = (i / c, i % c);
                xc[ch * h * w + p] = v as i8 as u8;
            }
            let y = run_pool(&desc, DataType::I8, [1, c, h, w], &xc);
            let plane = y.len() / c;
            let ours: Vec<i64> = (0..y.len())
                .map(|i| i64::from(y[(i % c) * plane + i / c] as i8))
                .collect();
            assert_eq!(ours, ints(&case["y"]), "case {checked}");
            assert_eq!(ours, ints(&case["y_ref"]), "case {checked}");
            checked += 1;
        }
        assert_eq!(checked, 6);
    }

    #[test]
    fn uint8_pools_round_half_up_and_lookups_read_bytes() {
        // 2×2 windows of u8: sums 2 → 0.5 → 1, 5 → 1.25 → 1, 1022 → 255.5 → 256 → 255.
        let x = [0u8, 1, 1, 0, 1, 1, 2, 1, 255, 255, 255, 254];
        let desc = pool_desc(2, 2, false);
        let y = run_pool(&desc, DataType::U8, [3, 1, 2, 2], &x);
        assert_eq!(y, [1, 1, 255]);
        // int8: -1 + -2 + 0 + 0 = -3 → -0.75 → -1; -2 → -0.5 → -1.
        let x = [255u8, 254, 0, 0, 255, 255, 0, 0];
        let y = run_pool(&desc, DataType::I8, [2, 1, 2, 2], &x);
        assert_eq!(y, [255, 255]);
        let table: Vec<u8> = (0..=255u8).map(|b| b.wrapping_mul(3)).collect();
        let ti = TensorInfo::new(DataType::U8, vec![256]);
        let xi = TensorInfo::new(DataType::I8, vec![3]);
        let mut y = [0u8; 3];
        let yi = TensorInfo::new(DataType::U8, vec![3]);
        lookup(
            &TensorView {
                info: &xi,
                data: &[0, 1, 255],
            },
            &TensorView {
                info: &ti,
                data: &table,
            },
            &mut TensorViewMut {
                info: &yi,
                data: &mut y,
            },
        )
        .unwrap();
        assert_eq!(y, [0, 3, 253]);
    }
}
