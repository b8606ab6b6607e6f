//! Opening a plugin's shared object once per process, the never-closed library cache, and
//! the checks of its entry points, id, version and function table.

use super::instance::{COptions, PluginInstance};
use super::{LoadError, HOST_ABI_VERSION, MESSAGE_BYTES};
use crate::abi::{self, BackendVTable};
use crate::convert::{c_string, with_message};
use backplane_backend_api::{BackendId, BackendOptions, BackendVersion};
use libloading::Library;
use std::ffi::{c_void, CStr};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// What is counted per library file, for the life of the process.
#[derive(Debug, Default)]
pub(super) struct LibraryCounts {
    /// Backend instances alive.
    pub(super) instances: AtomicUsize,
    /// Tensor handles of its instances mapped into host memory now.
    pub(super) mapped: AtomicUsize,
}

/// An opened library and its counts, for the life of the process.
pub(super) struct CachedLibrary {
    pub(super) path: PathBuf,
    pub(super) library: &'static Library,
    pub(super) counts: &'static LibraryCounts,
}

/// The process-wide cache of opened libraries; never closed (see the module docs).
pub(super) fn library_cache() -> &'static Mutex<Vec<CachedLibrary>> {
    static CACHE: OnceLock<Mutex<Vec<CachedLibrary>>> = OnceLock::new();
    CACHE.get_or_init(|| Mutex::new(Vec::new()))
}

/// How many backend instances made from the library at `path` (any runtime) are alive; 0
/// for a library never opened.
pub fn live_instances(path: &Path) -> usize {
    let Ok(canonical) = path.canonicalize() else {
        return 0;
    };
    let cache = library_cache().lock().unwrap_or_else(|e| e.into_inner());
    cache
        .iter()
        .find(|c| c.path == canonical)
        .map_or(0, |c| c.counts.instances.load(Ordering::SeqCst))
}

/// How many library handles this process holds for the file at `path`: 1 once it has been
/// opened (by any number of runtimes), 0 before.
pub fn library_handles(path: &Path) -> usize {
    let Ok(canonical) = path.canonicalize() else {
        return 0;
    };
    library_cache()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .filter(|c| c.path == canonical)
        .count()
}

/// How many distinct libraries this process has opened (and keeps open).
pub fn open_libraries() -> usize {
    library_cache()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .len()
}

/// Whether the library at `path` exports `symbol` with C linkage (a diagnostic for backend
/// authors: it opens the library and keeps it open, like every load).
pub fn exports_symbol(path: &Path, symbol: &str) -> Result<bool, LoadError> {
    if path.as_os_str().is_empty() {
        return Err(LoadError::EmptyPath);
    }
    let canonical = path
        .canonicalize()
        .map_err(|e| LoadError::Open(format!("{}: {e}", path.display())))?;
    let (lib, _) = open_library(&canonical)?;
    let mut name = symbol.as_bytes().to_vec();
    name.push(0);
    // SAFETY: the symbol is only looked up, never called or dereferenced, so its type does
    // not matter; a data pointer type is used.
    Ok(unsafe { lib.get::<*const c_void>(&name) }.is_ok())
}

/// How many tensor handles of backends made from the library at `path` (any runtime) are
/// mapped into host memory now; 0 for a library never opened. Every handle is unmapped
/// before it is destroyed, so this returns to its earlier value once the networks that
/// used them are unloaded: the backend test kit checks it.
pub fn mapped_handles(path: &Path) -> usize {
    let Ok(canonical) = path.canonicalize() else {
        return 0;
    };
    let cache = library_cache().lock().unwrap_or_else(|e| e.into_inner());
    cache
        .iter()
        .find(|c| c.path == canonical)
        .map_or(0, |c| c.counts.mapped.load(Ordering::SeqCst))
}

/// Open `path` (canonical) once per process and keep it open.
pub(super) fn open_library(
    path: &Path,
) -> Result<(&'static Library, &'static LibraryCounts), LoadError> {
    let mut cache = library_cache().lock().unwrap_or_else(|e| e.into_inner());
    if let Some(c) = cache.iter().find(|c| c.path == path) {
        return Ok((c.library, c.counts));
    }
    // SAFETY: opening a library runs its initializers. A dynamic backend is, by the ABI's
    // contract, a library whose initializers are safe to run; the runtime only opens files
    // found in the directories the application chose to trust.
    let lib = unsafe { Library::new(path) }.map_err(|e| LoadError::Open(e.to_string()))?;
    // Leaked on purpose: libraries are never closed (see the module docs).
    let library: &'static Library = Box::leak(Box::new(lib));
    let counts: &'static LibraryCounts = Box::leak(Box::default());
    cache.push(CachedLibrary {
        path: path.to_path_buf(),
        library,
        counts,
    });
    Ok((library, counts))
}

