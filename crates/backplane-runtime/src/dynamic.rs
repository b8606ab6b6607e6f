//! Dynamic backends: finding shared objects, loading them and registering the valid ones in
//! a runtime's own registry, as Arm NN's dynamic backend loading design describes, with these
//! differences:
//!
//! * the registry is the runtime's own, so dropping one runtime never unregisters another's
//!   backends, and several runtimes can load the same file, each with its own instance;
//! * the file-name check escapes the dot of `.so` (Arm NN's regex matches `backendXso`);
//! * what was loaded and why each other file was skipped is kept in a
//!   [`DynamicBackendReport`] instead of only a log line;
//! * libraries are never closed (see [`backplane_plugin::host`]); instances are destroyed
//!   when the runtime is dropped.
//!
//! Search paths: the colon-separated list in `BACKPLANE_DYNAMIC_BACKEND_PATHS` at build time,
//! replaced by the one directory of [`DynamicBackendsOption::Path`], or none at all with
//! [`DynamicBackendsOption::Disabled`]. Each path must exist, be a directory and be absolute;
//! others are skipped with a warning in the report.

use crate::{BackendFactory, BackendRegistry, RuntimeOptions};
use backplane_backend_api::{Backend, BackendId, BackendVersion};
use backplane_plugin::host::{DynamicBackend, LoadError, PluginLibrary, HOST_ABI_VERSION};
use std::collections::HashSet;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The search paths fixed when this crate was built (`BACKPLANE_DYNAMIC_BACKEND_PATHS`).
pub const BUILD_TIME_PATHS: Option<&str> = option_env!("BACKPLANE_DYNAMIC_BACKEND_PATHS");

/// Where a runtime looks for dynamic backends.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum DynamicBackendsOption {
    /// The directories fixed at build time (`BACKPLANE_DYNAMIC_BACKEND_PATHS`, colon-separated;
    /// none if it was not set).
    #[default]
    BuildTimePaths,
    /// This one directory instead (e.g. for tests, or a command-line override). An invalid
    /// directory means no dynamic backends, with a warning.
    Path(PathBuf),
    /// No dynamic backends at all.
    Disabled,
}

/// A dynamic backend that was loaded and registered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadedDynamicBackend {
    /// Its id.
    pub id: BackendId,
    /// The backend's own version (e.g. `1.0.0`).
    pub version: String,
    /// The plugin ABI version it was built against.
    pub abi_version: BackendVersion,
    /// The file it came from (canonical).
    pub file: PathBuf,
}

/// Why a file in a search path was not loaded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RejectReason {
    /// The name does not follow `<vendor>_<name>_backend.so[.<version>]`.
    #[error("the file name does not match <vendor>_<name>_backend.so[.<version>] (letters and digits only in vendor and name)")]
    BadName,
    /// Named like a backend, but a directory or another file that is not a regular file.
    #[error("it is {0}, not a shared object")]
    NotAFile(&'static str),
    /// A symbolic link that leads nowhere.
    #[error("it is a symbolic link to a file that does not exist")]
    DanglingLink,
    /// The same file (by canonical path) was found earlier.
    #[error("it is the same file as {0}, which was found first")]
    DuplicateFile(PathBuf),
    /// The shared object is not a usable dynamic backend.
    #[error(transparent)]
    Load(#[from] LoadError),
    /// Its id is taken by a backend registered earlier.
    #[error("backend id '{id}' is already registered by {by}")]
    DuplicateId {
        /// The id.
        id: BackendId,
        /// Who has it: "a static backend" or the other file.
        by: String,
    },
}

/// A file that was found but not loaded, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RejectedFile {
    /// The file as found in the search path.
    pub file: PathBuf,
    /// Why it was skipped.
    pub reason: RejectReason,
}

impl fmt::Display for RejectedFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.file.display(), self.reason)
    }
}

