//! The blocked drivers behind [`super::sgemm`]: a small prepacked A against a B packed on the
//! fly (convolutions), the column and row splits between threads, and the packed-A block
//! loop with its tiles.

use super::*;

/// Largest m·k (floats) of a prepacked A taken by [`sgemm_small_a`]: the whole A stays in L2
/// while every B panel streams past it.
pub(super) const SMALL_A: usize = 160 * 1024;
/// B panels packed at a time by [`sgemm_small_a`] (a kc × 256 block: a quarter of L2).
pub(super) const NB: usize = 8;
/// Below this many multiply-adds a product runs on one thread.
pub(super) const PARALLEL_MACS: usize = 1 << 21;

/// `sgemm` for a small prepacked A (convolution weights: m·k up to [`SMALL_A`]) and a B
/// packed on the fly (shifted runs of a convolution input, or a strided matrix). Each task owns a range of B's
/// columns and packs its own panels, [`NB`] at a time, right before the micro-kernel reads
/// them, so packed B never leaves L2 and threads never wait for each other: the work splits
/// over columns with no shared packing step. With a column task per thread or more, each
/// writes its own columns of C ([`small_a_columns`]); with fewer, each computes its block
/// into one shared buffer, copied into C at the end (or, when K is small, the rows split
/// instead, each task packing all of B).
#[allow(clippy::too_many_arguments)]
pub(super) fn sgemm_small_a(
    th: &Threads,
    m: usize,
    n: usize,
    k: usize,
    pa: &Packed,
    b: &BSrc<'_>,
    c: &mut [f32],
    ldc: usize,
    ep: &Epilogue<'_>,
    kernel_act: Activation,
) -> Result<()> {
    let np = n.div_ceil(NR);
    // Panels per task: as even as whole panels allow (13×13 outputs are 6 panels: two
    // tasks of 3 on two threads, not three of 2).
    let parallel = th.count() > 1 && m * n * k >= PARALLEL_MACS;
    let per = if parallel { column_share(th, n) } else { np };
    let row_units = m.div_ceil(ROW_STEP);
    if per >= np && (!parallel || row_units < 2) {
        return packed_a_block(n, k, pa, b, (0, m), (0, np), c, ldc, ep, kernel_act);
    }
    // Splitting rows makes every thread pack all of B (K×N floats each); splitting columns
    // costs a copy of C (M×N floats, shared out too). Rows win when K < M, as in a network's
    // first convolution (K = 27 for 32 outputs). A thread's rows start on a multiple of
    // ROW_STEP, not of MR, so shares stay even.
    let rows_per = m.div_ceil(th.count()).div_ceil(ROW_STEP) * ROW_STEP;
    if m >= 2 * ROW_STEP * th.count() && k < m {
        return th.chunks(c, rows_per * ldc, |ci, cc| {
            let r0 = ci * rows_per;
            let r1 = (r0 + rows_per).min(m);
            packed_a_block(n, k, pa, b, (r0, r1), (0, np), cc, ldc, ep, kernel_act)
        });
    }
    // Each task computes its columns into its own block of one buffer ([m × width] per
    // column share, the blocks one after another), then the rows are copied into C, also in
    // parallel. When the column shares are fewer than the threads (small planes on a large
    // host: a 7×7 output is 2 panels), each share's rows are split too, every task packing
    // the B panels of its columns.
    let share = per * NR;
    let col_tasks = np.div_ceil(per);
    let row_tasks = if col_tasks < th.count() {
        (2 * th.count()).div_ceil(col_tasks).min(row_units)
    } else {
        1
    };
    if row_tasks == 1 && in_place_columns(th, np, per) {
        return small_a_columns(th, (m, n, k), pa, b, per, c, ldc, ep, kernel_act);
    }
    let rows_per = row_units.div_ceil(row_tasks) * ROW_STEP;
    let mut parts = take(&PARTS_BUF, m * n);
    let mut tasks: Vec<(usize, usize, &mut [f32])> = Vec::new();
    tasks
        .try_reserve_exact(col_tasks * row_tasks)
        .map_err(|_| err("no memory for the task list"))?;
    let mut rest = &mut parts[..m * n];
    for t in 0..col_tasks {
        let width = share.min(n - t * share);
        let (mut block, tail) = std::mem::take(&mut rest).split_at_mut(m * width);
        rest = tail;
        for r0 in (0..m).step_by(rows_per) {
            let rows = rows_per.min(m - r0);
            let (part, below) = std::mem::take(&mut block).split_at_mut(rows * width);
            block = below;
            tasks.push((t, r0, part));
        }
    }
    let res = th.chunks(&mut tasks, 1, |_, task| {
        for (t, r0, part) in task.iter_mut() {
            let (p0, p1) = (*t * per, ((*t + 1) * per).min(np));
            let width = share.min(n - *t * share);
            let r1 = *r0 + part.len() / width;
            packed_a_block(
                n,
                k,
                pa,
                b,
                (*r0, r1),
                (p0, p1),
                part,
                width,
                ep,
                kernel_act,
            )?;
        }
        Ok(())
    });
    drop(tasks);
    let res = res.and_then(|()| copy_column_blocks(th, &parts, m, n, share, c, ldc));
    give_back(&PARTS_BUF, parts);
    res
}