/// Look up an entry point.
///
/// # Safety
/// `T` must be the function-pointer type the ABI gives `symbol`.
pub(super) unsafe fn entry_point<T: Copy>(
    lib: &'static Library,
    symbol: &'static [u8],
) -> Result<T, LoadError> {
    let name = std::str::from_utf8(symbol.strip_suffix(b"\0").unwrap_or(symbol)).unwrap_or("?");
    // SAFETY: the caller guarantees `T` is the symbol's type under the ABI. The library is
    // never unloaded, so the pointer stays valid for the life of the process.
    unsafe { lib.get::<T>(symbol) }
        .map(|s| *s)
        .map_err(|e| LoadError::MissingEntryPoint {
            symbol: name,
            detail: e.to_string(),
        })
}

/// Whether a backend built against `plugin` can be loaded by a host speaking `host`.
pub fn is_compatible(plugin: BackendVersion, host: BackendVersion) -> bool {
    plugin.is_compatible_with(host)
}

/// A checked dynamic-backend library: its id, version and function table.
pub struct PluginLibrary {
    pub(super) path: PathBuf,
    pub(super) id: BackendId,
    pub(super) version: BackendVersion,
    pub(super) table: BackendVTable,
    pub(super) counts: &'static LibraryCounts,
}

impl std::fmt::Debug for PluginLibrary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PluginLibrary")
            .field("path", &self.path)
            .field("id", &self.id)
            .field("version", &self.version)
            .finish()
    }
}

/// The table's entries, checked, with those the declared size or minor does not cover
/// cleared.
///
/// # Safety
/// `ptr` is non-null and points to at least `struct_size` readable bytes of a table.
pub(super) unsafe fn read_table(ptr: *const BackendVTable) -> Result<BackendVTable, LoadError> {
    let header = field_end!(BackendVTable, reserved);
    // SAFETY: every table starts with the 16-byte header, per the ABI.
    let size = unsafe { (*ptr).struct_size } as usize;
    if size < header {
        return Err(LoadError::BadTable(format!(
            "struct_size {size} is too small"
        )));
    }
    // SAFETY: as above.
    let (major, minor) = unsafe { ((*ptr).abi_major, (*ptr).abi_minor) };
    if major != HOST_ABI_VERSION.major || minor > HOST_ABI_VERSION.minor {
        return Err(LoadError::BadTable(format!(
            "it declares ABI {major}.{minor}, which this runtime (ABI {HOST_ABI_VERSION}) cannot use"
        )));
    }
    let needed = BackendVTable::min_size_for_minor(minor);
    if size < needed {
        return Err(LoadError::BadTable(format!(
            "struct_size {size} is smaller than ABI {major}.{minor} needs ({needed})"
        )));
    }
    let mut table = std::mem::MaybeUninit::<BackendVTable>::zeroed();
    let n = size.min(std::mem::size_of::<BackendVTable>());
    // SAFETY: the plugin's table has `size >= n` readable bytes; ours has room for `n`. An
    // all-zero table is valid (every entry an `Option` of a function pointer, `None`), and the
    // copied bytes are the plugin's valid entries.
    let mut table = unsafe {
        std::ptr::copy_nonoverlapping(ptr.cast::<u8>(), table.as_mut_ptr().cast::<u8>(), n);
        table.assume_init()
    };
    if minor < 1 {
        // A 1.0 plugin's bytes past its table are not entries, even if its size says so.
        table.create_memory_manager = None;
        table.memory_manager_acquire = None;
        table.memory_manager_release = None;
        table.destroy_memory_manager = None;
        table.create_context = None;
        table.destroy_context = None;
        table.context_before_load = None;
        table.context_after_load = None;
        table.context_before_unload = None;
        table.context_after_unload = None;
        table.capabilities = None;
    }
    if minor < 2 {
        // Likewise for the 1.2 entries of a 1.0 or 1.1 plugin.
        table.tensor_handle_factories = None;
        table.handle_factory_preferences = None;
        table.create_tensor_handle = None;
        table.destroy_tensor_handle = None;
        table.map_tensor_handle = None;
        table.unmap_tensor_handle = None;
        table.optimize_subgraph = None;
    }
    if minor < 3 {
        // And the 1.3 entry of an older plugin.
        table.context_after_execute = None;
    }
    let required = [
        ("create_instance", table.create_instance.is_some()),
        ("destroy_instance", table.destroy_instance.is_some()),
        ("is_layer_supported", table.is_layer_supported.is_some()),
        (
            "create_workload_factory",
            table.create_workload_factory.is_some(),
        ),
        (
            "destroy_workload_factory",
            table.destroy_workload_factory.is_some(),
        ),
        ("create_workload", table.create_workload.is_some()),
        ("execute_workload", table.execute_workload.is_some()),
        ("destroy_workload", table.destroy_workload.is_some()),
    ];
    if let Some((name, _)) = required.iter().find(|(_, present)| !present) {
        return Err(LoadError::BadTable(format!(
            "the required entry '{name}' is null"
        )));
    }
    let mm = [
        table.memory_manager_acquire.is_some(),
        table.memory_manager_release.is_some(),
        table.destroy_memory_manager.is_some(),
    ];
    if table.create_memory_manager.is_some() && mm.contains(&false) {
        return Err(LoadError::BadTable(
            "create_memory_manager is set without memory_manager_acquire, memory_manager_release and destroy_memory_manager".into(),
        ));
    }
    if table.tensor_handle_factories.is_some()
        && (table.create_tensor_handle.is_none() || table.destroy_tensor_handle.is_none())
    {
        return Err(LoadError::BadTable(
            "tensor_handle_factories is set without create_tensor_handle and destroy_tensor_handle"
                .into(),
        ));
    }
    if table.map_tensor_handle.is_some() != table.unmap_tensor_handle.is_some() {
        return Err(LoadError::BadTable(
            "map_tensor_handle and unmap_tensor_handle must be set together".into(),
        ));
    }
    if table.create_context.is_some() && table.destroy_context.is_none() {
        return Err(LoadError::BadTable(
            "create_context is set without destroy_context".into(),
        ));
    }
    Ok(table)
}

