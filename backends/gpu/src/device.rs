//! The device: our own adapter selection over Vulkan, the device and queue, a pipeline
//! cache, the errors the device reports, and the blocking helpers (upload, read back) that
//! the borders between host and device memory need.

use crate::error::GpuError;
use crate::options::GpuAccOptions;
use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use wgpu::{Adapter, DeviceType};

/// Whether a thread is creating or destroying a Vulkan device: one at a time in the process.
/// NVIDIA's driver (580, through the Khronos loader) deadlocks when threads destroy devices
/// and instances at the same time (runtimes dropped in parallel threads hung in
/// `vkDestroyDevice` / `vkDestroyInstance` / `vkFreeMemory` on an H200); creation is held to
/// the same turn for good measure.
static LIFECYCLE: Mutex<bool> = Mutex::new(false);
static LIFECYCLE_FREE: Condvar = Condvar::new();

/// A turn at creating or destroying a device ([`LIFECYCLE`]), given back when dropped. Unlike
/// a `MutexGuard` it may be held by a `Send` value (a device being dropped).
struct LifecycleTurn;

impl LifecycleTurn {
    fn take() -> LifecycleTurn {
        let mut busy = LIFECYCLE.lock().unwrap_or_else(|p| p.into_inner());
        while *busy {
            busy = LIFECYCLE_FREE.wait(busy).unwrap_or_else(|p| p.into_inner());
        }
        *busy = true;
        LifecycleTurn
    }
}

impl Drop for LifecycleTurn {
    fn drop(&mut self) {
        *LIFECYCLE.lock().unwrap_or_else(|p| p.into_inner()) = false;
        LIFECYCLE_FREE.notify_one();
    }
}

/// A pool of reusable buffers (a workload's upload or read-back buffers).
pub(crate) type BufferPool = Arc<Mutex<Vec<wgpu::Buffer>>>;

/// Work recorded but not yet submitted: the command encoder consecutive GPU layers record
/// into, and the pooled buffers that work uses, handed back to their pools once it is
/// submitted (so no later upload overwrites them before the recorded dispatches ran).
#[derive(Default)]
pub(crate) struct Pending {
    pub(crate) encoder: Option<wgpu::CommandEncoder>,
    pub(crate) held: Vec<(BufferPool, wgpu::Buffer)>,
    /// Layers recorded into `encoder`.
    pub(crate) layers: u64,
    /// Timestamp queries of the layers, when profiling with them.
    pub(crate) stamps: Option<crate::timing::Stamps>,
    /// Status words the recorded work copies into read-back buffers, to check once it ran.
    pub(crate) statuses: Vec<StatusCheck>,
}

/// A layer's status word on its way to the host: the read-back buffer the recorded work
/// copies it into, and the pool that buffer returns to once read.
pub(crate) struct StatusCheck {
    /// The layer.
    pub(crate) layer: String,
    /// The read-back buffer (4 bytes).
    pub(crate) buffer: wgpu::Buffer,
    /// Its pool.
    pub(crate) pool: BufferPool,
}

/// Counters of the device's work since it was opened.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GpuStats {
    /// Queue submissions: one where a run of consecutive GPU layers hands an output to the
    /// host, at an execution's end, and one per `submit_every` layers of a longer run.
    pub submits: u64,
    /// Layer executions recorded.
    pub layers: u64,
    /// Compute dispatches recorded.
    pub dispatches: u64,
    /// Bind groups created (once per workload and set of tensor buffers, not per execution).
    pub bind_groups: u64,
    /// Layers recorded but not yet submitted (0 after every execution: its end submits them).
    pub pending_layers: u64,
    /// Bytes written from host memory into device buffers (weights once, at load; then per
    /// execution only what crosses a border).
    pub uploaded_bytes: u64,
}

/// Run a future to completion on this thread. wgpu's native futures are ready when first
/// polled (or after the device is polled), so this only spins in the unusual case.
pub(crate) fn block_on<F: Future>(future: F) -> F::Output {
    let mut future = std::pin::pin!(future);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    loop {
        if let std::task::Poll::Ready(v) = future.as_mut().poll(&mut cx) {
            return v;
        }
        std::thread::yield_now();
    }
}