/// Whether the column split of [`sgemm_small_a`] writes C's columns in place
/// ([`small_a_columns`]): with a column task for each thread or more, as
/// [`copy_column_blocks`] would copy each block on the thread that computed it anyway.
pub(super) fn in_place_columns(th: &Threads, np: usize, per: usize) -> bool {
    np.div_ceil(per.max(1)) >= th.count()
}

/// The column split of [`sgemm_small_a`] with each task writing its own columns of C: the
/// task computes [`NB`] panels at a time into a block of this thread's scratch (`m` rows of
/// at most `NB·NR` columns, in L2) and copies it into its columns of C right away. The
/// split through one `m × n` buffer wrote every product to memory and read it back in a
/// second step; here the copy reads what the tiles just stored, and one step does it all.
/// The tiles, their K blocks and their order per element are those of the buffered split,
/// so C gets the same bits.
#[allow(clippy::too_many_arguments)]
fn small_a_columns(
    th: &Threads,
    (m, n, k): (usize, usize, usize),
    pa: &Packed,
    b: &BSrc<'_>,
    per: usize,
    c: &mut [f32],
    ldc: usize,
    ep: &Epilogue<'_>,
    kernel_act: Activation,
) -> Result<()> {
    let np = n.div_ceil(NR);
    let per = per.max(1);
    // One row may come with any stride (`sgemm` checks it only between rows).
    let ldc = ldc.max(n);
    th.columns(c, ldc, m, n, per * NR, |t, mut cols| {
        let (p0, p1) = (t * per, ((t + 1) * per).min(np));
        let mut buf = try_take(&PARTS_BUF, m * NB * NR)?;
        let res = (|| -> Result<()> {
            for q0 in (p0..p1).step_by(NB) {
                let q1 = (q0 + NB).min(p1);
                let width = (q1 * NR).min(n) - q0 * NR;
                let block = buf
                    .get_mut(..m * width)
                    .ok_or_else(|| err("column block buffer too short"))?;
                packed_a_block(n, k, pa, b, (0, m), (q0, q1), block, width, ep, kernel_act)?;
                let at = (q0 - p0) * NR;
                for (i, src) in block.chunks_exact(width).enumerate() {
                    let dst = cols
                        .row(i)
                        .and_then(|row| row.get_mut(at..at + width))
                        .ok_or_else(|| err("column block out of range"))?;
                    dst.copy_from_slice(src);
                }
            }
            Ok(())
        })();
        give_back(&PARTS_BUF, buf);
        res
    })
}

/// Columns of a panel the tiles compute at half width: a last panel of at most this many
/// columns costs them about half a full one (one vector per row instead of two).
const HALF_PANEL: usize = NR / 2;

