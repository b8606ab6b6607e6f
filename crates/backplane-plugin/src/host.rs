//! The host side: open a dynamic backend's shared object, check it, and wrap it in
//! [`DynamicBackend`], an ordinary [`Backend`].
//!
//! # When libraries are closed: never
//!
//! [`PluginLibrary::open`] keeps every library it opens in a process-wide cache keyed by
//! canonical path, for the life of the process; opening the same file again reuses the handle.
//! `dlclose` is never called, deliberately:
//!
//! * a Rust plugin registers thread-local destructors (std's, rayon's pools) that run when
//!   their threads exit, possibly after an unload: calling into unmapped code crashes;
//! * function pointers, workloads and contexts handed out by a plugin may be held by loaded
//!   networks; keeping the code mapped makes that safe by construction.
//!
//! The cost is the mapping of each distinct file for the rest of the process. What *is*
//! released when a runtime is dropped is everything the plugin created for it: the backend
//! instance, its workload factories, workloads, memory managers and context. The instance is
//! reference-counted by everything it created, so it is destroyed last.
//!
//! # ABI 1.2 on the host side
//!
//! [`DynamicBackend`] registers the plugin's tensor-handle factories as ordinary
//! [`TensorHandleFactory`]s and reports its preferences, so the runtime's tensor-handle
//! strategy uses them unchanged. Their handles map lazily: a handle is mapped the first time
//! the host needs its bytes and unmapped only when a borrow proves no view of the mapping is
//! alive (before the plugin writes it, before the plugin reads what the host wrote, at
//! destruction). A workload of the plugin receives the instance's own handles as handles and
//! every other tensor as host memory. `optimize_subgraph` sends the subgraph as C structs
//! and turns the plugin's answer, checked id by id, into [`OptimizationViews`].

use crate::abi::{self, BackendVTable};
use crate::convert::{
    c_string, crosses_the_abi, read_substitution, with_message, with_message_text, OwnedLayerDesc,
    OwnedSubgraph, OwnedTensorInfo,
};
use backplane_backend_api::{
    Backend, BackendContext, BackendError, BackendId, BackendOptions, BackendVersion, Capabilities,
    CapabilityValue, DataLayout, FactoryId, FactoryProperties, LayerDesc, LayerSupport,
    MemoryManager, MemorySources, NetworkId, OptimizationViews, SubgraphView, Substitution,
    Support, TensorHandle, TensorHandleFactory, TensorHandleFactoryRegistry, Workload,
    WorkloadFactory,
};
use backplane_core::{LayerId, Network, TensorInfo, TensorView, TensorViewMut};
use libloading::Library;
use std::collections::HashSet;
use std::ffi::{c_void, CStr};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};

/// The ABI version this host speaks.
pub const HOST_ABI_VERSION: BackendVersion = BackendVersion {
    major: abi::ABI_VERSION_MAJOR,
    minor: abi::ABI_VERSION_MINOR,
};

/// Size of the message buffers handed to the plugin.
const MESSAGE_BYTES: usize = 1024;

/// Why a shared object could not be used as a dynamic backend.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LoadError {
    /// The path is empty.
    #[error("the shared-object path is empty")]
    EmptyPath,
    /// `dlopen` failed (missing file, not a shared object, unresolved dependencies).
    #[error("cannot open it as a shared object: {0}")]
    Open(String),
    /// A required entry point is not exported with C linkage.
    #[error("it does not export '{symbol}' with C linkage ({detail})")]
    MissingEntryPoint {
        /// The symbol.
        symbol: &'static str,
        /// dlerror's text.
        detail: String,
    },
    /// `GetBackendId` returned null.
    #[error("GetBackendId returned null")]
    NullId,
    /// The id is not a valid backend id.
    #[error("GetBackendId returned an invalid id: {0}")]
    InvalidId(String),
    /// The ABI version is not compatible with the host's.
    #[error("it was built against ABI {plugin}, which this runtime (ABI {host}) cannot load: the major versions must be equal and the plugin's minor version not newer")]
    IncompatibleVersion {
        /// The plugin's version.
        plugin: BackendVersion,
        /// The host's.
        host: BackendVersion,
    },
    /// `BackendFactory` returned null.
    #[error("BackendFactory returned null")]
    NullFactory,
    /// The function table is malformed.
    #[error("its function table is malformed: {0}")]
    BadTable(String),
    /// `create_instance` failed.
    #[error("creating the backend failed: {0}")]
    CreateFailed(String),
    /// The plugin panicked.
    #[error("{0}")]
    Panicked(String),
}

/// An opened library and the count of its live instances, for the life of the process.
struct CachedLibrary {
    path: PathBuf,
    library: &'static Library,
    live: &'static AtomicUsize,
}

/// The process-wide cache of opened libraries; never closed (see the module docs).
fn library_cache() -> &'static Mutex<Vec<CachedLibrary>> {
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
        .map_or(0, |c| c.live.load(Ordering::SeqCst))
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

/// Open `path` (canonical) once per process and keep it open.
fn open_library(path: &Path) -> Result<(&'static Library, &'static AtomicUsize), LoadError> {
    let mut cache = library_cache().lock().unwrap_or_else(|e| e.into_inner());
    if let Some(c) = cache.iter().find(|c| c.path == path) {
        return Ok((c.library, c.live));
    }
    // SAFETY: opening a library runs its initializers. A dynamic backend is, by the ABI's
    // contract, a library whose initializers are safe to run; the runtime only opens files
    // found in the directories the application chose to trust.
    let lib = unsafe { Library::new(path) }.map_err(|e| LoadError::Open(e.to_string()))?;
    // Leaked on purpose: libraries are never closed (see the module docs).
    let library: &'static Library = Box::leak(Box::new(lib));
    let live: &'static AtomicUsize = Box::leak(Box::new(AtomicUsize::new(0)));
    cache.push(CachedLibrary {
        path: path.to_path_buf(),
        library,
        live,
    });
    Ok((library, live))
}