/// What kind of adapter, in words.
fn kind_name(t: DeviceType) -> &'static str {
    match t {
        DeviceType::DiscreteGpu => "discrete GPU",
        DeviceType::IntegratedGpu => "integrated GPU",
        DeviceType::VirtualGpu => "virtual GPU",
        DeviceType::Cpu => "software",
        DeviceType::Other => "other",
    }
}

/// Preference rank of an adapter kind (lower is better); `None`: not acceptable.
fn rank(t: DeviceType, allow_software: bool) -> Option<u8> {
    match t {
        DeviceType::DiscreteGpu => Some(0),
        DeviceType::IntegratedGpu => Some(1),
        DeviceType::VirtualGpu => Some(2),
        DeviceType::Other => Some(3),
        DeviceType::Cpu => allow_software.then_some(4),
    }
}

/// The chosen adapter's description, for `backplane backends` and error messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdapterDesc {
    /// The adapter's name (e.g. "NVIDIA H100", "llvmpipe (LLVM 15.0.6, 256 bits)").
    pub name: String,
    /// Discrete, integrated, virtual, software or other.
    pub kind: &'static str,
    /// Driver name and version.
    pub driver: String,
}

impl std::fmt::Display for AdapterDesc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({}, {})", self.name, self.kind, self.driver)
    }
}

/// The device GpuAcc runs on, shared by every network a runtime loads.
pub struct GpuDevice {
    /// The adapter it was created from.
    pub adapter: AdapterDesc,
    pub(crate) device: wgpu::Device,
    pub(crate) queue: wgpu::Queue,
    /// The largest buffer one binding may cover.
    pub(crate) max_binding: u64,
    /// Errors the device reported outside any call that returns one (validation, memory).
    errors: Arc<Mutex<Vec<String>>>,
    /// Compiled pipelines by shader source.
    pipelines: Mutex<HashMap<String, wgpu::ComputePipeline>>,
    /// Whether the adapter offers timestamp queries (`wgpu::Features::TIMESTAMP_QUERY`).
    pub timestamp_query: bool,
    /// Whether f16 compute kernels can run: the device was opened with
    /// `wgpu::Features::SHADER_F16` (f16 arithmetic and 16-bit storage in shaders), or why not.
    pub shader_f16: Result<(), String>,
    /// Submit and wait after every layer (the `profile` option), so host timings per layer
    /// cover its GPU work.
    pub(crate) sync_each_layer: bool,
    /// Submit after this many recorded layers (0: only where work leaves the device).
    pub(crate) submit_every: u64,
    /// Recorded, unsubmitted work of consecutive GPU layers.
    pub(crate) pending: Mutex<Pending>,
    /// Status words of submitted work, not yet read.
    statuses: Mutex<Vec<StatusCheck>>,
    submits: AtomicU64,
    pub(crate) layers: AtomicU64,
    pub(crate) dispatches: AtomicU64,
    pub(crate) bind_groups: AtomicU64,
    uploaded_bytes: AtomicU64,
    /// Taken when the device is dropped and given back after every field above: declared
    /// last, so the Vulkan objects are destroyed during the turn ([`LIFECYCLE`]).
    teardown: Option<LifecycleTurn>,
}

impl Drop for GpuDevice {
    fn drop(&mut self) {
        self.teardown = Some(LifecycleTurn::take());
    }
}

impl std::fmt::Debug for GpuDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GpuDevice")
            .field("adapter", &self.adapter)
            .finish_non_exhaustive()
    }
}