/// Panels per column task of [`sgemm_small_a`] when `th` shares `n` columns: the
/// [`Threads::share`] of the panels, except where the last panel is narrow
/// ([`HALF_PANEL`] columns or fewer, run at half the cost). Counted as a whole panel, it
/// made a 14×14 plane's 7 panels tasks of 2 + 2 | 2 + 1, the busiest thread doing 4 of
/// 6.5 panels' work; weighted by its cost, the tasks are 3 | 3 + 1, the busiest doing 3.5.
pub(super) fn column_share(th: &Threads, n: usize) -> usize {
    let np = n.div_ceil(NR);
    let last = n - (np.max(1) - 1) * NR;
    if th.count() < 2 || np < 2 || last > HALF_PANEL {
        return th.share(np, 1, 2);
    }
    // Costs in half panels; a chunk's cost is its panels', the last chunk's one less.
    let cost = |per: usize, i: usize| {
        let panels = per.min(np - i * per);
        2 * panels - usize::from((i + 1) * per >= np)
    };
    // Chunks go in order to whichever thread is free first: the busiest thread's load.
    let busiest = |per: usize| {
        let mut loads = [0usize; 64];
        let loads = &mut loads[..th.count().min(64)];
        for i in 0..np.div_ceil(per) {
            if let Some(least) = loads.iter_mut().min() {
                *least += cost(per, i);
            }
        }
        loads.iter().copied().max().unwrap_or(0)
    };
    // From one chunk per thread down to about two per thread: the finest of the evenest.
    let one_each = np.div_ceil(th.count());
    let finest = np.div_ceil(2 * th.count()).max(1);
    let mut best = one_each;
    let mut best_load = busiest(one_each);
    for per in (finest..one_each).rev() {
        let load = busiest(per);
        if load <= best_load {
            best = per;
            best_load = load;
        }
    }
    best
}

/// Copy the column blocks of a split product into C: `parts` holds, for each `share` columns
/// of C from the left, an [m × width] block (the last one narrower), one after another.
/// With a block for each thread or more, each block is copied by the thread that computed it
/// (the blocks' step and this one claim items alike, [`Threads::columns`]): it reads what it
/// wrote, and C's columns (a convolution's pixels) stay with that thread for the next layer.
/// With fewer, the rows are shared out.
#[allow(clippy::too_many_arguments)]
pub(super) fn copy_column_blocks(
    th: &Threads,
    parts: &[f32],
    m: usize,
    n: usize,
    share: usize,
    c: &mut [f32],
    ldc: usize,
) -> Result<()> {
    let share = share.max(1);
    if th.count() > 1 && n.div_ceil(share) >= th.count() {
        return th.columns(c, ldc, m, n, share, |t, mut cols| {
            let (j0, width) = (t * share, cols.width());
            let block = parts
                .get(m * j0..m * (j0 + width))
                .ok_or_else(|| err("column block out of range"))?;
            for (i, src) in block.chunks_exact(width).enumerate() {
                if let Some(row) = cols.row(i) {
                    row.copy_from_slice(src);
                }
            }
            Ok(())
        });
    }
    let rows_per = th.chunk_size(m, 1, 1);
    th.chunks(&mut c[..(m - 1) * ldc + n], rows_per * ldc, |ci, cc| {
        for (r, row) in cc.chunks_mut(ldc).enumerate() {
            let i = ci * rows_per + r;
            for j0 in (0..n).step_by(share) {
                let width = share.min(n - j0);
                let src = &parts[m * j0 + i * width..m * j0 + (i + 1) * width];
                row[j0..j0 + width].copy_from_slice(src);
            }
        }
        Ok(())
    })
}