/// Look up an entry point.
///
/// # Safety
/// `T` must be the function-pointer type the ABI gives `symbol`.
unsafe fn entry_point<T: Copy>(
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
    path: PathBuf,
    id: BackendId,
    version: BackendVersion,
    table: BackendVTable,
    live: &'static AtomicUsize,
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
unsafe fn read_table(ptr: *const BackendVTable) -> Result<BackendVTable, LoadError> {
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

/// The longest id a dynamic backend may have, in bytes: ids are short names (`CpuAcc`,
/// `GpuAcc`) printed in reports and error messages.
pub const MAX_BACKEND_ID_LEN: usize = 64;

/// Open (once per process) the library at `path` and read its id through `GetBackendId`,
/// checked; returns the canonical path, the library and its live-instance count too.
fn open_and_read_id(
    path: &Path,
) -> Result<(PathBuf, &'static Library, &'static AtomicUsize, BackendId), LoadError> {
    if path.as_os_str().is_empty() {
        return Err(LoadError::EmptyPath);
    }
    let canonical = path
        .canonicalize()
        .map_err(|e| LoadError::Open(format!("{}: {e}", path.display())))?;
    let (lib, live) = open_library(&canonical)?;
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
    Ok((canonical, lib, live, id))
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
        let (canonical, lib, live, id) = open_and_read_id(path)?;
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
            live,
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
        self.live.load(Ordering::SeqCst)
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
        self.live.fetch_add(1, Ordering::SeqCst);
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

/// Backend options as C structs.
struct COptions {
    _strings: Vec<(std::ffi::CString, std::ffi::CString)>,
    _structs: Vec<abi::BackendOption>,
    ptrs: Vec<*const abi::BackendOption>,
}

impl COptions {
    fn new(options: &BackendOptions) -> Self {
        let strings: Vec<_> = options
            .values
            .iter()
            .map(|(k, v)| (c_string(k), c_string(v)))
            .collect();
        let structs: Vec<abi::BackendOption> = strings
            .iter()
            .map(|(k, v)| abi::BackendOption {
                struct_size: abi::size_u32::<abi::BackendOption>(),
                reserved: 0,
                name: k.as_ptr(),
                value: v.as_ptr(),
            })
            .collect();
        // The vector is never touched again, so these addresses stay valid.
        let ptrs = structs
            .iter()
            .map(|s| s as *const abi::BackendOption)
            .collect();
        COptions {
            _strings: strings,
            _structs: structs,
            ptrs,
        }
    }
}

/// One backend instance of a plugin (one per runtime). Everything it creates holds it, so it
/// is destroyed after them, when the runtime that created it is gone.
pub struct PluginInstance {
    lib: Arc<PluginLibrary>,
    raw: *mut abi::Instance,
    minor: u32,
    poisoned: Mutex<Option<String>>,
    panicked: AtomicBool,
    memory_managers: Mutex<Vec<Weak<DynamicMemoryManager>>>,
    factories: OnceLock<Vec<(FactoryId, FactoryProperties)>>,
}

// SAFETY: the ABI requires every plugin function to be callable from any thread and
// concurrently (except destroy, called once after all others); the pointer is only handed
// back to the plugin.
unsafe impl Send for PluginInstance {}
// SAFETY: as above.
unsafe impl Sync for PluginInstance {}

impl std::fmt::Debug for PluginInstance {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PluginInstance")
            .field("library", &self.lib)
            .field("abi_minor", &self.minor)
            .finish()
    }
}

impl Drop for PluginInstance {
    fn drop(&mut self) {
        if let Some(destroy) = self.lib.table.destroy_instance {
            // SAFETY: `raw` came from this library's `create_instance`; every object made from
            // it holds an `Arc` to this instance, so all are gone, and it is destroyed once.
            unsafe { destroy(self.raw) };
        }
        self.lib.live.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A failed plugin call: its status and message.
struct CallError {
    status: abi::Status,
    message: String,
}

impl PluginInstance {
    /// The library it came from.
    pub fn library(&self) -> &Arc<PluginLibrary> {
        &self.lib
    }

    /// The ABI minor version negotiated with the plugin.
    pub fn abi_minor(&self) -> u32 {
        self.minor
    }

    /// Whether the plugin panicked earlier (every later call fails).
    pub fn is_poisoned(&self) -> bool {
        self.panicked.load(Ordering::SeqCst)
    }

    fn table(&self) -> &BackendVTable {
        &self.lib.table
    }

    /// The plugin's own tensor-handle factories, asked once (1.2). Entries with an invalid
    /// id or an id reported twice are left out.
    fn factories(&self) -> &[(FactoryId, FactoryProperties)] {
        self.factories.get_or_init(|| {
            let Some(f) = self.table().tensor_handle_factories else {
                return Vec::new();
            };
            /// Receives one factory from the plugin.
            ///
            /// # Safety
            /// `user` is the `Vec` passed below; `desc` is null or valid for the call.
            unsafe extern "C" fn sink(
                user: *mut c_void,
                desc: *const abi::TensorHandleFactoryDesc,
            ) {
                // SAFETY: `user` is `&mut Vec<_>` for the duration of the call that invokes
                // this sink, per the caller.
                let Some(list) =
                    (unsafe { user.cast::<Vec<(FactoryId, FactoryProperties)>>().as_mut() })
                else {
                    return;
                };
                // SAFETY: null or valid per the ABI.
                let Some(d) = (unsafe { desc.as_ref() }) else {
                    return;
                };
                if (d.struct_size as usize) < field_end!(abi::TensorHandleFactoryDesc, layout) {
                    return;
                }
                // SAFETY: null or NUL-terminated per the ABI.
                let Ok(text) = (unsafe { crate::convert::text(d.id, "factory id") }) else {
                    return;
                };
                let Ok(id) = FactoryId::new(text) else {
                    return;
                };
                if list.iter().any(|(f, _)| f == &id) {
                    return;
                }
                let props = FactoryProperties {
                    mappable: d.flags & abi::FACTORY_MAPPABLE != 0,
                    sub_tensors: d.flags & abi::FACTORY_SUB_TENSORS != 0,
                    in_place: d.flags & abi::FACTORY_IN_PLACE != 0,
                    import_sources: MemorySources(d.import_sources),
                    export_sources: MemorySources(d.export_sources),
                    layout: if d.layout == abi::LAYOUT_CHANNELS_LAST {
                        DataLayout::ChannelsLast
                    } else {
                        DataLayout::Standard
                    },
                };
                list.push((id, props));
            }
            let mut list: Vec<(FactoryId, FactoryProperties)> = Vec::new();
            let raw = self.raw;
            let user = (&mut list as *mut Vec<(FactoryId, FactoryProperties)>).cast::<c_void>();
            // SAFETY: a live instance; `sink` matches the ABI's type and `user` points to
            // `list`, alive and not otherwise borrowed during the call.
            let ok = self.call(|_| unsafe { f(raw, sink, user) }).is_ok();
            if ok {
                list
            } else {
                Vec::new()
            }
        })
    }

    /// Call the plugin with a message buffer; poisons the instance on a panic.
    fn call(&self, f: impl FnOnce(*mut abi::Message) -> abi::Status) -> Result<(), CallError> {
        if self.panicked.load(Ordering::Relaxed) {
            let why = self
                .poisoned
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone()
                .unwrap_or_default();
            return Err(CallError {
                status: abi::STATUS_PANICKED,
                message: format!(
                    "backend '{}' ({}) is disabled because it panicked earlier: {why}",
                    self.lib.id,
                    self.lib.path.display()
                ),
            });
        }
        let (status, message) = with_message::<MESSAGE_BYTES>(f);
        if status == abi::STATUS_OK {
            return Ok(());
        }
        if status == abi::STATUS_PANICKED {
            *self.poisoned.lock().unwrap_or_else(|e| e.into_inner()) = Some(message.clone());
            self.panicked.store(true, Ordering::SeqCst);
        }
        Err(CallError { status, message })
    }
}

/// A backend error for a failed call.
fn backend_error(e: CallError, layer: Option<&LayerDesc>) -> BackendError {
    match e.status {
        abi::STATUS_UNSUPPORTED => BackendError::Unsupported {
            layer: layer.map(|l| l.name.clone()).unwrap_or_default(),
            op: layer.map(|l| l.op.name().to_string()).unwrap_or_default(),
            reason: e.message,
        },
        abi::STATUS_EXECUTION_FAILED => BackendError::Execution(e.message),
        abi::STATUS_PANICKED => BackendError::Execution(e.message),
        _ => BackendError::Other(e.message),
    }
}

/// A dynamic backend as an ordinary [`Backend`]: every method goes through the plugin's
/// function table. Cheap to create; the instance behind it is shared.
#[derive(Debug, Clone)]
pub struct DynamicBackend {
    instance: Arc<PluginInstance>,
}

impl DynamicBackend {
    /// The backend over an instance.
    pub fn new(instance: Arc<PluginInstance>) -> Self {
        DynamicBackend { instance }
    }

    /// The instance behind it.
    pub fn instance(&self) -> &Arc<PluginInstance> {
        &self.instance
    }
}

impl Backend for DynamicBackend {
    fn id(&self) -> BackendId {
        self.instance.lib.id.clone()
    }

    /// For a dynamic backend: the plugin ABI version it was built against.
    fn api_version(&self) -> BackendVersion {
        self.instance.lib.version
    }

    fn version(&self) -> String {
        let Some(f) = self.instance.table().backend_version else {
            return String::from("0.0.0");
        };
        if self.instance.is_poisoned() {
            return String::from("0.0.0");
        }
        let raw = self.instance.raw;
        // SAFETY: a live instance and a valid message buffer for the call.
        let (status, text) = with_message_text::<MESSAGE_BYTES>(|msg| unsafe { f(raw, msg) });
        if status == abi::STATUS_OK && !text.is_empty() {
            text
        } else {
            String::from("0.0.0")
        }
    }

    fn layer_support(&self) -> Arc<dyn LayerSupport> {
        Arc::new(DynamicLayerSupport {
            instance: self.instance.clone(),
        })
    }

    fn create_memory_manager(&self) -> Option<Arc<dyn MemoryManager>> {
        let t = self.instance.table();
        let create = t.create_memory_manager?;
        let raw_inst = self.instance.raw;
        let mut raw: *mut abi::MemoryManager = std::ptr::null_mut();
        // SAFETY: a live instance, a local out-pointer and a valid message buffer.
        let ok = self
            .instance
            .call(|msg| unsafe { create(raw_inst, &mut raw, msg) })
            .is_ok();
        if !ok || raw.is_null() {
            return None;
        }
        let mm = Arc::new(DynamicMemoryManager {
            instance: self.instance.clone(),
            raw,
        });
        let mut list = self
            .instance
            .memory_managers
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        list.retain(|w| w.strong_count() > 0);
        list.push(Arc::downgrade(&mm));
        Some(mm)
    }

    fn create_workload_factory(
        &self,
        memory_manager: Option<Arc<dyn MemoryManager>>,
    ) -> backplane_backend_api::Result<Box<dyn WorkloadFactory>> {
        let create = self
            .instance
            .table()
            .create_workload_factory
            .ok_or_else(|| BackendError::Other("create_workload_factory is null".into()))?;
        // Only a memory manager this instance created can be handed back to the plugin.
        let (mm_raw, mm_keep) = match &memory_manager {
            Some(mm) => {
                let wanted = Arc::as_ptr(mm).cast::<u8>();
                let list = self
                    .instance
                    .memory_managers
                    .lock()
                    .unwrap_or_else(|e| e.into_inner());
                match list
                    .iter()
                    .filter_map(Weak::upgrade)
                    .find(|m| Arc::as_ptr(m).cast::<u8>() == wanted)
                {
                    Some(m) => (m.raw, Some(m)),
                    None => (std::ptr::null_mut(), None),
                }
            }
            None => (std::ptr::null_mut(), None),
        };
        let raw_inst = self.instance.raw;
        let mut raw: *mut abi::WorkloadFactory = std::ptr::null_mut();
        self.instance
            // SAFETY: a live instance, a memory manager of this instance (kept alive by
            // `mm_keep`) or null, a local out-pointer and a valid message buffer.
            .call(|msg| unsafe { create(raw_inst, mm_raw, &mut raw, msg) })
            .map_err(|e| backend_error(e, None))?;
        if raw.is_null() {
            return Err(BackendError::Other(
                "create_workload_factory succeeded but returned no factory".into(),
            ));
        }
        Ok(Box::new(DynamicWorkloadFactory {
            factory: Arc::new(RawWorkloadFactory {
                instance: self.instance.clone(),
                raw,
                _memory_manager: mm_keep,
            }),
        }))
    }

    fn create_backend_context(
        &self,
        options: &BackendOptions,
    ) -> backplane_backend_api::Result<Option<Box<dyn BackendContext>>> {
        let Some(create) = self.instance.table().create_context else {
            return Ok(None);
        };
        let opts = COptions::new(options);
        let raw_inst = self.instance.raw;
        let mut raw: *mut abi::Context = std::ptr::null_mut();
        self.instance
            // SAFETY: a live instance, options valid for the call, a local out-pointer and a
            // valid message buffer.
            .call(|msg| unsafe {
                create(raw_inst, opts.ptrs.as_ptr(), opts.ptrs.len(), &mut raw, msg)
            })
            .map_err(|e| backend_error(e, None))?;
        if raw.is_null() {
            return Ok(None);
        }
        Ok(Some(Box::new(DynamicContext {
            instance: self.instance.clone(),
            raw,
        })))
    }

    fn register_tensor_handle_factories(&self, registry: &mut TensorHandleFactoryRegistry) {
        for (id, props) in self.instance.factories() {
            registry.register_factory(Arc::new(DynamicTensorHandleFactory {
                instance: self.instance.clone(),
                id: id.clone(),
                c_id: c_string(id.as_str()),
                properties: props.clone(),
            }));
        }
    }

    fn handle_factory_preferences(&self) -> Vec<FactoryId> {
        let host = || vec![FactoryId::host()];
        let Some(f) = self.instance.table().handle_factory_preferences else {
            return host();
        };
        /// Receives one factory id from the plugin.
        ///
        /// # Safety
        /// `user` is the `Vec` passed below; `text` is null or NUL-terminated.
        unsafe extern "C" fn sink(user: *mut c_void, text: *const std::ffi::c_char) {
            // SAFETY: `user` is `&mut Vec<FactoryId>` for the duration of the call that
            // invokes this sink, per the caller.
            let Some(list) = (unsafe { user.cast::<Vec<FactoryId>>().as_mut() }) else {
                return;
            };
            // SAFETY: null or NUL-terminated per the ABI.
            if let Ok(id) = unsafe { crate::convert::text(text, "factory id") } {
                if let Ok(id) = FactoryId::new(id) {
                    if !list.contains(&id) {
                        list.push(id);
                    }
                }
            }
        }
        let mut list: Vec<FactoryId> = Vec::new();
        let raw = self.instance.raw;
        let user = (&mut list as *mut Vec<FactoryId>).cast::<c_void>();
        // SAFETY: a live instance; `sink` matches the ABI's type and `user` points to `list`,
        // alive and not otherwise borrowed during the call.
        let ok = self
            .instance
            .call(|_| unsafe { f(raw, sink, user) })
            .is_ok();
        if ok && !list.is_empty() {
            list
        } else {
            host()
        }
    }

    fn optimize_subgraph(&self, subgraph: &SubgraphView<'_>) -> OptimizationViews {
        let Some(f) = self.instance.table().optimize_subgraph else {
            return OptimizationViews::untouched(subgraph);
        };
        let network = subgraph.network();
        let mut views = OptimizationViews::default();
        // Layers whose op cannot cross the ABI (nested networks) are not shown to the plugin
        // and stay as they are; the plugin sees each run of the others (consecutive layers
        // of a convex run in topological order: convex too).
        let mut segment: Vec<LayerId> = Vec::new();
        for &l in subgraph.layers() {
            if crosses_the_abi(&network.layer(l).op) {
                segment.push(l);
            } else {
                self.optimize_segment(f, network, &std::mem::take(&mut segment), &mut views);
                views.untouched.push(vec![l]);
            }
        }
        self.optimize_segment(f, network, &segment, &mut views);
        views
    }

    fn capabilities(&self) -> Capabilities {
        let mut caps = Capabilities::default();
        let Some(f) = self.instance.table().capabilities else {
            return caps;
        };
        /// Receives one capability from the plugin.
        ///
        /// # Safety
        /// `user` is the `Capabilities` passed below; `cap` is null or valid for the call.
        unsafe extern "C" fn sink(user: *mut c_void, cap: *const abi::Capability) {
            // SAFETY: `user` is `&mut Capabilities` for the duration of the call that
            // invokes this sink, per the caller.
            let Some(caps) = (unsafe { user.cast::<Capabilities>().as_mut() }) else {
                return;
            };
            // SAFETY: null or valid per the ABI.
            let Some(c) = (unsafe { cap.as_ref() }) else {
                return;
            };
            if (c.struct_size as usize) < field_end!(abi::Capability, text) || c.name.is_null() {
                return;
            }
            // SAFETY: non-null and NUL-terminated per the ABI.
            let name = unsafe { CStr::from_ptr(c.name) }
                .to_string_lossy()
                .into_owned();
            let value = match c.kind {
                abi::CAP_BOOL => CapabilityValue::Bool(c.int_value != 0),
                abi::CAP_INT => CapabilityValue::Int(c.int_value),
                abi::CAP_TEXT if !c.text.is_null() => CapabilityValue::Text(
                    // SAFETY: non-null and NUL-terminated per the ABI.
                    unsafe { CStr::from_ptr(c.text) }
                        .to_string_lossy()
                        .into_owned(),
                ),
                _ => return,
            };
            caps.0.insert(name, value);
        }
        let raw_inst = self.instance.raw;
        let user = (&mut caps as *mut Capabilities).cast::<c_void>();
        // SAFETY: a live instance; `sink` matches the ABI's type and `user` points to `caps`,
        // alive and not otherwise borrowed during the call.
        let _ = self.instance.call(|_| unsafe { f(raw_inst, sink, user) });
        caps
    }
}

/// What the plugin reported through the optimization sink.
struct Collected<'a> {
    network: &'a Network,
    allowed: HashSet<LayerId>,
    substitutions: Vec<Substitution>,
    failed: Vec<Vec<LayerId>>,
    untouched: Vec<Vec<LayerId>>,
    error: Option<String>,
}

impl Collected<'_> {
    fn layers(&mut self, layers: *const u64, n: usize) -> Option<Vec<LayerId>> {
        // SAFETY: `n` entries per the ABI.
        let ids = match unsafe { crate::convert::slice(layers, n) } {
            Ok(ids) => ids,
            Err(e) => {
                self.error.get_or_insert(e);
                return None;
            }
        };
        let mut out = Vec::with_capacity(ids.len());
        for &id in ids {
            let l = usize::try_from(id).map(LayerId).ok();
            match l.filter(|l| self.allowed.contains(l)) {
                Some(l) => out.push(l),
                None => {
                    self.error
                        .get_or_insert(format!("layer {id} is not in its subgraph"));
                    return None;
                }
            }
        }
        Some(out)
    }
}

/// `add_substitution` of the host's sink.
///
/// # Safety
/// `user` is the `Collected` of the current call; `sub` null or valid for the call.
unsafe extern "C" fn sink_substitution(
    user: *mut c_void,
    sub: *const abi::Substitution,
) -> abi::Status {
    // SAFETY: `user` is `&mut Collected` for the duration of the call, per the caller.
    let Some(c) = (unsafe { user.cast::<Collected<'_>>().as_mut() }) else {
        return abi::STATUS_INVALID_ARGUMENT;
    };
    // SAFETY: null or valid per the ABI.
    match unsafe { read_substitution(sub, c.network, &c.allowed) } {
        Ok(s) => {
            c.substitutions.push(s);
            abi::STATUS_OK
        }
        Err(e) => {
            c.error.get_or_insert(e);
            abi::STATUS_INVALID_ARGUMENT
        }
    }
}

/// `add_failed` of the host's sink.
///
/// # Safety
/// As [`sink_substitution`]; `layers` has `n` entries.
unsafe extern "C" fn sink_failed(user: *mut c_void, layers: *const u64, n: usize) -> abi::Status {
    // SAFETY: `user` is `&mut Collected` for the duration of the call, per the caller.
    let Some(c) = (unsafe { user.cast::<Collected<'_>>().as_mut() }) else {
        return abi::STATUS_INVALID_ARGUMENT;
    };
    match c.layers(layers, n) {
        Some(l) => {
            c.failed.push(l);
            abi::STATUS_OK
        }
        None => abi::STATUS_INVALID_ARGUMENT,
    }
}

/// `add_untouched` of the host's sink.
///
/// # Safety
/// As [`sink_failed`].
unsafe extern "C" fn sink_untouched(
    user: *mut c_void,
    layers: *const u64,
    n: usize,
) -> abi::Status {
    // SAFETY: `user` is `&mut Collected` for the duration of the call, per the caller.
    let Some(c) = (unsafe { user.cast::<Collected<'_>>().as_mut() }) else {
        return abi::STATUS_INVALID_ARGUMENT;
    };
    match c.layers(layers, n) {
        Some(l) => {
            c.untouched.push(l);
            abi::STATUS_OK
        }
        None => abi::STATUS_INVALID_ARGUMENT,
    }
}

impl DynamicBackend {
    /// Offer one segment to the plugin and add its answer to `views`. A malformed answer or
    /// an error leaves the segment untouched; a panic marks it failed (the instance is then
    /// disabled, so the layers go to the next backends). Layers the answer does not mention
    /// are untouched.
    fn optimize_segment(
        &self,
        f: abi::OptimizeSubgraphFn,
        network: &Network,
        segment: &[LayerId],
        views: &mut OptimizationViews,
    ) {
        if segment.is_empty() {
            return;
        }
        let c_subgraph = OwnedSubgraph::new(network, segment);
        let mut collected = Collected {
            network,
            allowed: segment.iter().copied().collect(),
            substitutions: Vec::new(),
            failed: Vec::new(),
            untouched: Vec::new(),
            error: None,
        };
        let sink = abi::OptimizationSink {
            struct_size: abi::size_u32::<abi::OptimizationSink>(),
            reserved: 0,
            user: (&mut collected as *mut Collected<'_>).cast::<c_void>(),
            add_substitution: Some(sink_substitution),
            add_failed: Some(sink_failed),
            add_untouched: Some(sink_untouched),
        };
        let raw = self.instance.raw;
        // SAFETY: a live instance; the subgraph and the sink (whose `user` points to
        // `collected`, not otherwise used during the call) are valid for the call.
        let result = self
            .instance
            .call(|msg| unsafe { f(raw, c_subgraph.as_ptr(), &sink, msg) });
        match result {
            Ok(()) => {}
            Err(e) if e.status == abi::STATUS_PANICKED => {
                views.failed.push(segment.to_vec());
                return;
            }
            Err(_) => {
                views.untouched.push(segment.to_vec());
                return;
            }
        }
        // Each layer in at most one part, or the whole answer is discarded.
        let mut seen: HashSet<LayerId> = HashSet::new();
        let parts = collected
            .substitutions
            .iter()
            .map(|s| &s.replaced)
            .chain(&collected.failed)
            .chain(&collected.untouched);
        let mut overlapping = false;
        for part in parts {
            for l in part {
                overlapping |= !seen.insert(*l);
            }
        }
        if collected.error.is_some() || overlapping {
            views.untouched.push(segment.to_vec());
            return;
        }
        let rest: Vec<LayerId> = segment
            .iter()
            .copied()
            .filter(|l| !seen.contains(l))
            .collect();
        views.substitutions.extend(collected.substitutions);
        views
            .failed
            .extend(collected.failed.into_iter().filter(|p| !p.is_empty()));
        views
            .untouched
            .extend(collected.untouched.into_iter().filter(|p| !p.is_empty()));
        if !rest.is_empty() {
            views.untouched.push(rest);
        }
    }
}

/// A tensor-handle factory of the plugin.
struct DynamicTensorHandleFactory {
    instance: Arc<PluginInstance>,
    id: FactoryId,
    c_id: std::ffi::CString,
    properties: FactoryProperties,
}

impl TensorHandleFactory for DynamicTensorHandleFactory {
    fn id(&self) -> FactoryId {
        self.id.clone()
    }

    fn properties(&self) -> FactoryProperties {
        self.properties.clone()
    }

    fn create_tensor_handle(
        &self,
        info: &TensorInfo,
    ) -> backplane_backend_api::Result<Box<dyn TensorHandle>> {
        let create = self
            .instance
            .table()
            .create_tensor_handle
            .ok_or_else(|| BackendError::Other("create_tensor_handle is null".into()))?;
        let num_bytes = info.num_bytes()?;
        let c_info = OwnedTensorInfo::new(info);
        let raw_inst = self.instance.raw;
        let mut raw: *mut abi::TensorHandle = std::ptr::null_mut();
        self.instance
            // SAFETY: a live instance, a NUL-terminated id and a description valid for the
            // call, a local out-pointer and a valid buffer.
            .call(|msg| unsafe {
                create(raw_inst, self.c_id.as_ptr(), c_info.as_ptr(), &mut raw, msg)
            })
            .map_err(|e| backend_error(e, None))?;
        if raw.is_null() {
            return Err(BackendError::Other(
                "create_tensor_handle succeeded but returned no handle".into(),
            ));
        }
        Ok(Box::new(DynamicTensorHandle {
            instance: self.instance.clone(),
            raw,
            info: info.clone(),
            num_bytes,
            mapping: Mutex::new(Mapping::default()),
        }))
    }
}

/// How a handle is mapped into host memory.
struct Mapping {
    /// The mapped bytes (null: not mapped).
    data: *mut u8,
    /// Mapped writable.
    writable: bool,
    /// Views of the mapping may be alive: made by `map(&self)`, so they borrow the handle
    /// shared and only an exclusive borrow proves them gone.
    shared: bool,
}

impl Default for Mapping {
    fn default() -> Self {
        Mapping {
            data: std::ptr::null_mut(),
            writable: false,
            shared: false,
        }
    }
}

/// A tensor handle of the plugin. It is mapped when the host first needs its bytes and stays
/// mapped until the host can prove no view of it is alive and the plugin is about to use it
/// (or it is destroyed): the host never writes through a mapping while a workload runs.
struct DynamicTensorHandle {
    instance: Arc<PluginInstance>,
    raw: *mut abi::TensorHandle,
    info: TensorInfo,
    num_bytes: usize,
    mapping: Mutex<Mapping>,
}

// SAFETY: the ABI makes plugin objects usable from any thread; the handle pointer is only
// handed back to the plugin, and the mapping pointer is guarded by the mutex and the borrow
// rules below.
unsafe impl Send for DynamicTensorHandle {}
// SAFETY: as above.
unsafe impl Sync for DynamicTensorHandle {}

impl DynamicTensorHandle {
    /// Map (or reuse the mapping) and return its address.
    fn mapped(&self, m: &mut Mapping, writable: bool) -> Option<*mut u8> {
        if !m.data.is_null() && (m.writable || !writable) {
            return Some(m.data);
        }
        let t = self.instance.table();
        let (map, unmap) = (t.map_tensor_handle?, t.unmap_tensor_handle?);
        if !m.data.is_null() {
            // Mapped read-only and now wanted writable: only reached with an exclusive
            // borrow (from `map_mut`), so no view of the old mapping is alive.
            let raw = self.raw;
            let _ = self.instance.call(|_| {
                // SAFETY: a live, mapped handle of this instance.
                unsafe { unmap(raw) };
                abi::STATUS_OK
            });
            *m = Mapping::default();
        }
        let mut data: *mut c_void = std::ptr::null_mut();
        let mut len = usize::MAX;
        let raw = self.raw;
        // SAFETY: a live handle of this instance, local out-pointers and a valid buffer.
        let ok = self
            .instance
            .call(|msg| unsafe { map(raw, u32::from(writable), &mut data, &mut len, msg) })
            .is_ok();
        if !ok {
            return None;
        }
        if len != self.num_bytes || (data.is_null() && len > 0) {
            if !data.is_null() {
                let _ = self.instance.call(|_| {
                    // SAFETY: just mapped.
                    unsafe { unmap(raw) };
                    abi::STATUS_OK
                });
            }
            return None;
        }
        m.data = data.cast::<u8>();
        m.writable = writable;
        Some(m.data)
    }

    /// Unmap if mapped. Only called with proof that no view is alive.
    fn unmap(m: &mut Mapping, instance: &PluginInstance, raw: *mut abi::TensorHandle) {
        if m.data.is_null() {
            return;
        }
        if let Some(unmap) = instance.table().unmap_tensor_handle {
            let _ = instance.call(|_| {
                // SAFETY: a live, mapped handle of this instance.
                unsafe { unmap(raw) };
                abi::STATUS_OK
            });
        }
        *m = Mapping::default();
    }

    /// Before the plugin reads the handle (an input): end a mapping made by `map_mut`, whose
    /// view is gone since the caller borrows the handle.
    fn release_for_read(&self) -> *mut abi::TensorHandle {
        let mut m = self.mapping.lock().unwrap_or_else(|e| e.into_inner());
        if !m.shared {
            Self::unmap(&mut m, &self.instance, self.raw);
        }
        self.raw
    }

    /// Before the plugin writes the handle (an output): end any mapping; the exclusive
    /// borrow proves that no view is alive.
    fn release_for_write(&mut self) -> *mut abi::TensorHandle {
        let m = self.mapping.get_mut().unwrap_or_else(|e| e.into_inner());
        Self::unmap(m, &self.instance, self.raw);
        self.raw
    }
}

impl TensorHandle for DynamicTensorHandle {
    fn info(&self) -> &TensorInfo {
        &self.info
    }

    fn map(&self) -> Option<TensorView<'_>> {
        let mut m = self.mapping.lock().unwrap_or_else(|e| e.into_inner());
        let data = self.mapped(&mut m, false)?;
        m.shared = true;
        let data: &[u8] = if self.num_bytes == 0 {
            &[]
        } else {
            // SAFETY: the plugin mapped `num_bytes` readable bytes, valid until unmap, which
            // happens only under an exclusive borrow of this handle or with `shared` unset;
            // `shared` is set, so the mapping outlives this shared borrow. The plugin writes
            // the handle only as a workload output, also under an exclusive borrow.
            unsafe { std::slice::from_raw_parts(data, self.num_bytes) }
        };
        Some(TensorView {
            info: &self.info,
            data,
        })
    }

    fn map_mut(&mut self) -> Option<TensorViewMut<'_>> {
        let mut m = std::mem::take(self.mapping.get_mut().unwrap_or_else(|e| e.into_inner()));
        let data = self.mapped(&mut m, true);
        // The exclusive borrow ends every earlier view: this mapping is the only one.
        m.shared = false;
        *self.mapping.get_mut().unwrap_or_else(|e| e.into_inner()) = m;
        let data = data?;
        let data: &mut [u8] = if self.num_bytes == 0 {
            &mut []
        } else {
            // SAFETY: the plugin mapped `num_bytes` writable bytes, valid until unmap, which
            // needs a later borrow of this handle; this exclusive borrow makes the slice the
            // only access.
            unsafe { std::slice::from_raw_parts_mut(data, self.num_bytes) }
        };
        Some(TensorViewMut {
            info: &self.info,
            data,
        })
    }

    fn as_any(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }

    fn as_any_mut(&mut self) -> Option<&mut dyn std::any::Any> {
        Some(self)
    }
}

impl Drop for DynamicTensorHandle {
    fn drop(&mut self) {
        let m = self.mapping.get_mut().unwrap_or_else(|e| e.into_inner());
        Self::unmap(m, &self.instance, self.raw);
        if let Some(f) = self.instance.table().destroy_tensor_handle {
            // SAFETY: made by this instance's `create_tensor_handle`, destroyed once.
            unsafe { f(self.raw) };
        }
    }
}

/// Layer support through the plugin.
struct DynamicLayerSupport {
    instance: Arc<PluginInstance>,
}

impl LayerSupport for DynamicLayerSupport {
    fn is_layer_supported(&self, layer: &LayerDesc) -> Support {
        let Some(f) = self.instance.table().is_layer_supported else {
            return Support::no("the plugin has no layer support");
        };
        if !crosses_the_abi(&layer.op) {
            return Support::no(format!(
                "{} runs nested networks, which cannot cross the plugin ABI",
                layer.op.name()
            ));
        }
        let desc = OwnedLayerDesc::new(layer);
        let raw = self.instance.raw;
        let call = |msg| {
            // SAFETY: a live instance, a description valid for the call, a valid buffer.
            unsafe { f(raw, desc.as_ptr(), msg) }
        };
        match self.instance.call(call) {
            Ok(()) => Support::Supported,
            Err(e) if e.status == abi::STATUS_UNSUPPORTED => Support::Unsupported(e.message),
            Err(e) => Support::Unsupported(format!("the plugin failed: {}", e.message)),
        }
    }
}

/// A memory manager of the plugin.
struct DynamicMemoryManager {
    instance: Arc<PluginInstance>,
    raw: *mut abi::MemoryManager,
}

// SAFETY: the ABI makes plugin objects usable from any thread; the pointer is only handed back.
unsafe impl Send for DynamicMemoryManager {}
// SAFETY: as above.
unsafe impl Sync for DynamicMemoryManager {}

impl MemoryManager for DynamicMemoryManager {
    fn acquire(&self) -> backplane_backend_api::Result<()> {
        let f = self
            .instance
            .table()
            .memory_manager_acquire
            .ok_or_else(|| BackendError::Other("memory_manager_acquire is null".into()))?;
        let raw = self.raw;
        // SAFETY: a live manager of this instance and a valid buffer.
        self.instance
            .call(|msg| unsafe { f(raw, msg) })
            .map_err(|e| backend_error(e, None))
    }

    fn release(&self) {
        if let Some(f) = self.instance.table().memory_manager_release {
            let raw = self.raw;
            let _ = self.instance.call(|_| {
                // SAFETY: a live manager of this instance.
                unsafe { f(raw) };
                abi::STATUS_OK
            });
        }
    }
}

impl Drop for DynamicMemoryManager {
    fn drop(&mut self) {
        if let Some(f) = self.instance.table().destroy_memory_manager {
            // SAFETY: made by this instance's `create_memory_manager`, destroyed once; the
            // factories that used it hold this object, so they are gone.
            unsafe { f(self.raw) };
        }
    }
}

/// The plugin's workload factory object, destroyed when the last of the host's factory and
/// the workloads it created lets go of it: a plugin's workloads may keep a pointer to their
/// factory (and to the memory manager it was given).
struct RawWorkloadFactory {
    instance: Arc<PluginInstance>,
    raw: *mut abi::WorkloadFactory,
    _memory_manager: Option<Arc<DynamicMemoryManager>>,
}

// SAFETY: the ABI makes plugin objects usable from any thread; the pointer is only handed back.
unsafe impl Send for RawWorkloadFactory {}
// SAFETY: as above.
unsafe impl Sync for RawWorkloadFactory {}

impl Drop for RawWorkloadFactory {
    fn drop(&mut self) {
        if let Some(f) = self.instance.table().destroy_workload_factory {
            // SAFETY: made by this instance's `create_workload_factory`, destroyed once, after
            // every workload it created (each holds this object).
            unsafe { f(self.raw) };
        }
    }
}

/// A workload factory of the plugin.
struct DynamicWorkloadFactory {
    factory: Arc<RawWorkloadFactory>,
}

impl WorkloadFactory for DynamicWorkloadFactory {
    fn create_workload(
        &self,
        layer: &LayerDesc,
    ) -> backplane_backend_api::Result<Box<dyn Workload>> {
        let f = self
            .factory
            .instance
            .table()
            .create_workload
            .ok_or_else(|| BackendError::Other("create_workload is null".into()))?;
        let desc = OwnedLayerDesc::new(layer);
        let factory = self.factory.raw;
        let mut raw: *mut abi::Workload = std::ptr::null_mut();
        self.factory
            .instance
            // SAFETY: a live factory, a description valid for the call, a local out-pointer
            // and a valid buffer.
            .call(|msg| unsafe { f(factory, desc.as_ptr(), &mut raw, msg) })
            .map_err(|e| backend_error(e, Some(layer)))?;
        if raw.is_null() {
            return Err(BackendError::Other(
                "create_workload succeeded but returned no workload".into(),
            ));
        }
        Ok(Box::new(DynamicWorkload {
            instance: self.factory.instance.clone(),
            _factory: self.factory.clone(),
            raw,
            layer: layer.clone(),
            inputs: desc.inputs,
            outputs: desc.outputs,
        }))
    }
}

/// Views on the stack for up to this many tensors per side; more spill to the heap.
const INLINE_VIEWS: usize = 8;

/// A workload of the plugin, with the C descriptions of its tensors.
struct DynamicWorkload {
    instance: Arc<PluginInstance>,
    /// The factory that made it, destroyed only after this workload (its `Drop` runs
    /// `destroy_workload` before the fields are dropped).
    _factory: Arc<RawWorkloadFactory>,
    raw: *mut abi::Workload,
    layer: LayerDesc,
    inputs: Vec<OwnedTensorInfo>,
    outputs: Vec<OwnedTensorInfo>,
}

// SAFETY: the ABI requires `execute_workload` to be callable concurrently from any thread;
// the pointer is only handed back to the plugin.
unsafe impl Send for DynamicWorkload {}
// SAFETY: as above.
unsafe impl Sync for DynamicWorkload {}

/// A placeholder view, overwritten before use.
const EMPTY_VIEW: abi::TensorView = abi::TensorView {
    struct_size: abi::size_u32::<abi::TensorView>(),
    reserved: 0,
    info: std::ptr::null(),
    data: std::ptr::null_mut(),
    num_bytes: 0,
    handle: std::ptr::null_mut(),
};

fn view(info: &OwnedTensorInfo, data: *mut c_void, num_bytes: usize) -> abi::TensorView {
    abi::TensorView {
        struct_size: abi::size_u32::<abi::TensorView>(),
        reserved: 0,
        info: info.as_ptr(),
        data,
        num_bytes,
        handle: std::ptr::null_mut(),
    }
}

impl Workload for DynamicWorkload {
    fn execute(
        &self,
        inputs: &[TensorView<'_>],
        outputs: &mut [TensorViewMut<'_>],
    ) -> backplane_backend_api::Result<()> {
        let f = self
            .instance
            .table()
            .execute_workload
            .ok_or_else(|| BackendError::Other("execute_workload is null".into()))?;
        if inputs.len() != self.inputs.len() || outputs.len() != self.outputs.len() {
            return Err(BackendError::Other(format!(
                "layer '{}' takes {} inputs and {} outputs, got {} and {}",
                self.layer.name,
                self.inputs.len(),
                self.outputs.len(),
                inputs.len(),
                outputs.len()
            )));
        }
        // The views and the pointer arrays live on the stack for up to INLINE_VIEWS tensors
        // per side (every standard op), on the heap beyond.
        let mut in_inline = [EMPTY_VIEW; INLINE_VIEWS];
        let mut out_inline = [EMPTY_VIEW; INLINE_VIEWS];
        let mut in_heap = Vec::new();
        let mut out_heap = Vec::new();
        let in_views: &mut [abi::TensorView] = if inputs.len() <= INLINE_VIEWS {
            &mut in_inline[..inputs.len()]
        } else {
            in_heap.resize(inputs.len(), EMPTY_VIEW);
            &mut in_heap
        };
        for ((slot, v), info) in in_views.iter_mut().zip(inputs).zip(&self.inputs) {
            *slot = view(info, v.data.as_ptr() as *mut c_void, v.data.len());
        }
        let out_views: &mut [abi::TensorView] = if outputs.len() <= INLINE_VIEWS {
            &mut out_inline[..outputs.len()]
        } else {
            out_heap.resize(outputs.len(), EMPTY_VIEW);
            &mut out_heap
        };
        for ((slot, v), info) in out_views
            .iter_mut()
            .zip(outputs.iter_mut())
            .zip(&self.outputs)
        {
            *slot = view(info, v.data.as_mut_ptr().cast::<c_void>(), v.data.len());
        }
        let mut in_ptrs = [std::ptr::null::<abi::TensorView>(); INLINE_VIEWS];
        let mut out_ptrs = [std::ptr::null::<abi::TensorView>(); INLINE_VIEWS];
        let in_ptr_heap: Vec<*const abi::TensorView>;
        let out_ptr_heap: Vec<*const abi::TensorView>;
        let in_list: &[*const abi::TensorView] = if in_views.len() <= INLINE_VIEWS {
            for (p, v) in in_ptrs.iter_mut().zip(in_views.iter()) {
                *p = v;
            }
            &in_ptrs[..in_views.len()]
        } else {
            in_ptr_heap = in_views
                .iter()
                .map(|v| v as *const abi::TensorView)
                .collect();
            &in_ptr_heap
        };
        let out_list: &[*const abi::TensorView] = if out_views.len() <= INLINE_VIEWS {
            for (p, v) in out_ptrs.iter_mut().zip(out_views.iter()) {
                *p = v;
            }
            &out_ptrs[..out_views.len()]
        } else {
            out_ptr_heap = out_views
                .iter()
                .map(|v| v as *const abi::TensorView)
                .collect();
            &out_ptr_heap
        };
        let raw = self.raw;
        self.instance
            .call(|msg| {
                // SAFETY: a live workload; the views describe the layer's tensors as at
                // creation and point into the caller's buffers, which outlive the call; the
                // output buffers are exclusively borrowed (`&mut`) and so overlap nothing.
                unsafe {
                    f(
                        raw,
                        in_list.as_ptr(),
                        in_list.len(),
                        out_list.as_ptr(),
                        out_list.len(),
                        msg,
                    )
                }
            })
            .map_err(|e| backend_error(e, Some(&self.layer)))
    }

    /// Handles of this instance's own factories go to the plugin as handles (1.2); any other
    /// handle is mapped and goes as host memory.
    fn execute_handles(
        &self,
        inputs: &[&dyn TensorHandle],
        outputs: &mut [&mut dyn TensorHandle],
    ) -> backplane_backend_api::Result<()> {
        let f = self
            .instance
            .table()
            .execute_workload
            .ok_or_else(|| BackendError::Other("execute_workload is null".into()))?;
        if self.instance.table().create_tensor_handle.is_none() {
            return self.execute_mapped(inputs, outputs);
        }
        if inputs.len() != self.inputs.len() || outputs.len() != self.outputs.len() {
            return Err(BackendError::Other(format!(
                "layer '{}' takes {} inputs and {} outputs, got {} and {}",
                self.layer.name,
                self.inputs.len(),
                self.outputs.len(),
                inputs.len(),
                outputs.len()
            )));
        }
        let not_mapped = |what: &str, i: usize| {
            BackendError::Other(format!(
                "{what} {i} of layer '{}' is in memory that cannot be mapped",
                self.layer.name
            ))
        };
        // Host views that must outlive the call.
        let mut in_maps: Vec<Option<TensorView<'_>>> = Vec::with_capacity(inputs.len());
        let mut in_views = Vec::with_capacity(inputs.len());
        for (i, (h, info)) in inputs.iter().zip(&self.inputs).enumerate() {
            match self.own(*h) {
                Some(d) => {
                    let mut v = view(info, std::ptr::null_mut(), d.num_bytes);
                    v.handle = d.release_for_read();
                    in_views.push(v);
                    in_maps.push(None);
                }
                None => {
                    let m = h.map().ok_or_else(|| not_mapped("input", i))?;
                    in_views.push(view(info, m.data.as_ptr() as *mut c_void, m.data.len()));
                    in_maps.push(Some(m));
                }
            }
        }
        let mut out_views = Vec::with_capacity(outputs.len());
        let mut out_maps: Vec<TensorViewMut<'_>> = Vec::new();
        for (i, (h, info)) in outputs.iter_mut().zip(&self.outputs).enumerate() {
            let own = self.own(&**h).is_some();
            if own {
                let d = h
                    .as_any_mut()
                    .and_then(|a| a.downcast_mut::<DynamicTensorHandle>())
                    .ok_or_else(|| not_mapped("output", i))?;
                let mut v = view(info, std::ptr::null_mut(), d.num_bytes);
                v.handle = d.release_for_write();
                out_views.push(v);
            } else {
                let m = h.map_mut().ok_or_else(|| not_mapped("output", i))?;
                out_views.push(view(
                    info,
                    m.data.as_mut_ptr().cast::<c_void>(),
                    m.data.len(),
                ));
                out_maps.push(m);
            }
        }
        let in_list: Vec<*const abi::TensorView> = in_views
            .iter()
            .map(|v| v as *const abi::TensorView)
            .collect();
        let out_list: Vec<*const abi::TensorView> = out_views
            .iter()
            .map(|v| v as *const abi::TensorView)
            .collect();
        let raw = self.raw;
        let result = self
            .instance
            .call(|msg| {
                // SAFETY: a live workload; each view describes the layer's tensor as at
                // creation and holds either host memory (mapped views kept alive in
                // `in_maps`/`out_maps`, outputs exclusively borrowed) or a live handle of this
                // instance, unmapped (outputs) or not mapped for writing (inputs); outputs are
                // exclusive borrows, so no handle or buffer appears twice among them.
                unsafe {
                    f(
                        raw,
                        in_list.as_ptr(),
                        in_list.len(),
                        out_list.as_ptr(),
                        out_list.len(),
                        msg,
                    )
                }
            })
            .map_err(|e| backend_error(e, Some(&self.layer)));
        drop(out_maps);
        drop(in_maps);
        result
    }
}

impl DynamicWorkload {
    /// The trait's default: every handle mapped to host memory.
    fn execute_mapped(
        &self,
        inputs: &[&dyn TensorHandle],
        outputs: &mut [&mut dyn TensorHandle],
    ) -> backplane_backend_api::Result<()> {
        let not_mapped = || {
            BackendError::Other("a tensor of this layer is in memory that cannot be mapped".into())
        };
        let ins = inputs
            .iter()
            .map(|h| h.map().ok_or_else(not_mapped))
            .collect::<backplane_backend_api::Result<Vec<_>>>()?;
        let mut outs = outputs
            .iter_mut()
            .map(|h| h.map_mut().ok_or_else(not_mapped))
            .collect::<backplane_backend_api::Result<Vec<_>>>()?;
        self.execute(&ins, &mut outs)
    }

    /// The handle behind `h` if this instance made it.
    fn own<'h>(&self, h: &'h dyn TensorHandle) -> Option<&'h DynamicTensorHandle> {
        h.as_any()?
            .downcast_ref::<DynamicTensorHandle>()
            .filter(|d| Arc::ptr_eq(&d.instance, &self.instance))
    }
}

impl Drop for DynamicWorkload {
    fn drop(&mut self) {
        if let Some(f) = self.instance.table().destroy_workload {
            // SAFETY: made by this instance's `create_workload`, destroyed once.
            unsafe { f(self.raw) };
        }
    }
}

/// A backend context of the plugin.
struct DynamicContext {
    instance: Arc<PluginInstance>,
    raw: *mut abi::Context,
}

// SAFETY: the ABI makes plugin objects usable from any thread; the pointer is only handed back.
unsafe impl Send for DynamicContext {}
// SAFETY: as above.
unsafe impl Sync for DynamicContext {}

impl DynamicContext {
    fn hook(
        &self,
        f: Option<abi::ContextHookFn>,
        id: NetworkId,
    ) -> backplane_backend_api::Result<()> {
        let Some(f) = f else { return Ok(()) };
        let raw = self.raw;
        self.instance
            // SAFETY: a live context and a valid buffer.
            .call(|msg| unsafe { f(raw, id.0, msg) })
            .map_err(|e| backend_error(e, None))
    }
}

impl BackendContext for DynamicContext {
    fn before_load_network(&self, id: NetworkId) -> backplane_backend_api::Result<()> {
        self.hook(self.instance.table().context_before_load, id)
    }

    fn after_load_network(&self, id: NetworkId) -> backplane_backend_api::Result<()> {
        self.hook(self.instance.table().context_after_load, id)
    }

    fn before_unload_network(&self, id: NetworkId) -> backplane_backend_api::Result<()> {
        self.hook(self.instance.table().context_before_unload, id)
    }

    fn after_unload_network(&self, id: NetworkId) {
        if let Some(f) = self.instance.table().context_after_unload {
            let raw = self.raw;
            let _ = self.instance.call(|_| {
                // SAFETY: a live context.
                unsafe { f(raw, id.0) };
                abi::STATUS_OK
            });
        }
    }
}

impl Drop for DynamicContext {
    fn drop(&mut self) {
        if let Some(f) = self.instance.table().destroy_context {
            // SAFETY: made by this instance's `create_context`, destroyed once.
            unsafe { f(self.raw) };
        }
    }
}
