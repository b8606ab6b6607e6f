//! Feature unification only: this crate has no code. See its Cargo.toml.