/// `sgemm` for at most [`COLUMN_SPLIT_ROWS`] rows of A and a packed B, on more than one
/// thread: the column panels split between tasks, each computing its columns for every K
/// block into its own block of a buffer (A packed by each task), then copied into C. Each
/// task reads only its share of B: the split for few rows against large weights (a batch-1
/// fully connected layer, a convolution over a 7×7 plane), where a split of the rows would
/// have every thread stream all the weights. With `ep.accumulate` a task's block starts
/// from C's values of its columns.
#[allow(clippy::too_many_arguments)]
pub(super) fn sgemm_columns(
    th: &Threads,
    m: usize,
    n: usize,
    k: usize,
    a: &ASrc<'_>,
    pb: &Packed,
    c: &mut [f32],
    ldc: usize,
    ep: &Epilogue<'_>,
    kernel_act: Activation,
) -> Result<()> {
    if m > COLUMN_SPLIT_ROWS {
        return Err(err("the column split takes at most a few blocks of rows"));
    }
    let np = n.div_ceil(NR);
    let per = th.share(np, 1, 2);
    let share = per * NR;
    let mut parts = take(&PARTS_BUF, m * n);
    let seen: &[f32] = c;
    let res = th.chunks(&mut parts[..m * n], m * share, |t, block| {
        let width = block.len() / m;
        let j0 = t * share;
        if ep.accumulate {
            for (i, row) in block.chunks_exact_mut(width).enumerate() {
                row.copy_from_slice(&seen[i * ldc + j0..][..width]);
            }
        }
        let mut abuf = match a {
            ASrc::View(_) => take(&A_BUF, KC * m.div_ceil(MR) * MR),
            ASrc::Packed(_) => AlignedVec::new(),
        };
        let res = (|| -> Result<()> {
            for (kb, pc) in (0..k).step_by(KC).enumerate() {
                let kc = KC.min(k - pc);
                let ap: &[f32] = match a {
                    ASrc::Packed(pa) => pa.block(kb, 0)?,
                    ASrc::View(v) => {
                        pack_a_view(v, 0, m, pc, kc, &mut abuf);
                        &abuf
                    }
                };
                let panels = pb.block(kb, t * per)?;
                for (q, bp) in panels.chunks(kc * NR).take(per).enumerate() {
                    let col = j0 + q * NR;
                    if col >= n {
                        break;
                    }
                    let nr = NR.min(n - col);
                    for ir in 0..m.div_ceil(MR) {
                        let (row, mr) = (ir * MR, MR.min(m - ir * MR));
                        let tep = ep.tile(
                            kb > 0 || ep.accumulate,
                            pc + kc == k,
                            (row, col),
                            kernel_act,
                        );
                        let ap = ap.get(ir * kc * MR..).unwrap_or(&[]);
                        let cs = block.get_mut(row * width + q * NR..).unwrap_or(&mut []);
                        // This task's next panel (the first past its share is another's).
                        let ahead = match q + 1 < per {
                            true => next_panel_share(panels, q, kc, ir),
                            false => &[],
                        };
                        if !simd::microkernel_fetching(kc, ap, bp, cs, width, mr, nr, &tep, ahead) {
                            return Err(err("micro-kernel bounds"));
                        }
                    }
                }
            }
            act_after_block(ep.act, kernel_act, true, block, width, m, width);
            Ok(())
        })();
        if !abuf.is_empty() {
            give_back(&A_BUF, abuf);
        }
        res
    });
    let res = res.and_then(|()| copy_column_blocks(th, &parts, m, n, share, c, ldc));
    give_back(&PARTS_BUF, parts);
    res
}

/// `sgemm` for a large prepacked A and a narrow B (at most [`NB`] panels, as in the last
/// layers of a CNN, where A is megabytes of weights and B a few dozen columns), on more than
/// one thread: the rows split between threads, each packing its own copy of B (small) so
/// that there is one parallel step, not one per K block, and each thread reads only its
/// share of A.
#[allow(clippy::too_many_arguments)]
pub(super) fn sgemm_rows(
    th: &Threads,
    m: usize,
    n: usize,
    k: usize,
    pa: &Packed,
    b: &BSrc<'_>,
    c: &mut [f32],
    ldc: usize,
    ep: &Epilogue<'_>,
    kernel_act: Activation,
) -> Result<()> {
    let np = n.div_ceil(NR);
    let rows_per = th.chunk_size(m, ROW_STEP, ROW_STEP);
    th.chunks(c, rows_per * ldc, |ci, cc| {
        let r0 = ci * rows_per;
        let r1 = (r0 + rows_per).min(m);
        packed_a_block(n, k, pa, b, (r0, r1), (0, np), cc, ldc, ep, kernel_act)
    })
}

