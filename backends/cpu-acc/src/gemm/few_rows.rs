//! The in-place tiles for a product with few rows against a large B (a transformer's
//! projections at sequence length 64-256, GPT-2's lm_head): every row of C in one block, so
//! each K block of B is read once per run, and with threads the columns, not the rows, shared
//! out, so no two threads read the same weights.
//!
//! [`super::sgemm_in_place`] splits C's rows between tasks and cuts each task's rows into
//! blocks of at most 60: with 64 rows and two threads, four tasks each streamed all of B
//! (megabytes, from L3 or memory) and ran a partly empty six-row tile.

use super::*;

/// Most rows of A the column split takes: their K block (`rows · KC` floats, 256 KB) stays
/// in L2 beside the B half-panel in L1 while the tiles run down them.
pub(super) const FEW_ROWS: usize = 256;

/// Least `k · n` (floats of B) worth the column split: a B that does not fit in L2, which the
/// row split re-reads once per block of rows.
pub(super) const LARGE_B: usize = 1 << 17;

/// Whether [`sgemm_few_rows`] takes an in-place product of `m` rows against a K×N B.
pub(super) fn takes(th: &Threads, m: usize, n: usize, k: usize, ep: &Epilogue<'_>) -> bool {
    let panels = n.div_ceil(NR);
    m <= FEW_ROWS
        && k * n >= LARGE_B
        && (th.count() == 1 || (!ep.accumulate && panels >= 2 * th.count()))
}

/// [`super::sgemm`] of `m` ([`FEW_ROWS`] at most) rows of a row-major A read in place against
/// packed B `panels`: on one thread all rows in one block; on more, the column panels split
/// into tasks (several per thread, so a descheduled helper leaves little behind), each
/// computing its columns for every row into its own block of a buffer, then copied into C.
/// The caller checked [`takes`] (no accumulation into C with threads).
#[allow(clippy::too_many_arguments)]
pub(super) fn sgemm_few_rows(
    th: &Threads,
    m: usize,
    n: usize,
    k: usize,
    av: &MatView<'_>,
    panels: (&[f32], simd::Halves),
    c: &mut [f32],
    ldc: usize,
    ep: &Epilogue<'_>,
    in_tile: Activation,
) -> Result<()> {
    let np = n.div_ceil(NR);
    if th.count() == 1 {
        return columns_block(m, n, k, av, panels, (0, np), c, ldc, ep, in_tile);
    }
    if ep.accumulate {
        return Err(err("the column split does not accumulate into C"));
    }
    let per = th.share(np, 1, 4);
    let share = per * NR;
    let mut parts = try_take(&PARTS_BUF, m * n)?;
    let res = th.chunks(&mut parts[..m * n], m * share, |t, block| {
        let width = block.len() / m;
        let cols = (t * per, ((t + 1) * per).min(np));
        columns_block(m, n, k, av, panels, cols, block, width, ep, in_tile)
    });
    let res = res.and_then(|()| copy_column_blocks(th, &parts, m, n, share, c, ldc));
    give_back(&PARTS_BUF, parts);
    res
}

/// Largest `m · k` (floats of A) for which [`columns_block`] runs each panel through every K
/// block before the next panel: the whole A (at most 384 KB, BERT's 128 rows of 768, of a
/// 512 KB L2) then stays in L2, and each tile of C, accumulated over the K blocks while it
/// is still in L1, is written out once. With K blocks outermost, every K block after the
/// first reads C back from wherever it went (GPT-2's c_fc: 786 KB of C per K block, past
/// L2; its lm_head 12.8 MB).
pub(super) const A_IN_L2: usize = 96 * 1024;

/// Columns of panels `cols.0..cols.1` of `C = A·B` for all `m` rows, stored from `c` (its
/// first element is row 0, column `cols.0 · NR`; row stride `ldc`): each half-panel of B
/// runs down every row, six at a time; K blocks outermost, or, when A fits in L2
/// ([`A_IN_L2`]), panels outermost.
#[allow(clippy::too_many_arguments)]
fn columns_block(
    m: usize,
    n: usize,
    k: usize,
    av: &MatView<'_>,
    (panels, halves): (&[f32], simd::Halves),
    cols: (usize, usize),
    c: &mut [f32],
    ldc: usize,
    ep: &Epilogue<'_>,
    in_tile: Activation,
) -> Result<()> {
    let col0 = cols.0 * NR;
    let mut tile = |hp: &HalfPanel<'_>, next: usize| {
        let a = av.data.get(hp.k0..).unwrap_or(&[]);
        let tep = ep.tile(ep.accumulate || hp.kb > 0, hp.last, (0, hp.j0), in_tile);
        let cb = c.get_mut(hp.j0 - col0..).unwrap_or(&mut []);
        match simd::tiles_strided(hp.kc, a, av.rs, m, hp.b, cb, ldc, hp.nr, &tep, next) {
            true => Ok(()),
            false => Err(err("in-place tiles refused")),
        }
    };
    if k > KC && m * k <= A_IN_L2 {
        each_half_panel_by_columns((panels, halves), k, n, simd::WIDE, cols, tile)?;
    } else {
        each_half_panel_in((panels, halves), k, n, simd::WIDE, cols, |hp| {
            tile(hp, halves.next(hp.kc, hp.j0 % NR))
        })?;
    }
    let width = (cols.1 * NR).min(n).saturating_sub(col0);
    act_after_block(ep.act, in_tile, true, c, ldc, m, width);
    Ok(())
}

/// [`each_half_panel_in`] with panels outermost: each panel's halves (or whole panel, as
/// there) in K block 0, then in K block 1, and so on, before the next panel. `f` also gets
/// the prefetch offset of the half it visits next (from the start of the one it gets, any
/// direction: a prefetch hint wraps, never faults).
pub(super) fn each_half_panel_by_columns(
    (panels, halves): (&[f32], simd::Halves),
    k: usize,
    n: usize,
    wide: usize,
    cols: (usize, usize),
    mut f: impl FnMut(&HalfPanel<'_>, usize) -> Result<()>,
) -> Result<()> {
    let padded = n.div_ceil(NR) * NR;
    // Every (panel, K block, column) visited, in order, with where its half starts (only
    // panels that exist: a range past N visits no more).
    let visits = (cols.0..cols.1.min(n.div_ceil(NR))).flat_map(|pi| {
        let width = (n - pi * NR).min(NR);
        let step = if width > simd::HALF && width <= wide {
            NR
        } else {
            simd::HALF
        };
        (0..k).step_by(KC).enumerate().flat_map(move |(kb, k0)| {
            let kc = KC.min(k - k0);
            (0..width).step_by(step).map(move |h| {
                let at = k0 * padded + pi * kc * NR + halves.start(kc, h);
                (pi, kb, k0, kc, h, (width - h).min(step), at)
            })
        })
    });
    let mut visits = visits.peekable();
    while let Some((pi, kb, k0, kc, h, nr, at)) = visits.next() {
        let next = visits.peek().map_or(0, |v| v.6.wrapping_sub(at));
        let b = panels
            .get(at..)
            .ok_or_else(|| err("B panels are too small"))?;
        f(
            &HalfPanel {
                kb,
                k0,
                kc,
                j0: pi * NR + h,
                nr,
                b: (b, halves),
                last: k0 + kc == k,
            },
            next,
        )?;
    }
    Ok(())
}
