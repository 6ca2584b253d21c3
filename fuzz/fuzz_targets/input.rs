//! Fields read from a fuzz input, zeros once it runs out: shared by the targets that build
//! a foreign structure field by field (`pickle_rebuild`, `buffer_protocol`).

/// The rest of a fuzz input.
pub struct Input<'a>(pub &'a [u8]);

impl Input<'_> {
    /// The next `K` bytes.
    pub fn bytes<const K: usize>(&mut self) -> [u8; K] {
        let mut out = [0u8; K];
        let n = K.min(self.0.len());
        out[..n].copy_from_slice(&self.0[..n]);
        self.0 = &self.0[n..];
        out
    }

    /// The next byte.
    pub fn u8(&mut self) -> u8 {
        self.bytes::<1>()[0]
    }

    /// The next byte's low bit.
    pub fn flag(&mut self) -> bool {
        self.u8() & 1 == 1
    }

    /// A dimension: mostly small (the interesting values), sometimes negative, a power of two,
    /// near `i64::MAX`, or any 64-bit value.
    pub fn dim(&mut self) -> i64 {
        match self.u8() % 16 {
            0 => i64::from_le_bytes(self.bytes::<8>()),
            1 => -i64::from(self.u8()),
            2 => 1i64.wrapping_shl(u32::from(self.u8() % 64)),
            3 => i64::MAX - i64::from(self.u8()),
            _ => i64::from(self.u8() % 9),
        }
    }
}

/// NumPy's size rule, computed apart from amso's: the bytes of `dims` (0 when one is zero), or
/// `None` when one is negative or the nonzero dimensions' bytes pass `isize::MAX`.
pub fn numpy_bytes<D: Copy + TryInto<u128>>(dims: &[D], itemsize: usize) -> Option<usize> {
    let mut nonzero = itemsize as u128;
    let mut empty = false;
    for &dim in dims {
        let dim: u128 = dim.try_into().ok()?;
        if dim == 0 {
            empty = true;
        } else {
            nonzero = nonzero.checked_mul(dim).filter(|&n| n <= isize::MAX as u128)?;
        }
    }
    Some(if empty { 0 } else { nonzero as usize })
}
