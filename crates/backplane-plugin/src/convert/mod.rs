//! Conversions between backplane's Rust types and the C structs of [`crate::abi`]: building
//! them (owned, on the side that passes them) and reading them (on the side that receives).

use crate::abi;
use backplane_core::ops::dtype_from_onnx_code;
use backplane_core::DataType;
use std::ffi::{c_char, CStr, CString};

mod layer;
mod subgraph;

pub(crate) use layer::{
    crosses_the_abi, read_layer_desc, read_tensor_info, OwnedLayerDesc, OwnedTensorInfo,
};
pub(crate) use subgraph::{read_subgraph, read_substitution, OwnedSubgraph, OwnedSubstitution};

/// A C string from Rust text; interior NULs (which C cannot carry) are dropped.
pub(crate) fn c_string(s: &str) -> CString {
    CString::new(s.replace('\0', "")).unwrap_or_default()
}

/// Call `f` with a host-owned message buffer of `N` bytes on the stack; returns its status
/// and, when the status is not [`abi::STATUS_OK`], the text the plugin wrote.
pub(crate) fn with_message<const N: usize>(
    f: impl FnOnce(*mut abi::Message) -> abi::Status,
) -> (abi::Status, String) {
    let (status, text) = with_message_text::<N>(f);
    if status == abi::STATUS_OK {
        (status, String::new())
    } else {
        (status, text)
    }
}

/// Like [`with_message`], always returning the text (for calls that report through it).
pub(crate) fn with_message_text<const N: usize>(
    f: impl FnOnce(*mut abi::Message) -> abi::Status,
) -> (abi::Status, String) {
    let mut buf = [0u8; N];
    let mut msg = abi::Message {
        struct_size: abi::size_u32::<abi::Message>(),
        reserved: 0,
        data: buf.as_mut_ptr().cast::<c_char>(),
        capacity: N,
    };
    let status = f(&mut msg);
    let end = buf.iter().position(|&b| b == 0).unwrap_or(N);
    (status, String::from_utf8_lossy(&buf[..end]).into_owned())
}

/// Write `text` into a plugin-side view of a host [`abi::Message`], truncated to fit.
///
/// # Safety
/// `msg` is null or points to a valid [`abi::Message`] whose `data` has `capacity` writable
/// bytes.
pub(crate) unsafe fn write_message(msg: *mut abi::Message, text: &str) {
    // SAFETY: the caller guarantees `msg` is null or valid.
    let Some(m) = (unsafe { msg.as_mut() }) else {
        return;
    };
    if m.data.is_null() || m.capacity == 0 {
        return;
    }
    let mut n = text.len().min(m.capacity - 1);
    while !text.is_char_boundary(n) {
        n -= 1;
    }
    // SAFETY: `data` has `capacity` writable bytes and `n + 1 <= capacity`; the source is a
    // distinct Rust string.
    unsafe {
        std::ptr::copy_nonoverlapping(text.as_ptr(), m.data.cast::<u8>(), n);
        *m.data.add(n) = 0;
    }
}

/// Whether a struct that declares `struct_size` covers the field ending at `end`.
fn covers(struct_size: u32, end: usize) -> bool {
    struct_size as usize >= end
}

/// A slice from a C pointer and length; null with length 0 is the empty slice.
///
/// # Safety
/// When `len > 0`, `ptr` points to `len` valid, initialized `T`s that outlive `'a`.
pub(crate) unsafe fn slice<'a, T>(ptr: *const T, len: usize) -> Result<&'a [T], String> {
    if len == 0 {
        return Ok(&[]);
    }
    if ptr.is_null() {
        return Err(format!("null array of {len} entries"));
    }
    // SAFETY: non-null, and the caller guarantees `len` valid entries.
    Ok(unsafe { std::slice::from_raw_parts(ptr, len) })
}

/// Rust text from a C string.
///
/// # Safety
/// `ptr` is null or a NUL-terminated string that outlives `'a`.
pub(crate) unsafe fn text<'a>(ptr: *const c_char, what: &str) -> Result<&'a str, String> {
    if ptr.is_null() {
        return Err(format!("{what} is null"));
    }
    // SAFETY: non-null and NUL-terminated per the caller.
    unsafe { CStr::from_ptr(ptr) }
        .to_str()
        .map_err(|_| format!("{what} is not UTF-8"))
}

fn dtype(code: i32) -> Result<DataType, String> {
    dtype_from_onnx_code(i64::from(code)).ok_or_else(|| format!("unknown element type {code}"))
}

