//! The 8-bit integer forms a TFLite model imports as (`Op::Lookup`, `Op::IntegerAveragePool`,
//! issue 31) become CpuAcc's quantized layers: a lookup with a constant table the byte table
//! ([`crate::quant::lookup`]), the integer average pool the quantized pool with its
//! integer rounding ([`crate::quant::pool`], `round_away`). Both then join the channels-last
//! regions as the folded chains do.

use super::Chains;
use crate::quant::lookup::QLookupDesc;
use crate::quant::pool::QPoolDesc;
use backplane_backend_api::{Substitution, ValueRef};
use backplane_core::ops::LOOKUP_ENTRIES;
use backplane_core::{DataType, LayerId, Op};

impl Chains<'_> {
    /// Fold layer `id` when it is a lookup with a constant table or a 2-D integer average
    /// pool.
    pub(super) fn fold_integer_form(&self, id: LayerId) -> Option<Substitution> {
        let layer = self.net.layer(id);
        let y = self.single_output(id)?;
        let y_info = self.net.tensor(y).info.clone();
        match (&layer.op, layer.inputs.as_slice()) {
            (Op::Lookup, &[x, t]) => {
                let table = self.constant(t)?;
                let eight = matches!(table.dtype(), DataType::I8 | DataType::U8);
                if !eight || table.bytes().len() != LOOKUP_ENTRIES {
                    return None;
                }
                let desc = QLookupDesc {
                    table: table.bytes().to_vec(),
                };
                let op = Op::Custom(desc.to_op(y_info));
                Some(self.one_layer(vec![id], op, vec![ValueRef::Existing(x)], y))
            }
            (Op::IntegerAveragePool(p), &[x]) => {
                let info = &self.net.tensor(x).info;
                let desc = QPoolDesc::integer(p, info.shape.dims(), info.dtype)?;
                let op = Op::Custom(desc.to_op(y_info));
                Some(self.one_layer(vec![id], op, vec![ValueRef::Existing(x)], y))
            }
            _ => None,
        }
    }
}