/// The longest id a dynamic backend may have, in bytes: the same limit as static backends'
/// ([`BackendId::new`] checks it), checked here on the raw bytes before they are copied.
pub use backplane_backend_api::MAX_BACKEND_ID_LEN;

/// Open (once per process) the library at `path` and read its id through `GetBackendId`,
/// checked; returns the canonical path, the library and its live-instance count too.
pub(super) fn open_and_read_id(
    path: &Path,
) -> Result<(PathBuf, &'static Library, &'static LibraryCounts, BackendId), LoadError> {
    if path.as_os_str().is_empty() {
        return Err(LoadError::EmptyPath);
    }
    let canonical = path
        .canonicalize()
        .map_err(|e| LoadError::Open(format!("{}: {e}", path.display())))?;
    let (lib, counts) = open_library(&canonical)?;
    // SAFETY: this is the ABI's type for this symbol.
    let get_id: abi::GetBackendIdFn = unsafe { entry_point(lib, abi::GET_BACKEND_ID_SYMBOL) }?;
    // SAFETY: `GetBackendId` takes nothing and returns null or a NUL-terminated string
    // that lives as long as the library (forever).
    let id_ptr = unsafe { get_id() };
    if id_ptr.is_null() {
        return Err(LoadError::NullId);
    }
    // SAFETY: non-null, NUL-terminated per the ABI.
    let id_bytes = unsafe { CStr::from_ptr(id_ptr) }.to_bytes();
    if id_bytes.len() > MAX_BACKEND_ID_LEN {
        return Err(LoadError::InvalidId(format!(
            "the id has {} bytes; backend ids have at most {} letters and digits",
            id_bytes.len(),
            MAX_BACKEND_ID_LEN
        )));
    }
    let id_text = String::from_utf8_lossy(id_bytes).into_owned();
    if id_text == "Unknown" {
        return Err(LoadError::InvalidId(
            "'Unknown' is reserved (it is what an unset id looks like)".into(),
        ));
    }
    let id = BackendId::new(id_text).map_err(LoadError::InvalidId)?;
    Ok((canonical, lib, counts, id))
}

impl PluginLibrary {
    /// Open the shared object at `path` (it stays loaded for the life of the process) and
    /// read its backend id, checked, without calling `BackendFactory`: so that a host can
    /// refuse an id it already has before the plugin's factory runs.
    pub fn read_id(path: &Path) -> Result<BackendId, LoadError> {
        open_and_read_id(path).map(|(_, _, _, id)| id)
    }