/// Choose an adapter the options accept, preferring discrete over integrated GPUs and a
/// software adapter last (only with `allow_software`), and create its device.
pub fn open(options: &GpuAccOptions) -> Result<GpuDevice, GpuError> {
    let _turn = LifecycleTurn::take();
    let mut desc = wgpu::InstanceDescriptor::new_without_display_handle();
    desc.backends = wgpu::Backends::VULKAN;
    // No validation layers: Debian's misreport naga's shaders, and they are slow.
    desc.flags = wgpu::InstanceFlags::empty();
    let instance = wgpu::Instance::new(desc);
    let adapters: Vec<Adapter> = block_on(instance.enumerate_adapters(wgpu::Backends::VULKAN));
    if adapters.is_empty() {
        return Err(GpuError::NoAdapter(
            "no Vulkan adapter found (a Vulkan loader and driver are needed: on Debian, \
             libvulkan1 and mesa-vulkan-drivers)"
                .into(),
        ));
    }
    let found: Vec<String> = adapters
        .iter()
        .map(|a| {
            let i = a.get_info();
            format!("{} ({})", i.name, kind_name(i.device_type))
        })
        .collect();
    let wanted = options.adapter.as_ref().map(|s| s.to_lowercase());
    let best = adapters
        .into_iter()
        .filter(|a| {
            wanted
                .as_ref()
                .is_none_or(|w| a.get_info().name.to_lowercase().contains(w))
        })
        .filter_map(|a| rank(a.get_info().device_type, options.allow_software).map(|r| (r, a)))
        .min_by_key(|(r, _)| *r)
        .map(|(_, a)| a);
    let Some(adapter) = best else {
        let hint = if options.allow_software {
            ""
        } else {
            "; a software adapter is used only with the backend option allow_software=true"
        };
        let name = options
            .adapter
            .as_ref()
            .map(|n| format!(" named like '{n}'"))
            .unwrap_or_default();
        return Err(GpuError::NoAdapter(format!(
            "none of the Vulkan adapters [{}] is acceptable{name}{hint}",
            found.join(", ")
        )));
    };
    let info = adapter.get_info();
    let limits = adapter.limits();
    let features = adapter.features();
    let timestamp_query = features.contains(wgpu::Features::TIMESTAMP_QUERY);
    let stamped = options.profile && !options.no_timestamps && timestamp_query;
    let shader_f16 = if options.no_f16 {
        Err("f16 kernels are off (backend option f16=off)".to_string())
    } else if features.contains(wgpu::Features::SHADER_F16) {
        Ok(())
    } else {
        Err(format!(
            "the adapter {} does not offer SHADER_F16 (f16 arithmetic and 16-bit storage in shaders)",
            info.name
        ))
    };
    let mut required_features = wgpu::Features::empty();
    if stamped {
        required_features |= wgpu::Features::TIMESTAMP_QUERY;
    }
    if shader_f16.is_ok() {
        required_features |= wgpu::Features::SHADER_F16;
    }
    let (device, queue) = block_on(adapter.request_device(&wgpu::DeviceDescriptor {
        label: Some("GpuAcc"),
        required_features,
        required_limits: limits.clone(),
        experimental_features: wgpu::ExperimentalFeatures::disabled(),
        memory_hints: wgpu::MemoryHints::Performance,
        trace: wgpu::Trace::Off,
    }))
    .map_err(|e| GpuError::NoAdapter(format!("{}: {e}", info.name)))?;
    let errors: Arc<Mutex<Vec<String>>> = Arc::default();
    let sink = errors.clone();
    device.on_uncaptured_error(Arc::new(move |e: wgpu::Error| {
        sink.lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(e.to_string());
    }));
    let stamps = stamped.then(|| crate::timing::Stamps::new(&device, &queue));
    Ok(GpuDevice {
        adapter: AdapterDesc {
            name: info.name.clone(),
            kind: kind_name(info.device_type),
            driver: format!("{} {}", info.driver, info.driver_info)
                .trim()
                .to_string(),
        },
        device,
        queue,
        max_binding: limits
            .max_storage_buffer_binding_size
            .min(limits.max_buffer_size),
        errors,
        pipelines: Mutex::new(HashMap::new()),
        timestamp_query,
        shader_f16,
        sync_each_layer: options.profile && !stamped,
        submit_every: u64::from(
            options
                .submit_every
                .unwrap_or(crate::options::DEFAULT_SUBMIT_EVERY),
        ),
        pending: Mutex::new(Pending {
            stamps,
            ..Pending::default()
        }),
        statuses: Mutex::new(Vec::new()),
        submits: AtomicU64::new(0),
        layers: AtomicU64::new(0),
        dispatches: AtomicU64::new(0),
        bind_groups: AtomicU64::new(0),
        uploaded_bytes: AtomicU64::new(0),
        teardown: None,
    })
}