/// What dynamic-backend loading did when a runtime was created.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DynamicBackendReport {
    /// The valid search paths, in the order they were scanned.
    pub search_paths: Vec<PathBuf>,
    /// Backends loaded and registered, in load order.
    pub loaded: Vec<LoadedDynamicBackend>,
    /// Files skipped, with the reason.
    pub rejected: Vec<RejectedFile>,
    /// Problems with the search paths themselves.
    pub warnings: Vec<String>,
}

impl DynamicBackendReport {
    /// The loaded backend with this id, if it is dynamic.
    pub fn backend(&self, id: &BackendId) -> Option<&LoadedDynamicBackend> {
        self.loaded.iter().find(|b| &b.id == id)
    }
}

/// How many tensor handles of the dynamic backends loaded from `file` are mapped into host
/// memory now (every runtime of the process); it returns to its earlier value once the
/// networks that used them are unloaded, which the backend test kit checks.
pub fn mapped_handles(file: &Path) -> usize {
    backplane_plugin::host::mapped_handles(file)
}

/// Split a colon-separated path list, dropping empty entries and later duplicates.
pub fn parse_path_list(list: &str) -> Vec<String> {
    let mut seen = HashSet::new();
    list.split(':')
        .filter(|p| !p.is_empty())
        .filter(|p| seen.insert(p.to_string()))
        .map(str::to_string)
        .collect()
}

/// The build-time search paths, parsed.
pub fn default_backend_paths() -> Vec<String> {
    BUILD_TIME_PATHS.map(parse_path_list).unwrap_or_default()
}

/// Whether `path` can be searched: it must be absolute, exist and be a directory.
pub fn is_path_valid(path: &Path) -> Result<(), String> {
    if path.as_os_str().is_empty() {
        return Err("the path is empty".into());
    }
    if !path.is_absolute() {
        return Err(format!("'{}' is not an absolute path", path.display()));
    }
    match std::fs::metadata(path) {
        Err(e) => Err(format!("'{}' cannot be read: {e}", path.display())),
        Ok(m) if !m.is_dir() => Err(format!("'{}' is not a directory", path.display())),
        Ok(_) => Ok(()),
    }
}

/// The directories to search under `option`, in order; invalid ones are left out with a
/// warning.
pub fn backend_paths(option: &DynamicBackendsOption, warnings: &mut Vec<String>) -> Vec<PathBuf> {
    match option {
        DynamicBackendsOption::Disabled => Vec::new(),
        DynamicBackendsOption::Path(p) => match is_path_valid(p) {
            Ok(()) => vec![p.clone()],
            Err(why) => {
                warnings.push(format!(
                    "the dynamic backends path is not valid, so no dynamic backends are loaded: {why}"
                ));
                Vec::new()
            }
        },
        DynamicBackendsOption::BuildTimePaths => valid_paths(&default_backend_paths(), warnings),
    }
}

/// The valid entries of a path list, warning about the others.
pub fn valid_paths(paths: &[String], warnings: &mut Vec<String>) -> Vec<PathBuf> {
    paths
        .iter()
        .map(PathBuf::from)
        .filter(|p| match is_path_valid(p) {
            Ok(()) => true,
            Err(why) => {
                warnings.push(format!("a dynamic backends path is skipped: {why}"));
                false
            }
        })
        .collect()
}

/// Whether a file name follows `<vendor>_<name>_backend.so[.<version>]`: vendor and name one
/// or more ASCII letters or digits, the version dot-separated numbers.
pub fn is_backend_file_name(name: &str) -> bool {
    let Some((stem, rest)) = name.split_once("_backend.so") else {
        return false;
    };
    let alnum = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric());
    let Some((vendor, backend)) = stem.split_once('_') else {
        return false;
    };
    if !alnum(vendor) || !alnum(backend) {
        return false;
    }
    // Nothing, or `.N(.N)*`.
    rest.is_empty()
        || rest.strip_prefix('.').is_some_and(|v| {
            v.split('.')
                .all(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        })
}