/// Rows `rows.0..rows.1` (`rows.0` a multiple of [`ROW_STEP`]) and column panels
/// `panels.0..panels.1` of C, stored from `c` (its first element is that block's top left;
/// row stride `ldc`). B is packed [`NB`] panels at a time, right before use.
#[allow(clippy::too_many_arguments)]
pub(super) fn packed_a_block(
    n: usize,
    k: usize,
    pa: &Packed,
    b: &BSrc<'_>,
    rows: (usize, usize),
    panels: (usize, usize),
    c: &mut [f32],
    ldc: usize,
    ep: &Epilogue<'_>,
    kernel_act: Activation,
) -> Result<()> {
    let (p0, p1) = panels;
    let (r0, r1) = rows;
    let mut bbuf = take(&B_BUF, KC.min(k) * NB * NR);
    let result = (|| -> Result<()> {
        let col0 = p0 * NR;
        for q0 in (p0..p1).step_by(NB) {
            let q1 = (q0 + NB).min(p1);
            for (kb, pc) in (0..k).step_by(KC).enumerate() {
                let kc = KC.min(k - pc);
                let len = (q1 - q0) * kc * NR;
                let buf: &[f32] = match b {
                    BSrc::View(v) => {
                        pack_b_view(v, n, q0 * NR, pc, kc, &mut bbuf[..len]);
                        &bbuf[..len]
                    }
                    BSrc::Normed(v, norm) => {
                        pack_b_normed(v, norm, n, q0 * NR, pc, kc, &mut bbuf[..len]);
                        &bbuf[..len]
                    }
                    BSrc::Shifted(s) => {
                        pack_b_shifted(s, n, q0 * NR, pc, kc, &mut bbuf[..len])?;
                        &bbuf[..len]
                    }
                    BSrc::Panels(d) => panels_block(d, k, n, kb, q0)?
                        .get(..len)
                        .ok_or_else(|| err("B panels are too small"))?,
                    BSrc::Packed(_) => return Err(err("packed B in the small-A path")),
                };
                let apanels = pa.block(kb, 0)?;
                let last = pc + kc == k;
                // The block packed after this one: the next K block of these columns, or
                // the first of the next columns.
                let next = match (pc + KC < k, q1 < p1) {
                    (true, _) => Some((pc + KC, q0 * NR, (q1 * NR).min(n) - q0 * NR)),
                    (false, true) => {
                        let q2 = (q1 + NB).min(p1);
                        Some((0, q1 * NR, (q2 * NR).min(n) - q1 * NR))
                    }
                    (false, false) => None,
                };
                let calls = tiles(r0, r1).count() * (q1 - q0);
                let ahead = Ahead::new(b, k, next, calls);
                let mut call = 0;
                for (panel, row0, mr) in tiles(r0, r1) {
                    let row = panel * MR + row0 - r0;
                    let ap = apanels.get(panel * kc * MR..).unwrap_or(&[]);
                    for (q, bp) in (q0..q1).zip(buf.chunks_exact(kc * NR)) {
                        let col = q * NR;
                        let nr = NR.min(n - col);
                        let tep = ep.tile(kb > 0, last, (r0 + row, col), kernel_act);
                        let cs = c.get_mut(row * ldc + col - col0..).unwrap_or(&mut []);
                        let fetch = ahead.step(call, kc);
                        call += 1;
                        if !simd::microkernel_rows_fetching(
                            kc, ap, row0, bp, cs, ldc, mr, nr, &tep, fetch,
                        ) {
                            return Err(err("micro-kernel bounds"));
                        }
                    }
                }
            }
            let block = c.get_mut((q0 - p0) * NR..).unwrap_or(&mut []);
            let width = (q1 * NR).min(n) - q0 * NR;
            act_after_block(ep.act, kernel_act, true, block, ldc, r1 - r0, width);
        }
        Ok(())
    })();
    give_back(&B_BUF, bbuf);
    result
}

/// The micro-tiles covering rows `r0..r1` of a packed A, in order: (panel, first row inside
/// the panel, rows). Only the first may start inside its panel.
pub(super) fn tiles(r0: usize, r1: usize) -> impl Iterator<Item = (usize, usize, usize)> {
    let mut r = r0;
    std::iter::from_fn(move || {
        if r >= r1 {
            return None;
        }
        let (panel, row0) = (r / MR, r % MR);
        let rows = (MR - row0).min(r1 - r);
        r += rows;
        Some((panel, row0, rows))
    })
}