#[cfg(test)]
mod tests {
    use super::layer::*;
    use super::subgraph::*;
    use super::*;
    use backplane_backend_api::{LayerDesc, ReplacementLayer, Substitution, ValueRef};
    use backplane_core::ops::{onnx_dtype_code, AttrValue};
    use backplane_core::ops::{ConvDesc, CustomOp, Window};
    use backplane_core::{LayerId, Network, Op, Quantization, Shape, Tensor, TensorInfo};
    use std::collections::HashSet;
    use std::sync::Arc;

    #[test]
    fn element_type_codes_cover_every_type_and_refuse_unknown_ones() {
        for d in DataType::ALL {
            assert_eq!(dtype(onnx_dtype_code(d) as i32), Ok(d));
        }
        assert_eq!(dtype(crate::abi::DTYPE_I4), Ok(DataType::I4));
        assert_eq!(
            dtype(crate::abi::DTYPE_F8E5M2FNUZ),
            Ok(DataType::F8E5M2Fnuz)
        );
        for unknown in [0, 8, 14, 23, -1, i32::MAX] {
            assert!(dtype(unknown).is_err(), "{unknown}");
        }
    }

    #[test]
    fn layer_descriptions_round_trip_through_c() {
        let w = Tensor::from_vec(vec![2, 1, 3, 3], (0..18).map(|v| v as f32).collect()).unwrap();
        let desc = LayerDesc {
            name: "conv1".into(),
            op: Op::Conv(ConvDesc {
                window: Window {
                    kernel: vec![3, 3],
                    pads: vec![1, 1, 1, 1],
                    ..Default::default()
                },
                group: 1,
            }),
            inputs: vec![
                TensorInfo::new(DataType::F32, vec![1, 1, 8, 8]),
                w.info().clone(),
            ],
            outputs: vec![TensorInfo {
                dtype: DataType::U8,
                shape: Shape::new(vec![1, 2, 8, 8]),
                quant: Quantization::PerAxis {
                    axis: 1,
                    scales: vec![0.5, 0.25],
                    zero_points: vec![3, 4],
                },
            }],
            constants: vec![None, Some(Arc::new(w))],
        };
        let owned = OwnedLayerDesc::new(&desc);
        // SAFETY: `owned` is a valid description for the duration of the call.
        let back = unsafe { read_layer_desc(owned.as_ptr()) }.unwrap();
        assert_eq!(back.name, desc.name);
        assert_eq!(back.op, desc.op);
        assert_eq!(back.inputs, desc.inputs);
        assert_eq!(back.outputs, desc.outputs);
        assert!(back.constants[0].is_none());
        assert_eq!(
            back.constants[1].as_ref().unwrap().bytes(),
            desc.constants[1].as_ref().unwrap().bytes()
        );
    }

    #[test]
    fn custom_ops_get_their_outputs_from_the_layer() {
        let out = TensorInfo::new(DataType::F32, vec![4]);
        let desc = LayerDesc {
            name: "fused".into(),
            op: Op::Custom(CustomOp {
                domain: "Acme".into(),
                op_type: "Fused".into(),
                attributes: vec![("alpha".into(), AttrValue::Double(0.1))],
                outputs: vec![out.clone()],
                payload: None,
            }),
            inputs: vec![out.clone()],
            outputs: vec![out],
            constants: vec![None],
        };
        let owned = OwnedLayerDesc::new(&desc);
        // SAFETY: valid for the call.
        let back = unsafe { read_layer_desc(owned.as_ptr()) }.unwrap();
        assert_eq!(back.op, desc.op);
    }

    /// x + c → Add → Relu → y, with c a constant.
    fn add_relu() -> Network {
        use backplane_core::ops::{BinaryOp, UnaryOp};
        let mut n = Network::new();
        let x = n
            .add_input("x", TensorInfo::new(DataType::F32, vec![2]))
            .unwrap();
        let c = n
            .add_constant("c", Tensor::from_vec(vec![2], vec![1.0f32, -1.0]).unwrap())
            .unwrap();
        let s = n
            .add_layer_named("add", Op::Binary(BinaryOp::Add), &[x, c], &["s".into()])
            .unwrap()[0];
        let y = n
            .add_layer_named("relu", Op::Unary(UnaryOp::Relu), &[s], &["y".into()])
            .unwrap()[0];
        n.mark_output(y).unwrap();
        n
    }