/// The candidate shared objects in `paths`: each directory's entries in sorted order, names
/// checked, symbolic links followed, files deduplicated by canonical path (first wins).
/// Returns (file as found, canonical path); the rest go to `rejected`.
pub fn shared_objects(
    paths: &[PathBuf],
    rejected: &mut Vec<RejectedFile>,
    warnings: &mut Vec<String>,
) -> Vec<(PathBuf, PathBuf)> {
    let mut found: Vec<(PathBuf, PathBuf)> = Vec::new();
    for dir in paths {
        let entries = match std::fs::read_dir(dir) {
            Ok(e) => e,
            Err(e) => {
                warnings.push(format!("cannot list '{}': {e}", dir.display()));
                continue;
            }
        };
        let mut files: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
        files.sort();
        for file in files {
            let name = file
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            let reject = |rejected: &mut Vec<RejectedFile>, reason| {
                rejected.push(RejectedFile {
                    file: file.clone(),
                    reason,
                })
            };
            // Directories (and links to them) are not candidates: only one named like a
            // backend is worth a word. Other files that are not regular (a FIFO would block
            // the open for ever) are refused.
            if let Ok(meta) = std::fs::metadata(&file) {
                if meta.is_dir() {
                    if is_backend_file_name(&name) {
                        reject(rejected, RejectReason::NotAFile("a directory"));
                    }
                    continue;
                }
                if !meta.is_file() && is_backend_file_name(&name) {
                    reject(rejected, RejectReason::NotAFile("not a regular file"));
                    continue;
                }
            }
            if !is_backend_file_name(&name) {
                reject(rejected, RejectReason::BadName);
                continue;
            }
            let canonical = match file.canonicalize() {
                Ok(c) => c,
                Err(_) => {
                    reject(rejected, RejectReason::DanglingLink);
                    continue;
                }
            };
            if let Some((first, _)) = found.iter().find(|(_, c)| c == &canonical) {
                let first = first.clone();
                reject(rejected, RejectReason::DuplicateFile(first));
                continue;
            }
            found.push((file, canonical));
        }
    }
    found
}

/// Find, load and register the dynamic backends `options` asks for into `registry`; returns
/// what happened. Never fails: every problem skips that file or path and is reported.
pub fn load_dynamic_backends(
    registry: &mut BackendRegistry,
    options: &RuntimeOptions,
) -> DynamicBackendReport {
    let mut report = DynamicBackendReport::default();
    report.search_paths = backend_paths(&options.dynamic_backends, &mut report.warnings);
    let files = shared_objects(
        &report.search_paths,
        &mut report.rejected,
        &mut report.warnings,
    );
    for w in &report.warnings {
        tracing::warn!("dynamic backends: {w}");
    }
    for (file, canonical) in files {
        // Said before the library is opened: a plugin that crashes the process in its
        // initializers or factory is the last file named (run with -v to see it).
        tracing::info!("loading dynamic backend file {}", canonical.display());
        match load_one(registry, options, &report, &canonical) {
            Ok(loaded) => {
                tracing::info!(
                    "loaded dynamic backend {} {} from {}",
                    loaded.id,
                    loaded.version,
                    loaded.file.display()
                );
                report.loaded.push(loaded)
            }
            Err(reason) => {
                let rejected = RejectedFile { file, reason };
                tracing::warn!("skipped dynamic backend file {rejected}");
                report.rejected.push(rejected)
            }
        }
    }
    report
}

fn load_one(
    registry: &mut BackendRegistry,
    options: &RuntimeOptions,
    report: &DynamicBackendReport,
    file: &Path,
) -> Result<LoadedDynamicBackend, RejectReason> {
    // The id first: a backend whose id is taken is refused before its factory runs.
    let id = PluginLibrary::read_id(file)?;
    if registry.is_registered(&id) {
        let by = report.backend(&id).map_or_else(
            || String::from("a static backend"),
            |b| b.file.display().to_string(),
        );
        return Err(RejectReason::DuplicateId { id, by });
    }
    let library = PluginLibrary::open(file)?;
    let backend_options = options
        .backend_options
        .get(&id)
        .cloned()
        .unwrap_or_default();
    let instance = library.instantiate(&backend_options)?;
    let backend = DynamicBackend::new(instance);
    let loaded = LoadedDynamicBackend {
        id: id.clone(),
        version: backend.version(),
        abi_version: library.version(),
        file: library.path().to_path_buf(),
    };
    let factory: BackendFactory = Arc::new(move || Box::new(backend.clone()) as Box<dyn Backend>);
    registry
        .register(id.clone(), factory)
        .map_err(|_| RejectReason::DuplicateId {
            id,
            by: String::from("a backend registered earlier"),
        })?;
    Ok(loaded)
}

