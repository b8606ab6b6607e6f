//! Backend identity and the API version.

use std::fmt;

/// The version of this backend API. Bump the major on any incompatible change, the minor on
/// compatible additions; a backend built against `a.b` runs on a runtime speaking `a.c` with
/// `b <= c`.
pub const BACKEND_API_VERSION: BackendVersion = BackendVersion { major: 1, minor: 4 };

/// A backend API version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct BackendVersion {
    /// Incompatible changes.
    pub major: u32,
    /// Compatible additions.
    pub minor: u32,
}

impl BackendVersion {
    /// Whether a backend built against `self` can run on a runtime speaking `runtime`: the
    /// majors are equal and the backend's minor is not newer.
    pub fn is_compatible_with(self, runtime: BackendVersion) -> bool {
        self.major == runtime.major && self.minor <= runtime.minor
    }
}

impl fmt::Display for BackendVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

/// The longest backend id, in bytes: ids are short names (`CpuRef`, `GpuAcc`) printed in
/// reports and error messages, for static and dynamic backends alike.
pub const MAX_BACKEND_ID_LEN: usize = 64;

/// A backend's unique name: one to [`MAX_BACKEND_ID_LEN`] ASCII letters or digits (e.g.
/// `CpuRef`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BackendId(String);

impl BackendId {
    /// Validate and wrap a name.
    pub fn new(name: impl Into<String>) -> Result<Self, String> {
        let name = name.into();
        if name.len() > MAX_BACKEND_ID_LEN {
            // Not echoed whole: a hostile id could be megabytes long.
            let start: String = name.chars().take(16).collect();
            return Err(format!(
                "invalid backend id '{start}…': it has {} bytes; backend ids have at most {} \
                 letters and digits",
                name.len(),
                MAX_BACKEND_ID_LEN
            ));
        }
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric()) {
            return Err(format!(
                "invalid backend id '{name}': use one or more ASCII letters and digits"
            ));
        }
        Ok(BackendId(name))
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for BackendId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::str::FromStr for BackendId {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        BackendId::new(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_follow_the_seed_rules() {
        let api = BackendVersion { major: 2, minor: 4 };
        let v = |major, minor| BackendVersion { major, minor };
        assert!(v(2, 4).is_compatible_with(api));
        assert!(v(2, 1).is_compatible_with(api));
        assert!(!v(2, 5).is_compatible_with(api));
        assert!(!v(1, 4).is_compatible_with(api));
        assert!(!v(3, 4).is_compatible_with(api));
    }

    #[test]
    fn ids_are_alphanumeric() {
        assert!(BackendId::new("CpuRef").is_ok());
        assert!(BackendId::new("Gpu2").is_ok());
        assert!(BackendId::new("").is_err());
        assert!(BackendId::new("Cpu Ref").is_err());
        assert!(BackendId::new("Cpu_Ref").is_err());
        assert!(BackendId::new("A".repeat(MAX_BACKEND_ID_LEN)).is_ok());
        let long = BackendId::new("A".repeat(1 << 20)).unwrap_err();
        assert!(long.contains("1048576 bytes") && long.len() < 200, "{long}");
    }
}
