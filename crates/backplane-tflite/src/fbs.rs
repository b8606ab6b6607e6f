//! A safe, bounds-checked FlatBuffers reader: tables, vtables, scalars, vectors, strings and
//! unions, read in place from the model's bytes.
//!
//! Every offset is checked before it is followed and every read is checked against the
//! buffer's end, so a truncated or corrupt file is an error (with the position at fault),
//! never a panic or an out-of-bounds read. This plays the part of FlatBuffers' verifier,
//! lazily: only what the importer reads is checked. (Why not generated code: see
//! docs/tflite.md.)

use crate::error::{Result, TfliteError};

fn err(what: impl Into<String>) -> TfliteError {
    TfliteError::Decode(what.into())
}

/// The whole flatbuffer.
#[derive(Clone, Copy)]
pub(crate) struct Buf<'a>(pub &'a [u8]);

impl<'a> Buf<'a> {
    fn bytes<const N: usize>(self, pos: usize) -> Result<[u8; N]> {
        pos.checked_add(N)
            .and_then(|end| self.0.get(pos..end))
            .and_then(|s| s.try_into().ok())
            .ok_or_else(|| {
                err(format!(
                    "read of {N} bytes at {pos} past the end ({})",
                    self.0.len()
                ))
            })
    }

    fn u32(self, pos: usize) -> Result<u32> {
        Ok(u32::from_le_bytes(self.bytes::<4>(pos)?))
    }

    fn u16(self, pos: usize) -> Result<u16> {
        Ok(u16::from_le_bytes(self.bytes::<2>(pos)?))
    }

    /// The position an unsigned offset stored at `pos` points to.
    fn follow(self, pos: usize) -> Result<usize> {
        let off = self.u32(pos)? as usize;
        let target = pos
            .checked_add(off)
            .filter(|&t| t < self.0.len())
            .ok_or_else(|| err(format!("offset {off} at {pos} points past the end")))?;
        Ok(target)
    }

    /// The root table.
    pub fn root(self) -> Result<Table<'a>> {
        let pos = self.follow(0)?;
        Table::at(self, pos)
    }
}

/// A table: its position and its vtable.
#[derive(Clone, Copy)]
pub(crate) struct Table<'a> {
    buf: Buf<'a>,
    pos: usize,
    vtable: usize,
    vtable_len: usize,
}

impl<'a> Table<'a> {
    fn at(buf: Buf<'a>, pos: usize) -> Result<Self> {
        let soff = i32::from_le_bytes(buf.bytes::<4>(pos)?) as i64;
        let vtable = (pos as i64)
            .checked_sub(soff)
            .filter(|&v| v >= 0 && (v as usize) < buf.0.len())
            .ok_or_else(|| err(format!("table at {pos} has its vtable out of bounds")))?
            as usize;
        let vtable_len = buf.u16(vtable)? as usize;
        if vtable_len < 4
            || !vtable_len.is_multiple_of(2)
            || vtable.saturating_add(vtable_len) > buf.0.len()
        {
            return Err(err(format!("table at {pos} has a bad vtable")));
        }
        Ok(Table {
            buf,
            pos,
            vtable,
            vtable_len,
        })
    }

    /// The position of field `slot`, or None when absent.
    fn field(&self, slot: usize) -> Result<Option<usize>> {
        let entry = 4 + 2 * slot;
        if entry + 2 > self.vtable_len {
            return Ok(None);
        }
        let off = self.buf.u16(self.vtable + entry)? as usize;
        Ok((off != 0).then_some(self.pos + off))
    }

    fn scalar<const N: usize>(&self, slot: usize) -> Result<Option<[u8; N]>> {
        match self.field(slot)? {
            Some(p) => Ok(Some(self.buf.bytes::<N>(p)?)),
            None => Ok(None),
        }
    }

    /// An i32 field.
    pub fn i32(&self, slot: usize, default: i32) -> Result<i32> {
        Ok(self.scalar::<4>(slot)?.map_or(default, i32::from_le_bytes))
    }

    /// A u32 field.
    pub fn u32(&self, slot: usize, default: u32) -> Result<u32> {
        Ok(self.scalar::<4>(slot)?.map_or(default, u32::from_le_bytes))
    }

    /// An i8 field (byte enums).
    pub fn i8(&self, slot: usize, default: i8) -> Result<i8> {
        Ok(self.scalar::<1>(slot)?.map_or(default, |b| b[0] as i8))
    }

    /// A u8 field (union types).
    pub fn u8(&self, slot: usize, default: u8) -> Result<u8> {
        Ok(self.scalar::<1>(slot)?.map_or(default, |b| b[0]))
    }

    /// A bool field.
    pub fn bool(&self, slot: usize, default: bool) -> Result<bool> {
        Ok(self.scalar::<1>(slot)?.map_or(default, |b| b[0] != 0))
    }