/// The plugin ABI version this runtime loads (major equal, plugin minor not newer).
pub fn abi_version() -> BackendVersion {
    HOST_ABI_VERSION
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_names_follow_the_guide_table() {
        let valid = [
            "Arm_GpuAcc_backend.so",
            "Arm_GpuAcc_backend.so.1",
            "Arm_GpuAcc_backend.so.1.2",
            "Arm_GpuAcc_backend.so.1.2.3",
            "Arm_GpuAcc_backend.so.10.1.27",
            "Arm123_GpuAcc_backend.so",
            "Arm_GpuAcc456_backend.so",
            "Arm_CpuAcc_backend.so",
        ];
        let invalid = [
            "Arm_GpuAcc_backend.so.10.1.33.",
            "Arm_GpuAcc_backend.so.3.4..5",
            "Arm_GpuAcc_backend.so.1,1.1",
            "Arm%Co_GpuAcc_backend.so",
            "Arm_Gpu.Acc_backend.so",
            "GpuAcc_backend.so",
            "_GpuAcc_backend.so",
            "Arm__backend.so",
            "Arm_GpuAcc.so",
            "__backend.so",
            "__.so",
            "Arm_GpuAcc_backend",
            "Arm_GpuAcc_backend_v1.2.so",
            // Arm NN's unescaped dot would accept these.
            "Arm_GpuAcc_backendXso",
            "Arm_GpuAcc_backend.soX",
            "Arm_GpuAcc_backend.so1",
            "Arm_Gpu_Acc_backend.so",
            "",
        ];
        for n in valid {
            assert!(is_backend_file_name(n), "{n} should be valid");
        }
        for n in invalid {
            assert!(!is_backend_file_name(n), "{n} should be invalid");
        }
    }

    #[test]
    fn path_lists_drop_empty_entries_and_duplicates_keeping_order() {
        assert!(parse_path_list("").is_empty());
        assert!(parse_path_list(":::").is_empty());
        assert_eq!(parse_path_list("::/p1:"), ["/p1"]);
        assert_eq!(parse_path_list("/a:/b:/a:/c:/b"), ["/a", "/b", "/c"]);
        assert_eq!(parse_path_list("/only"), ["/only"]);
    }

    #[test]
    fn paths_must_be_absolute_existing_directories() {
        let tmp = std::env::temp_dir();
        assert!(is_path_valid(&tmp).is_ok());
        assert!(is_path_valid(Path::new("")).is_err());
        assert!(is_path_valid(Path::new("relative/dir")).is_err());
        assert!(is_path_valid(&tmp.join("backplane-no-such-dir-4242")).is_err());
        let file = tmp.join(format!("backplane-path-test-{}", std::process::id()));
        std::fs::write(&file, b"x").unwrap();
        assert!(is_path_valid(&file)
            .unwrap_err()
            .contains("not a directory"));
        std::fs::remove_file(&file).unwrap();
    }

    #[test]
    fn disabled_means_no_paths_and_no_warnings() {
        let mut w = Vec::new();
        assert!(backend_paths(&DynamicBackendsOption::Disabled, &mut w).is_empty());
        assert!(w.is_empty());
        let bad = DynamicBackendsOption::Path(PathBuf::from("/backplane/no/such/dir"));
        assert!(backend_paths(&bad, &mut w).is_empty());
        assert_eq!(w.len(), 1, "{w:?}");
    }

    #[test]
    fn default_paths_come_from_the_build() {
        let expected = BUILD_TIME_PATHS.map(parse_path_list).unwrap_or_default();
        assert_eq!(default_backend_paths(), expected);
    }
}
