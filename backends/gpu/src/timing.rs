//! Per-layer GPU times from timestamp queries, used when profiling (`profile=true`) on an
//! adapter with `TIMESTAMP_QUERY`: each GPU layer's compute pass writes a timestamp as it
//! begins and as it ends, runs of layers are still submitted once (no wait per layer), and
//! when recorded work is submitted its timestamps are resolved, read back and turned into one
//! duration per layer. An execution's times are kept once it ends, for the profile's notes.

use crate::error::GpuError;

/// Timestamps per query set (wgpu's limit): two per layer.
const QUERIES: u32 = 4096;

/// The query set, its resolve and read-back buffers, and the layers timed so far.
pub(crate) struct Stamps {
    set: wgpu::QuerySet,
    resolve: wgpu::Buffer,
    read: wgpu::Buffer,
    /// Nanoseconds per timestamp tick.
    period: f64,
    /// Layers recorded since the last submit, in query order (2k begins, 2k + 1 ends).
    layers: Vec<String>,
    /// Layers recorded past the query set's capacity (untimed).
    pub(crate) untimed: u64,
    /// (layer, GPU milliseconds) of the execution under way.
    current: Vec<(String, f64)>,
    /// The same of the last execution that ended.
    pub(crate) last: Vec<(String, f64)>,
}

impl Stamps {
    /// The query set and buffers on `device`.
    pub(crate) fn new(device: &wgpu::Device, queue: &wgpu::Queue) -> Stamps {
        let set = device.create_query_set(&wgpu::QuerySetDescriptor {
            label: Some("GpuAcc layer timestamps"),
            ty: wgpu::QueryType::Timestamp,
            count: QUERIES,
        });
        let size = u64::from(QUERIES) * 8;
        let buffer = |label, usage| {
            device.create_buffer(&wgpu::BufferDescriptor {
                label: Some(label),
                size,
                usage,
                mapped_at_creation: false,
            })
        };
        Stamps {
            set,
            resolve: buffer(
                "GpuAcc timestamp resolve",
                wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
            ),
            read: buffer(
                "GpuAcc timestamp read-back",
                wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            ),
            period: f64::from(queue.get_timestamp_period()),
            layers: Vec::new(),
            untimed: 0,
            current: Vec::new(),
            last: Vec::new(),
        }
    }

    /// The timestamp writes of `layer`'s pass, or `None` once the set is full (the layer
    /// then runs untimed).
    pub(crate) fn writes(&mut self, layer: &str) -> Option<wgpu::ComputePassTimestampWrites<'_>> {
        let k = u32::try_from(self.layers.len()).ok()?;
        if 2 * k + 2 > QUERIES {
            self.untimed += 1;
            return None;
        }
        self.layers.push(layer.to_string());
        Some(wgpu::ComputePassTimestampWrites {
            query_set: &self.set,
            beginning_of_pass_write_index: Some(2 * k),
            end_of_pass_write_index: Some(2 * k + 1),
        })
    }

    /// Record the resolve of the timestamps written so far into `encoder`, before it is
    /// submitted; answers whether there were any.
    pub(crate) fn resolve(&self, encoder: &mut wgpu::CommandEncoder) -> bool {
        let n = (self.layers.len() * 2) as u32;
        if n == 0 {
            return false;
        }
        encoder.resolve_query_set(&self.set, 0..n, &self.resolve, 0);
        encoder.copy_buffer_to_buffer(&self.resolve, 0, &self.read, 0, u64::from(n) * 8);
        true
    }

    /// After the submit holding the resolve: read the timestamps back (waiting for the
    /// work) and add one duration per layer to the execution's times.
    pub(crate) fn collect(&mut self, device: &crate::GpuDevice) -> Result<(), GpuError> {
        let n = self.layers.len() * 2;
        let mut bytes = vec![0u8; n * 8];
        device.read_into(&self.read, &mut bytes)?;
        let ticks: Vec<u64> = bytes
            .chunks_exact(8)
            .map(|c| {
                let mut b = [0u8; 8];
                b.copy_from_slice(c);
                u64::from_le_bytes(b)
            })
            .collect();
        for (k, layer) in self.layers.drain(..).enumerate() {
            let (begin, end) = (ticks[2 * k], ticks[2 * k + 1]);
            let ms = end.saturating_sub(begin) as f64 * self.period / 1e6;
            self.current.push((layer, ms));
        }
        Ok(())
    }

    /// The execution under way ended: its times become the last execution's.
    pub(crate) fn end_execution(&mut self) {
        self.last = std::mem::take(&mut self.current);
        self.untimed = 0;
    }
}