/// Panels of B per packing task: all of them on one thread, or an even share when the block
/// is large enough to be worth splitting.
pub(super) fn pack_share(th: &Threads, np: usize, kc: usize) -> usize {
    if th.count() == 1 || np * kc * NR < 16 * 1024 {
        np.max(1)
    } else {
        np.div_ceil(th.count()).max(1)
    }
}

/// Least span of a B view's rows (floats) whose blocks [`Ahead`] fetches: 1 MiB, most of a
/// core's L2. A smaller input (a bottleneck's 1×1 expansion, right after the layer that
/// wrote it) is mostly still in L2, and fetching it only added work to the tiles.
pub(super) const FETCH_MIN_SPAN: usize = 256 * 1024;

/// The source rows of the B block a product packs next, fetched into L2 a share at a time
/// by the tiles of the current block as they run (one line per K step): a block's K rows
/// of a view lie in as many pages (a convolution's input planes), more than the hardware
/// prefetchers follow, so its packing otherwise waits on memory row by row. Views with unit
/// column stride only (plain or normalized), on the AVX-512 tier (whose tile fetches);
/// other sources and tiers fetch nothing.
pub(super) struct Ahead<'a> {
    view: Option<&'a MatView<'a>>,
    /// First K row and rows of the next block.
    rows: (usize, usize),
    /// First column and columns of the next block.
    cols: (usize, usize),
    /// Rows fetched per tile.
    per: usize,
}

impl<'a> Ahead<'a> {
    /// The fetches for the block `next` (first K row, first column, columns) of `b` (K deep),
    /// shared out over `steps` tiles.
    pub(super) fn new(
        b: &'a BSrc<'a>,
        k: usize,
        next: Option<(usize, usize, usize)>,
        steps: usize,
    ) -> Self {
        let view = match b {
            BSrc::View(v) | BSrc::Normed(v, _)
                if v.cs == 1
                    && simd::isa_in_use() == simd::Isa::Avx512
                    && k * v.rs >= FETCH_MIN_SPAN =>
            {
                Some(v)
            }
            _ => None,
        };
        let (k0, j0, width) = next.unwrap_or((k, 0, 0));
        let kc = KC.min(k.saturating_sub(k0));
        Ahead {
            view: view.filter(|_| next.is_some()),
            rows: (k0, kc),
            cols: (j0, width),
            per: kc.div_ceil(steps.max(1)),
        }
    }

    /// Only the `part`-th of `parts` even shares of the rows (one thread's, where several
    /// run tiles of the same block).
    pub(super) fn part(mut self, part: usize, parts: usize) -> Self {
        let (k0, kc) = self.rows;
        let share = kc.div_ceil(parts.max(1));
        let from = (part * share).min(kc);
        let rows = share.min(kc - from);
        let steps = kc.div_ceil(self.per.max(1));
        self.rows = (k0 + from, rows);
        self.per = rows.div_ceil(steps.max(1));
        self
    }

    /// Tile `i`'s share of the rows, for a tile `kc` deep: the rows whose lines it fetches
    /// one per K step; any more are asked for at once.
    #[inline]
    pub(super) fn step(&self, i: usize, kc: usize) -> simd::Fetch<'a> {
        let Some(v) = self.view else {
            return simd::Fetch::NONE;
        };
        let (k0, rows) = self.rows;
        let (j0, width) = self.cols;
        let (from, to) = ((i * self.per).min(rows), ((i + 1) * self.per).min(rows));
        let in_tile = (kc / width.div_ceil(16).max(1)).min(to - from);
        for r in (from + in_tile..to).map(|r| k0 + r) {
            if let Some(run) = v.data.get(r * v.rs + j0..r * v.rs + j0 + width) {
                simd::prefetch_l2(run);
            }
        }
        simd::Fetch {
            data: v.data.get((k0 + from) * v.rs + j0..).unwrap_or(&[]),
            run: width,
            pitch: v.rs,
            runs: in_tile,
        }
    }
}