    #[test]
    fn subgraphs_and_substitutions_round_trip_through_c() {
        let host = add_relu();
        let layers = vec![LayerId(0), LayerId(1)];
        let c = OwnedSubgraph::new(&host, &layers);
        // SAFETY: valid for the call.
        let read = unsafe { read_subgraph(c.as_ptr()) }.unwrap();
        let n = &read.network;
        assert_eq!(n.layers().len(), 2);
        assert_eq!(n.layers()[0].name, "add");
        assert_eq!(n.inputs().len(), 1, "x is an input, c a constant");
        let c_id = n.find_tensor("c").unwrap();
        assert!(n.tensor(c_id).constant().is_some());
        let y = n.find_tensor("y").unwrap();
        assert_eq!(n.outputs(), [y], "only y is used outside");
        assert_eq!(read.layer_ids, [0, 1]);
        for (local, &h) in read.tensor_ids.iter().enumerate() {
            assert_eq!(n.tensors()[local].name, host.tensors()[h as usize].name);
        }
        // The plugin's answer, in its own ids, back in the host's.
        let fused = Op::Custom(backplane_core::ops::CustomOp {
            domain: "Acme".into(),
            op_type: "AddRelu".into(),
            attributes: vec![],
            outputs: vec![n.tensor(y).info.clone()],
            payload: None,
        });
        let extra = Arc::new(Tensor::from_vec(vec![2], vec![0.0f32, 0.0]).unwrap());
        let sub = Substitution {
            replaced: vec![LayerId(0), LayerId(1)],
            replacement: vec![
                ReplacementLayer {
                    name: "pre".into(),
                    op: Op::Binary(backplane_core::ops::BinaryOp::Add),
                    inputs: vec![
                        ValueRef::Existing(n.find_tensor("x").unwrap()),
                        ValueRef::NewConstant(extra.clone()),
                    ],
                    outputs: vec![None],
                },
                ReplacementLayer {
                    name: "add+relu".into(),
                    op: fused.clone(),
                    inputs: vec![
                        ValueRef::Produced { layer: 0, slot: 0 },
                        ValueRef::Existing(c_id),
                    ],
                    outputs: vec![Some(y)],
                },
            ],
        };
        let owned = OwnedSubstitution::new(&read, &sub).unwrap();
        let allowed: HashSet<LayerId> = layers.iter().copied().collect();
        // SAFETY: valid for the call.
        let back = unsafe { read_substitution(owned.as_ptr(), &host, &allowed) }.unwrap();
        assert_eq!(back.replaced, layers);
        assert_eq!(back.replacement.len(), 2);
        assert_eq!(back.replacement[1].name, "add+relu");
        assert_eq!(back.replacement[1].op, fused);
        let host_y = host.find_tensor("y").unwrap();
        assert_eq!(back.replacement[1].outputs, [Some(host_y)]);
        assert_eq!(back.replacement[0].outputs, [None]);
        match &back.replacement[0].inputs[..] {
            [ValueRef::Existing(x), ValueRef::NewConstant(k)] => {
                assert_eq!(*x, host.find_tensor("x").unwrap());
                assert_eq!(k.bytes(), extra.bytes());
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            back.replacement[1].inputs[0],
            ValueRef::Produced { layer: 0, slot: 0 }
        ));
        // Replacing a layer outside the subgraph is refused.
        let only_add: HashSet<LayerId> = [LayerId(0)].into_iter().collect();
        // SAFETY: valid for the call.
        let err = unsafe { read_substitution(owned.as_ptr(), &host, &only_add) }.unwrap_err();
        assert!(err.contains("not in its subgraph"), "{err}");
    }

    #[test]
    fn every_standard_op_crosses_the_abi() {
        assert!(crosses_the_abi(&Op::Unary(
            backplane_core::ops::UnaryOp::Relu
        )));
        assert!(crosses_the_abi(&Op::Custom(
            backplane_core::ops::CustomOp {
                domain: "Acme".into(),
                op_type: "X".into(),
                attributes: vec![],
                outputs: vec![],
                payload: None,
            }
        )));
    }

    #[test]
    fn messages_are_truncated_on_a_char_boundary() {
        let (status, text) = with_message::<5>(|m| {
            // SAFETY: the message is valid for the call.
            unsafe { write_message(m, "héllo") };
            abi::STATUS_FAILED
        });
        assert_eq!((status, text.as_str()), (abi::STATUS_FAILED, "hél"));
        let (status, text) = with_message::<5>(|_| abi::STATUS_OK);
        assert_eq!((status, text.as_str()), (abi::STATUS_OK, ""));
        // SAFETY: null is allowed.
        unsafe { write_message(std::ptr::null_mut(), "x") };
    }
}
