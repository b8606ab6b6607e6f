//! Building and reading flat attribute lists: [`Attrs`] writes them, [`Reader`] reads typed
//! values back with errors naming the op and attribute.

use super::auto_pad_name;
use crate::ops::{AttrValue, AutoPad, Window};
use crate::{CoreError, Result};

/// Builds an attribute list.
#[derive(Default)]
pub(super) struct Attrs(pub(super) Vec<(String, AttrValue)>);

impl Attrs {
    pub(super) fn int(mut self, name: &str, v: i64) -> Self {
        self.0.push((name.to_string(), AttrValue::Int(v)));
        self
    }
    pub(super) fn flag(self, name: &str, v: bool) -> Self {
        self.int(name, i64::from(v))
    }
    pub(super) fn usize(self, name: &str, v: usize) -> Self {
        self.int(name, i64::try_from(v).unwrap_or(i64::MAX))
    }
    pub(super) fn float(mut self, name: &str, v: f32) -> Self {
        self.0.push((name.to_string(), AttrValue::Float(v)));
        self
    }
    pub(super) fn double(mut self, name: &str, v: f64) -> Self {
        self.0.push((name.to_string(), AttrValue::Double(v)));
        self
    }
    pub(super) fn string(mut self, name: &str, v: &str) -> Self {
        self.0
            .push((name.to_string(), AttrValue::String(v.to_string())));
        self
    }
    pub(super) fn ints(mut self, name: &str, v: &[i64]) -> Self {
        self.0.push((name.to_string(), AttrValue::Ints(v.to_vec())));
        self
    }
    pub(super) fn usizes(self, name: &str, v: &[usize]) -> Self {
        let v: Vec<i64> = v
            .iter()
            .map(|&x| i64::try_from(x).unwrap_or(i64::MAX))
            .collect();
        self.ints(name, &v)
    }
    pub(super) fn floats(mut self, name: &str, v: &[f32]) -> Self {
        self.0
            .push((name.to_string(), AttrValue::Floats(v.to_vec())));
        self
    }
    pub(super) fn window(self, w: &Window) -> Self {
        self.usizes("kernel_shape", &w.kernel)
            .usizes("strides", &w.strides)
            .usizes("dilations", &w.dilations)
            .usizes("pads", &w.pads)
            .string("auto_pad", auto_pad_name(w.auto_pad))
    }
}

/// Reads typed attributes of one op, with errors naming the op and attribute.
pub(super) struct Reader<'a> {
    pub(super) op_type: &'a str,
    pub(super) attrs: &'a [(String, AttrValue)],
}

impl Reader<'_> {
    pub(super) fn get(&self, name: &str) -> Option<&AttrValue> {
        self.attrs.iter().find(|(n, _)| n == name).map(|(_, v)| v)
    }

    pub(super) fn err(&self, message: String) -> CoreError {
        CoreError::op("attributes", format!("{}: {message}", self.op_type))
    }

    pub(super) fn bad(&self, name: &str, value: impl std::fmt::Display) -> CoreError {
        self.err(format!("attribute '{name}' has an invalid value '{value}'"))
    }

    pub(super) fn need(&self, name: &str) -> Result<&AttrValue> {
        self.get(name)
            .ok_or_else(|| self.err(format!("attribute '{name}' is missing")))
    }

    pub(super) fn wrong(&self, name: &str, kind: &str, got: &AttrValue) -> CoreError {
        self.err(format!(
            "attribute '{name}' must be {kind}, got {}",
            kind_of(got)
        ))
    }

    pub(super) fn int(&self, name: &str) -> Result<i64> {
        match self.need(name)? {
            AttrValue::Int(v) => Ok(*v),
            other => Err(self.wrong(name, "an integer", other)),
        }
    }

    pub(super) fn flag(&self, name: &str) -> Result<bool> {
        match self.int(name)? {
            0 => Ok(false),
            1 => Ok(true),
            v => Err(self.bad(name, v)),
        }
    }

    pub(super) fn usize(&self, name: &str) -> Result<usize> {
        let v = self.int(name)?;
        usize::try_from(v).map_err(|_| self.bad(name, v))
    }

    pub(super) fn float(&self, name: &str) -> Result<f32> {
        match self.need(name)? {
            AttrValue::Float(v) => Ok(*v),
            other => Err(self.wrong(name, "a float", other)),
        }
    }

    pub(super) fn double(&self, name: &str) -> Result<f64> {
        match self.need(name)? {
            AttrValue::Double(v) => Ok(*v),
            AttrValue::Float(v) => Ok(f64::from(*v)),
            other => Err(self.wrong(name, "a double", other)),
        }
    }

    pub(super) fn string(&self, name: &str) -> Result<&str> {
        match self.need(name)? {
            AttrValue::String(v) => Ok(v),
            other => Err(self.wrong(name, "a string", other)),
        }
    }

    pub(super) fn ints(&self, name: &str) -> Result<Vec<i64>> {
        match self.need(name)? {
            AttrValue::Ints(v) => Ok(v.clone()),
            other => Err(self.wrong(name, "a list of integers", other)),
        }
    }

    pub(super) fn usizes(&self, name: &str) -> Result<Vec<usize>> {
        self.ints(name)?
            .into_iter()
            .map(|v| usize::try_from(v).map_err(|_| self.bad(name, v)))
            .collect()
    }

    pub(super) fn floats(&self, name: &str) -> Result<Vec<f32>> {
        match self.need(name)? {
            AttrValue::Floats(v) => Ok(v.clone()),
            other => Err(self.wrong(name, "a list of floats", other)),
        }
    }

    pub(super) fn window(&self) -> Result<Window> {
        Ok(Window {
            kernel: self.usizes("kernel_shape")?,
            strides: self.usizes("strides")?,
            dilations: self.usizes("dilations")?,
            pads: self.usizes("pads")?,
            auto_pad: match self.string("auto_pad")? {
                "NOTSET" => AutoPad::NotSet,
                "SAME_UPPER" => AutoPad::SameUpper,
                "SAME_LOWER" => AutoPad::SameLower,
                "VALID" => AutoPad::Valid,
                other => return Err(self.bad("auto_pad", other)),
            },
        })
    }
}

fn kind_of(v: &AttrValue) -> &'static str {
    match v {
        AttrValue::Int(_) => "an integer",
        AttrValue::Float(_) => "a float",
        AttrValue::Double(_) => "a double",
        AttrValue::String(_) => "a string",
        AttrValue::Ints(_) => "a list of integers",
        AttrValue::Floats(_) => "a list of floats",
    }
}
