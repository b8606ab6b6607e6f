//! The geometry of a 2-D window (convolution or pooling) over one plane.

/// 2-D window geometry (one spatial axis pair).
#[derive(Debug, Clone, Copy)]
pub struct Geo2 {
    /// Input height, width.
    pub h: usize,
    /// Input width.
    pub w: usize,
    /// Kernel.
    pub kh: usize,
    /// Kernel width.
    pub kw: usize,
    /// Strides.
    pub sh: usize,
    /// Horizontal stride.
    pub sw: usize,
    /// Dilations.
    pub dh: usize,
    /// Horizontal dilation.
    pub dw: usize,
    /// Leading pads.
    pub pt: usize,
    /// Left pad.
    pub pl: usize,
    /// Output.
    pub oh: usize,
    /// Output width.
    pub ow: usize,
}

impl Geo2 {
    /// Whether the window is 1×1 and unpadded with every output reading a pixel inside the
    /// plane (any stride): the output pixels are a subsampling of the input's.
    #[inline]
    pub fn pointwise_inside(&self) -> bool {
        self.kh == 1
            && self.kw == 1
            && self.pt == 0
            && self.pl == 0
            && self.oh.saturating_sub(1) * self.sh < self.h
            && self.ow.saturating_sub(1) * self.sw < self.w
    }

    /// Rows of the padded plane the windows read.
    #[inline]
    pub fn padded_rows(&self) -> usize {
        (self.oh.saturating_sub(1)) * self.sh + (self.kh.saturating_sub(1)) * self.dh + 1
    }

    /// Columns of the padded plane the windows read.
    #[inline]
    pub fn padded_cols(&self) -> usize {
        (self.ow.saturating_sub(1)) * self.sw + (self.kw.saturating_sub(1)) * self.dw + 1
    }

    /// Floats of one stride phase of a padded row.
    #[inline]
    pub fn phase_len(&self) -> usize {
        self.padded_cols().div_ceil(self.sw)
    }

    /// Floats of one phase-split padded row.
    #[inline]
    pub fn row_len(&self) -> usize {
        self.phase_len() * self.sw
    }

    /// Scratch floats one prepared plane needs.
    #[inline]
    pub fn scratch_len(&self) -> usize {
        // With a stride, one more padded row: [`prepare_body`] pads each row there before
        // splitting it into phases.
        self.padded_rows() * self.row_len() + if self.sw == 1 { 0 } else { self.row_len() }
    }
}