impl GpuDevice {
    /// The device's counters.
    pub fn stats(&self) -> GpuStats {
        GpuStats {
            submits: self.submits.load(Ordering::Relaxed),
            layers: self.layers.load(Ordering::Relaxed),
            dispatches: self.dispatches.load(Ordering::Relaxed),
            bind_groups: self.bind_groups.load(Ordering::Relaxed),
            uploaded_bytes: self.uploaded_bytes.load(Ordering::Relaxed),
            pending_layers: self
                .pending
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .layers,
        }
    }

    /// Submit the recorded work (with `pending` locked by the caller) and hand its held
    /// buffers back to their pools. Nothing recorded: nothing submitted.
    pub(crate) fn submit_pending(&self, pending: &mut Pending) -> Result<(), GpuError> {
        let mut stamped = false;
        if let Some(mut encoder) = pending.encoder.take() {
            if let Some(stamps) = &pending.stamps {
                stamped = stamps.resolve(&mut encoder);
            }
            self.queue.submit(Some(encoder.finish()));
            self.submits.fetch_add(1, Ordering::Relaxed);
        }
        pending.layers = 0;
        self.statuses
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .append(&mut pending.statuses);
        for (pool, buffer) in pending.held.drain(..) {
            pool.lock().unwrap_or_else(|p| p.into_inner()).push(buffer);
        }
        if stamped {
            if let Some(stamps) = pending.stamps.as_mut() {
                stamps.collect(self)?;
            }
        }
        self.check()
    }

    /// Wait until the device finished all submitted work.
    pub(crate) fn wait(&self) -> Result<(), GpuError> {
        self.device
            .poll(wgpu::PollType::wait_indefinitely())
            .map_err(|e| GpuError::Device(e.to_string()))?;
        self.check()
    }

    /// How per-layer times of this device read in a profile, in words; with timestamp
    /// queries, also the GPU time of each layer of the last execution.
    pub fn profiling_note(&self) -> String {
        let pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(stamps) = &pending.stamps {
            let times: Vec<String> = stamps
                .last
                .iter()
                .map(|(layer, ms)| format!("{layer}={ms:.4}"))
                .collect();
            return format!(
                "GpuAcc layer times: timestamp queries (the GPU time of each layer's pass, \
                 measured on the device; a run of GPU layers is still one submit, so the \
                 trace's durations are host-side recording times)\n{}GPU ms per layer of the \
                 last execution: {}",
                gpu_table(&stamps.last),
                times.join(", ")
            );
        }
        let stamps = if self.timestamp_query {
            "the adapter offers timestamp queries; profile=true uses them unless timestamps=false"
        } else {
            "the adapter offers no timestamp queries"
        };
        if self.sync_each_layer {
            format!(
                "GpuAcc layer times: each GPU layer is submitted and waited for on its own \
                 (host-side timing of the submit; {stamps})"
            )
        } else {
            format!(
                "GpuAcc layer times: a run of GPU layers is one submit, timed in the layer that \
                 ends it (the others show recording only); the option profile=true times each \
                 layer ({stamps})"
            )
        }
    }

    /// The execution under way ended: submit what it recorded; with timestamp queries, its
    /// layer times become the last execution's; then the status words of its layers are
    /// read (an error names the first layer that set its word).
    pub fn end_execution(&self) -> Result<(), GpuError> {
        {
            let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
            self.submit_pending(&mut pending)?;
            if let Some(stamps) = pending.stamps.as_mut() {
                stamps.end_execution();
            }
        }
        self.check_statuses()
    }