    /// An f32 field.
    pub fn f32(&self, slot: usize, default: f32) -> Result<f32> {
        Ok(self.scalar::<4>(slot)?.map_or(default, f32::from_le_bytes))
    }

    /// A u64 field.
    pub fn u64(&self, slot: usize, default: u64) -> Result<u64> {
        Ok(self.scalar::<8>(slot)?.map_or(default, u64::from_le_bytes))
    }

    /// A sub-table field.
    pub fn table(&self, slot: usize) -> Result<Option<Table<'a>>> {
        match self.field(slot)? {
            Some(p) => Ok(Some(Table::at(self.buf, self.buf.follow(p)?)?)),
            None => Ok(None),
        }
    }

    /// A vector field of elements of `elem` bytes: (its first byte, its length).
    fn vector(&self, slot: usize, elem: usize) -> Result<Option<Vector<'a>>> {
        let Some(p) = self.field(slot)? else {
            return Ok(None);
        };
        let start = self.buf.follow(p)?;
        let len = self.buf.u32(start)? as usize;
        let data = start + 4;
        let end = len
            .checked_mul(elem)
            .and_then(|n| data.checked_add(n))
            .filter(|&e| e <= self.buf.0.len())
            .ok_or_else(|| err(format!("vector of {len} at {start} runs past the end")))?;
        Ok(Some(Vector {
            buf: self.buf,
            data,
            len,
            bytes: &self.buf.0[data..end],
        }))
    }

    /// A `[ubyte]` field, in place.
    pub fn bytes(&self, slot: usize) -> Result<Option<&'a [u8]>> {
        Ok(self.vector(slot, 1)?.map(|v| v.bytes))
    }

    /// A string field (UTF-8 checked).
    pub fn string(&self, slot: usize) -> Result<Option<&'a str>> {
        match self.bytes(slot)? {
            Some(b) => std::str::from_utf8(b)
                .map(Some)
                .map_err(|_| err("a string is not UTF-8")),
            None => Ok(None),
        }
    }

    /// An `[int]` field.
    pub fn i32s(&self, slot: usize) -> Result<Vec<i32>> {
        Ok(self.vector(slot, 4)?.map_or_else(Vec::new, |v| {
            v.bytes
                .chunks_exact(4)
                .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect()
        }))
    }

    /// A `[ushort]` field.
    pub fn u16s(&self, slot: usize) -> Result<Vec<u16>> {
        Ok(self.vector(slot, 2)?.map_or_else(Vec::new, |v| {
            v.bytes
                .chunks_exact(2)
                .map(|c| u16::from_le_bytes([c[0], c[1]]))
                .collect()
        }))
    }

    /// A `[float]` field.
    pub fn f32s(&self, slot: usize) -> Result<Vec<f32>> {
        Ok(self.vector(slot, 4)?.map_or_else(Vec::new, |v| {
            v.bytes
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect()
        }))
    }

    /// A `[long]` field.
    pub fn i64s(&self, slot: usize) -> Result<Vec<i64>> {
        Ok(self.vector(slot, 8)?.map_or_else(Vec::new, |v| {
            v.bytes
                .chunks_exact(8)
                .map(|c| i64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]))
                .collect()
        }))
    }

    /// A vector-of-tables field.
    pub fn tables(&self, slot: usize) -> Result<Vec<Table<'a>>> {
        let Some(v) = self.vector(slot, 4)? else {
            return Ok(Vec::new());
        };
        (0..v.len)
            .map(|i| Table::at(v.buf, v.buf.follow(v.data + 4 * i)?))
            .collect()
    }
}

struct Vector<'a> {
    buf: Buf<'a>,
    data: usize,
    len: usize,
    bytes: &'a [u8],
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncated_and_bad_offsets_are_errors() {
        assert!(Buf(&[]).root().is_err());
        assert!(Buf(&[8, 0, 0]).root().is_err());
        // Root offset past the end.
        assert!(Buf(&[200, 0, 0, 0, 0, 0, 0, 0]).root().is_err());
        // A table whose vtable offset points before the buffer.
        assert!(Buf(&[4, 0, 0, 0, 100, 0, 0, 0]).root().is_err());
    }

    #[test]
    fn reads_a_hand_built_table() {
        // vtable at 4: len 8, table len 8, field0 at +4; table at 12: soffset 8, i32 7.
        let mut b = vec![12u8, 0, 0, 0];
        b.extend_from_slice(&[8, 0, 8, 0, 4, 0, 0, 0]);
        b.extend_from_slice(&8i32.to_le_bytes());
        b.extend_from_slice(&7i32.to_le_bytes());
        let t = Buf(&b).root().unwrap();
        assert_eq!(t.i32(0, -1).unwrap(), 7);
        assert_eq!(t.i32(1, -1).unwrap(), -1);
        assert!(t.table(1).unwrap().is_none());
    }
}
