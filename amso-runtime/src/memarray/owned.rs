//! What only the owner of an array's memory may do, as rust-numpy offers it for NumPy arrays:
//! build from nested `Vec`s (`from_vec2`, `from_vec3`), convert to another element type
//! (`cast`), and change the shape with the storage (`resize`). Host data only; each checks
//! what it is given and says what is wrong.

use super::{ArrayOptions, MemArray};
use crate::element::Element;
use crate::error::{Error, Result};

/// The shape of `rows` as a 2-D array: an `Error::InvalidShape` naming the first row whose
/// length differs.
pub(crate) fn rows_shape<T>(rows: &[Vec<T>]) -> Result<[usize; 2]> {
    let columns = rows.first().map_or(0, Vec::len);
    if let Some((index, row)) = rows.iter().enumerate().find(|(_, row)| row.len() != columns) {
        return Err(Error::InvalidShape(format!(
            "from_vec2 needs rows of one length: row 0 has {columns} elements, row {index} has {}",
            row.len()
        )));
    }
    Ok([rows.len(), columns])
}

/// The shape of `planes` as a 3-D array: an `Error::InvalidShape` naming where a plane or a row
/// differs from the first.
pub(crate) fn planes_shape<T>(planes: &[Vec<Vec<T>>]) -> Result<[usize; 3]> {
    let rows = planes.first().map_or(0, Vec::len);
    let columns = planes.first().and_then(|plane| plane.first()).map_or(0, Vec::len);
    for (p, plane) in planes.iter().enumerate() {
        if plane.len() != rows {
            return Err(Error::InvalidShape(format!(
                "from_vec3 needs planes of one shape: plane 0 has {rows} rows, plane {p} has {}",
                plane.len()
            )));
        }
        if let Some((r, row)) = plane.iter().enumerate().find(|(_, row)| row.len() != columns) {
            return Err(Error::InvalidShape(format!(
                "from_vec3 needs rows of one length: row [0][0] has {columns} elements, row [{p}][{r}] has {}",
                row.len()
            )));
        }
    }
    Ok([planes.len(), rows, columns])
}

/// Write `rows`, each `columns` elements long, one after another from `data`: the C-order
/// elements of an array whose shape `rows_shape` or `planes_shape` checked.
///
/// # Safety
/// `data` is valid for writes of every row's elements and reached by nothing else meanwhile;
/// each row has `columns` elements.
pub(crate) unsafe fn write_rows<'a, T: Copy + 'a>(
    data: *mut T,
    rows: impl Iterator<Item = &'a Vec<T>>,
    columns: usize,
) {
    if columns == 0 {
        return; // nothing to write (and an empty array's address need not be one to write at)
    }
    for (index, row) in rows.enumerate() {
        debug_assert_eq!(row.len(), columns);
        // SAFETY: row `index` of the caller's memory, from a row of `columns` elements.
        unsafe { std::ptr::copy_nonoverlapping(row.as_ptr(), data.add(index * columns), columns) };
    }
}

impl<T: Element> MemArray<T, 2> {
    /// A host array of the rows `rows` (every row the same length; ragged rows are an
    /// `Error::InvalidShape` naming the first row that differs).
    pub fn from_vec2(rows: &[Vec<T>]) -> Result<Self> {
        let [count, columns] = rows_shape(rows)?;
        let mut array = Self::new([count, columns])?;
        let data = array.as_mut_ptr()?;
        // SAFETY: a new host array of the rows' checked shape, which nothing else refers to yet.
        unsafe { write_rows(data, rows.iter(), columns) };
        Ok(array)
    }
}

impl<T: Element> MemArray<T, 3> {
    /// A host array of the planes `planes` (each plane's rows all of one length, every plane
    /// the same shape; ragged input is an `Error::InvalidShape` naming where it differs).
    pub fn from_vec3(planes: &[Vec<Vec<T>>]) -> Result<Self> {
        let shape = planes_shape(planes)?;
        let mut array = Self::new(shape)?;
        let data = array.as_mut_ptr()?;
        // SAFETY: as in `from_vec2`, the planes' rows in C order.
        unsafe { write_rows(data, planes.iter().flatten(), shape[2]) };
        Ok(array)
    }
}

impl<T: Element, const N: usize> MemArray<T, N> {
    /// A new host array of `U` with the same shape, each element converted as NumPy's item
    /// assignment converts it (`Element::from_scalar`: floats truncate into integers, a value
    /// out of `U`'s range or a complex into a real type is an error naming the value).
    pub fn cast<U: Element>(&self) -> Result<MemArray<U, N>> {
        let values = self.to_vec()?;
        let converted =
            values.into_iter().map(|value| value.to_scalar().and_then(U::from_scalar)).collect::<Result<Vec<U>>>()?;
        MemArray::from_slice(*self.shape(), &converted)
    }

    /// Give the array the shape `shape`, keeping its elements in C order: the first
    /// `min(old, new)` elements stay, new ones are zero (NumPy's `ndarray.resize`). The
    /// storage is new; copies exported before keep the old memory. Host data of an
    /// unlocked, writable array only.
    pub fn resize(&mut self, shape: [usize; N]) -> Result<()> {
        if self.readonly() {
            return Err(Error::ReadOnly);
        }
        let source = self.as_ptr()?;
        let options =
            ArrayOptions { device_id: self.cuda_device_id(), pinned: self.pinned(), ..ArrayOptions::default() };
        // Zero-filled: past the kept elements, the new ones are zero (`T::default()` for every
        // element type amso has: numbers, bools, records of them).
        let mut resized = Self::with_options(shape, options)?;
        let kept = self.size().min(resized.size());
        // SAFETY: `kept` elements of this host array's memory (`as_ptr` checked it is host
        // data), copied into the new array's distinct memory, which has room for them.
        unsafe { std::ptr::copy_nonoverlapping(source, resized.as_mut_ptr()?, kept) };
        *self = resized;
        Ok(())
    }
}