    /// Read the status words of all submitted work (waiting for it) and hand their buffers
    /// back; the first word set becomes the error of its layer. Nothing to read: no wait.
    pub(crate) fn check_statuses(&self) -> Result<(), GpuError> {
        let checks = std::mem::take(&mut *self.statuses.lock().unwrap_or_else(|p| p.into_inner()));
        let mut first = None;
        let mut failure = None;
        for c in checks {
            let mut word = [0u8; 4];
            match self.read_into(&c.buffer, &mut word) {
                Ok(()) if u32::from_le_bytes(word) != 0 && first.is_none() => {
                    first = Some(c.layer.clone());
                }
                Ok(()) => {}
                Err(e) => {
                    failure.get_or_insert(e);
                }
            }
            c.pool
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(c.buffer);
        }
        if let Some(e) = failure {
            return Err(e);
        }
        match first {
            Some(layer) => Err(GpuError::BadInput {
                layer,
                what: "a Gather index is outside the gathered axis".into(),
            }),
            None => Ok(()),
        }
    }

    /// Submit whatever consecutive GPU layers recorded (a no-op when nothing is pending).
    pub fn flush(&self) -> Result<(), GpuError> {
        let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        self.submit_pending(&mut pending)
    }

    /// The errors reported since the last check, as one error.
    pub(crate) fn check(&self) -> Result<(), GpuError> {
        let mut errors = self.errors.lock().unwrap_or_else(|p| p.into_inner());
        if errors.is_empty() {
            return Ok(());
        }
        let all = std::mem::take(&mut *errors).join("; ");
        Err(GpuError::Device(all))
    }

    /// A storage buffer of `bytes` (at least 4, rounded up to 4), refused when larger than
    /// one binding may be.
    pub(crate) fn storage(&self, what: &str, bytes: usize) -> Result<wgpu::Buffer, GpuError> {
        let size = padded(bytes);
        if size > self.max_binding {
            return Err(GpuError::TooLarge {
                what: what.to_string(),
                bytes: size,
                limit: self.max_binding,
            });
        }
        let buffer = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(what),
            size,
            usage: wgpu::BufferUsages::STORAGE
                | wgpu::BufferUsages::COPY_SRC
                | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        self.check()?;
        Ok(buffer)
    }

    /// A host-readable buffer that device buffers are copied into to be read back.
    pub(crate) fn readback(&self, what: &str, bytes: usize) -> Result<wgpu::Buffer, GpuError> {
        let buffer = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(what),
            size: padded(bytes),
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        self.check()?;
        Ok(buffer)
    }

    /// Write host bytes into a device buffer (ordered before the next submission).
    pub(crate) fn upload(&self, buffer: &wgpu::Buffer, bytes: &[u8]) {
        self.uploaded_bytes
            .fetch_add(bytes.len() as u64, Ordering::Relaxed);
        let whole = bytes.len() - bytes.len() % 4;
        if whole > 0 {
            self.queue.write_buffer(buffer, 0, &bytes[..whole]);
        }
        if whole < bytes.len() {
            let mut tail = [0u8; 4];
            tail[..bytes.len() - whole].copy_from_slice(&bytes[whole..]);
            self.queue.write_buffer(buffer, whole as u64, &tail);
        }
    }

    /// A storage buffer holding `bytes`.
    pub(crate) fn buffer_with(&self, what: &str, bytes: &[u8]) -> Result<wgpu::Buffer, GpuError> {
        let buffer = self.storage(what, bytes.len())?;
        self.upload(&buffer, bytes);
        Ok(buffer)
    }