    /// Open the shared object at `path` and check it: the three entry points, the id, the
    /// version and the function table. The library stays loaded for the life of the process.
    pub fn open(path: &Path) -> Result<Arc<PluginLibrary>, LoadError> {
        let (canonical, lib, counts, id) = open_and_read_id(path)?;
        // SAFETY: these are the ABI's types for these symbols.
        let get_version: abi::GetVersionFn = unsafe { entry_point(lib, abi::GET_VERSION_SYMBOL) }?;
        // SAFETY: as above.
        let factory: abi::BackendFactoryFn =
            unsafe { entry_point(lib, abi::BACKEND_FACTORY_SYMBOL) }?;
        let (mut major, mut minor) = (u32::MAX, u32::MAX);
        // SAFETY: `GetVersion` writes two u32s through valid pointers.
        unsafe { get_version(&mut major, &mut minor) };
        let version = BackendVersion { major, minor };
        if !is_compatible(version, HOST_ABI_VERSION) {
            return Err(LoadError::IncompatibleVersion {
                plugin: version,
                host: HOST_ABI_VERSION,
            });
        }
        // SAFETY: `BackendFactory` takes nothing and returns null or a table that lives as
        // long as the library (forever).
        let table_ptr = unsafe { factory() };
        if table_ptr.is_null() {
            return Err(LoadError::NullFactory);
        }
        // SAFETY: non-null; a table of at least its declared size per the ABI.
        let table = unsafe { read_table(table_ptr) }?;
        if table.abi_major != version.major || table.abi_minor != version.minor {
            return Err(LoadError::BadTable(format!(
                "it declares ABI {}.{} but GetVersion says {version}",
                table.abi_major, table.abi_minor
            )));
        }
        Ok(Arc::new(PluginLibrary {
            path: canonical,
            id,
            version,
            table,
            counts,
        }))
    }

    /// The library's canonical path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The backend id it exports.
    pub fn id(&self) -> &BackendId {
        &self.id
    }

    /// The ABI version it was built against.
    pub fn version(&self) -> BackendVersion {
        self.version
    }

    /// How many instances made from this library (by any runtime) are alive.
    pub fn live_instances(&self) -> usize {
        self.counts.instances.load(Ordering::SeqCst)
    }

    /// Create a backend instance (one per runtime), passing the host's version, the
    /// library's path and `options`.
    pub fn instantiate(
        self: &Arc<Self>,
        options: &BackendOptions,
    ) -> Result<Arc<PluginInstance>, LoadError> {
        let path = c_string(&self.path.to_string_lossy());
        let opts = COptions::new(options);
        let host = abi::HostInfo {
            struct_size: abi::size_u32::<abi::HostInfo>(),
            abi_major: HOST_ABI_VERSION.major,
            abi_minor: HOST_ABI_VERSION.minor,
            reserved: 0,
            plugin_path: path.as_ptr(),
            options: opts.ptrs.as_ptr(),
            num_options: opts.ptrs.len(),
        };
        let mut raw: *mut abi::Instance = std::ptr::null_mut();
        let mut minor = u32::MAX;
        let create = self.table.create_instance.ok_or(LoadError::NullFactory)?;
        let (status, message) = with_message::<MESSAGE_BYTES>(|msg| {
            // SAFETY: every pointer is valid for the call: `host` and what it points to live
            // on this stack frame, the out-pointers are locals.
            unsafe { create(&host, &mut raw, &mut minor, msg) }
        });
        match status {
            abi::STATUS_OK => {}
            abi::STATUS_PANICKED => return Err(LoadError::Panicked(message)),
            _ => return Err(LoadError::CreateFailed(message)),
        }
        if raw.is_null() {
            return Err(LoadError::CreateFailed(
                "create_instance succeeded but returned no instance".into(),
            ));
        }
        self.counts.instances.fetch_add(1, Ordering::SeqCst);
        let instance = PluginInstance {
            lib: self.clone(),
            raw,
            minor,
            poisoned: Mutex::new(None),
            panicked: AtomicBool::new(false),
            memory_managers: Mutex::new(Vec::new()),
            factories: OnceLock::new(),
        };
        let expected = self.version.minor.min(HOST_ABI_VERSION.minor);
        if minor != expected {
            // Dropping `instance` destroys it.
            drop(instance);
            return Err(LoadError::CreateFailed(format!(
                "the plugin answered ABI minor {minor}, expected min({}, {}) = {expected}",
                self.version.minor, HOST_ABI_VERSION.minor
            )));
        }
        Ok(Arc::new(instance))
    }
}
