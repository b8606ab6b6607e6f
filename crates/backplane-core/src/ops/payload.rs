//! A backend's typed description of a custom layer it made, carried in the graph as it is.

use std::any::Any;
use std::fmt;
use std::sync::Arc;

/// The typed parameters of a [`super::CustomOp`] that a backend substituted (a fused layer):
/// the backend builds a value of its own type, the graph carries it untouched, and the same
/// backend takes it back with [`CustomPayload::get`] when it plans the layer, so nothing is
/// written out as attributes and parsed again.
///
/// Equality and `Debug` go by the value's `Debug` text, which describes the value whole: two
/// payloads are equal when their values print the same.
#[derive(Clone)]
pub struct CustomPayload {
    value: Arc<dyn Any + Send + Sync>,
    text: Arc<str>,
}

impl CustomPayload {
    /// Wrap `value`.
    pub fn new<T: Any + Send + Sync + fmt::Debug>(value: T) -> Self {
        let text: Arc<str> = format!("{value:?}").into();
        CustomPayload {
            value: Arc::new(value),
            text,
        }
    }

    /// The value, when it is a `T`.
    pub fn get<T: Any>(&self) -> Option<&T> {
        self.value.downcast_ref::<T>()
    }
}

impl fmt::Debug for CustomPayload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl PartialEq for CustomPayload {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.value, &other.value) || self.text == other.text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq)]
    struct Spec {
        k: usize,
    }

    #[test]
    fn the_value_comes_back_typed_and_compares_by_value() {
        let p = CustomPayload::new(Spec { k: 3 });
        assert_eq!(p.get::<Spec>(), Some(&Spec { k: 3 }));
        assert!(p.get::<String>().is_none());
        assert_eq!(p, CustomPayload::new(Spec { k: 3 }));
        assert_ne!(p, CustomPayload::new(Spec { k: 4 }));
        assert_eq!(format!("{p:?}"), "Spec { k: 3 }");
    }
}