    /// Wait for all submitted work, then copy the first `out.len()` bytes of `readback`
    /// (already filled by a submitted copy) into `out`.
    pub(crate) fn read_into(
        &self,
        readback: &wgpu::Buffer,
        out: &mut [u8],
    ) -> Result<(), GpuError> {
        if out.is_empty() {
            return Ok(());
        }
        let done: Arc<Mutex<Option<Result<(), String>>>> = Arc::default();
        let flag = done.clone();
        readback.map_async(wgpu::MapMode::Read, .., move |r| {
            *flag.lock().unwrap_or_else(|p| p.into_inner()) = Some(r.map_err(|e| e.to_string()));
        });
        // Another thread's poll may be running this map's callback just as ours returns:
        // poll again (a bounded number of times) until the callback has run.
        let mut outcome = None;
        for _ in 0..MAP_POLLS {
            self.device
                .poll(wgpu::PollType::wait_indefinitely())
                .map_err(|e| GpuError::Device(e.to_string()))?;
            outcome = done.lock().unwrap_or_else(|p| p.into_inner()).take();
            if outcome.is_some() {
                break;
            }
            std::thread::yield_now();
        }
        match outcome {
            Some(Ok(())) => {}
            Some(Err(e)) => return Err(GpuError::Device(format!("read back: {e}"))),
            None => return Err(GpuError::Device("read back did not complete".into())),
        }
        {
            let view = readback
                .get_mapped_range(..)
                .map_err(|e| GpuError::Device(e.to_string()))?;
            let n = out.len().min(view.len());
            out[..n].copy_from_slice(&view[..n]);
        }
        readback.unmap();
        self.check()
    }

    /// The pipeline of a compute shader (entry point `main`), compiled once per device.
    pub(crate) fn pipeline(&self, source: &str) -> Result<wgpu::ComputePipeline, GpuError> {
        let mut cache = self.pipelines.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(p) = cache.get(source) {
            return Ok(p.clone());
        }
        let module = self
            .device
            .create_shader_module(wgpu::ShaderModuleDescriptor {
                label: None,
                source: wgpu::ShaderSource::Wgsl(source.into()),
            });
        let pipeline = self
            .device
            .create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                label: None,
                layout: None,
                module: &module,
                entry_point: Some("main"),
                compilation_options: wgpu::PipelineCompilationOptions::default(),
                cache: None,
            });
        self.check()?;
        cache.insert(source.to_string(), pipeline.clone());
        Ok(pipeline)
    }
}

/// Layers in [`gpu_table`].
const TABLE_ROWS: usize = 10;

/// The layers of one execution that took the most GPU time, as a table like the CLI's
/// host-time table (share of the execution's GPU time, ms, layer), one row a line; empty
/// when nothing was timed.
fn gpu_table(times: &[(String, f64)]) -> String {
    if times.is_empty() {
        return String::new();
    }
    let total: f64 = times.iter().map(|(_, ms)| ms).sum();
    let mut rows: Vec<&(String, f64)> = times.iter().collect();
    rows.sort_by(|a, b| b.1.total_cmp(&a.1));
    let mut out = format!(
        "top GpuAcc layers by GPU time (timestamp queries, last execution, {} of {} layers, \
         {total:.3} ms in all):\n",
        rows.len().min(TABLE_ROWS),
        rows.len()
    );
    for (layer, ms) in rows.into_iter().take(TABLE_ROWS) {
        let share = if total > 0.0 { ms / total * 100.0 } else { 0.0 };
        out.push_str(&format!("  {share:>6.2}%  {ms:>9.3} ms  {layer} (GPU)\n"));
    }
    out
}

/// How many times a read back polls the device for its map callback before giving up.
const MAP_POLLS: usize = 10_000;

/// A buffer size: at least 4 bytes, a multiple of 4 (wgpu's copy alignment).
pub(crate) fn padded(bytes: usize) -> u64 {
    (bytes.max(4) as u64).div_ceil(4) * 4
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gpu_table_lists_the_slowest_layers_first_with_their_share() {
        assert_eq!(gpu_table(&[]), "");
        let times: Vec<(String, f64)> = (0..12)
            .map(|k| (format!("layer{k}"), f64::from(k)))
            .collect();
        let table = gpu_table(&times);
        let lines: Vec<&str> = table.lines().collect();
        assert!(
            lines[0].contains("10 of 12 layers, 66.000 ms in all"),
            "{table}"
        );
        assert_eq!(lines.len(), 11, "{table}");
        assert!(lines[1].ends_with("11.000 ms  layer11 (GPU)"), "{table}");
        assert!(lines[1].contains("16.67%"), "{table}");
        assert!(lines[10].contains("layer2 (GPU)"), "{table}");
    }
}
