//! Typed access to a node's attributes, with the spec's defaults applied by the callers.

use crate::proto::attribute_proto::AttributeType;
use crate::proto::{AttributeProto, NodeProto};

/// A node's attributes. Errors are messages; the caller adds the node context.
pub(crate) struct Attrs<'a> {
    attrs: &'a [AttributeProto],
}

fn kind(a: &AttributeProto) -> Option<AttributeType> {
    a.r#type.and_then(|t| AttributeType::try_from(t).ok())
}

impl<'a> Attrs<'a> {
    pub(crate) fn new(node: &'a NodeProto) -> Self {
        Attrs {
            attrs: &node.attribute,
        }
    }

    /// The attribute, if present.
    pub(crate) fn get(&self, name: &str) -> Option<&'a AttributeProto> {
        self.attrs.iter().find(|a| a.name.as_deref() == Some(name))
    }

    fn check(
        a: &AttributeProto,
        name: &str,
        want: AttributeType,
        present: bool,
    ) -> Result<(), String> {
        match kind(a) {
            Some(k) if k == want => Ok(()),
            // IR 1 files carry no type; go by which field is set.
            None | Some(AttributeType::Undefined) if present => Ok(()),
            Some(k) => Err(format!(
                "attribute '{name}' should be {} but is {}",
                want.as_str_name(),
                k.as_str_name()
            )),
            None => Err(format!(
                "attribute '{name}' has no {} value",
                want.as_str_name()
            )),
        }
    }

    /// An integer attribute.
    pub(crate) fn int(&self, name: &str) -> Result<Option<i64>, String> {
        let Some(a) = self.get(name) else {
            return Ok(None);
        };
        Self::check(a, name, AttributeType::Int, a.i.is_some())?;
        Ok(Some(a.i.unwrap_or(0)))
    }

    /// An integer attribute with a default.
    pub(crate) fn int_or(&self, name: &str, default: i64) -> Result<i64, String> {
        Ok(self.int(name)?.unwrap_or(default))
    }

    /// A 0/1 attribute with a default.
    pub(crate) fn flag(&self, name: &str, default: bool) -> Result<bool, String> {
        match self.int(name)? {
            None => Ok(default),
            Some(0) => Ok(false),
            Some(1) => Ok(true),
            Some(v) => Err(format!("attribute '{name}' must be 0 or 1, got {v}")),
        }
    }

    /// A float attribute.
    pub(crate) fn float(&self, name: &str) -> Result<Option<f32>, String> {
        let Some(a) = self.get(name) else {
            return Ok(None);
        };
        Self::check(a, name, AttributeType::Float, a.f.is_some())?;
        Ok(Some(a.f.unwrap_or(0.0)))
    }

    /// A float attribute with a default.
    pub(crate) fn float_or(&self, name: &str, default: f32) -> Result<f32, String> {
        Ok(self.float(name)?.unwrap_or(default))
    }

    /// A string attribute.
    pub(crate) fn string(&self, name: &str) -> Result<Option<String>, String> {
        let Some(a) = self.get(name) else {
            return Ok(None);
        };
        Self::check(a, name, AttributeType::String, a.s.is_some())?;
        let bytes = a.s.as_deref().unwrap_or(&[]);
        String::from_utf8(bytes.to_vec())
            .map(Some)
            .map_err(|_| format!("attribute '{name}' is not valid UTF-8"))
    }

    /// A string attribute with a default.
    pub(crate) fn string_or(&self, name: &str, default: &str) -> Result<String, String> {
        Ok(self.string(name)?.unwrap_or_else(|| default.to_string()))
    }

    /// An integer-list attribute.
    pub(crate) fn ints(&self, name: &str) -> Result<Option<Vec<i64>>, String> {
        let Some(a) = self.get(name) else {
            return Ok(None);
        };
        Self::check(a, name, AttributeType::Ints, true)?;
        Ok(Some(a.ints.clone()))
    }

    /// A float-list attribute.
    pub(crate) fn floats(&self, name: &str) -> Result<Option<Vec<f32>>, String> {
        let Some(a) = self.get(name) else {
            return Ok(None);
        };
        Self::check(a, name, AttributeType::Floats, true)?;
        Ok(Some(a.floats.clone()))
    }

    /// The names of all attributes present.
    pub(crate) fn names(&self) -> impl Iterator<Item = &'a str> {
        self.attrs.iter().filter_map(|a| a.name.as_deref())
    }
}
