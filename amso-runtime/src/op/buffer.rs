//! The arrays an op's function takes: dense C-order elements at an address on one device, read
//! ([`Buffer`]) or written ([`BufferMut`]), the same whether the eager entry, XLA or torch called.

use std::marker::PhantomData;

use crate::device::{Device, DeviceType};
use crate::element::Element;
use crate::error::{Error, Result};
use crate::shape;

/// An array an op reads: `N` dimensions of `T` in C order, on the host or a CUDA device.
#[derive(Debug, Clone, Copy)]
pub struct Buffer<'a, T, const N: usize> {
    data: usize,
    shape: [usize; N],
    device: Device,
    _borrow: PhantomData<&'a [T]>,
}

/// An array an op writes: as [`Buffer`], exclusively.
#[derive(Debug)]
pub struct BufferMut<'a, T, const N: usize> {
    data: usize,
    shape: [usize; N],
    device: Device,
    _borrow: PhantomData<&'a mut [T]>,
}

macro_rules! common {
    ($type:ident) => {
        impl<'a, T: Element, const N: usize> $type<'a, T, N> {
            /// # Safety
            /// `data` holds `shape`'s elements of `T` in C order on `device`, aligned and
            /// initialised (XLA's and torch's outputs: any bits, which every `Element` accepts),
            /// valid for `'a` and, for a [`BufferMut`], used by nothing else meanwhile.
            pub(crate) unsafe fn new(data: usize, shape: [usize; N], device: Device) -> Self {
                $type { data, shape, device, _borrow: PhantomData }
            }

            /// The shape.
            pub fn shape(&self) -> [usize; N] {
                self.shape
            }

            /// The number of elements.
            pub fn len(&self) -> usize {
                shape::element_count(&self.shape)
            }

            /// Whether there are no elements.
            pub fn is_empty(&self) -> bool {
                self.len() == 0
            }

            /// Where the elements are.
            pub fn device(&self) -> Device {
                self.device
            }

            /// Whether they are on a CUDA device.
            pub fn is_cuda(&self) -> bool {
                self.device.device_type == DeviceType::Cuda
            }

            /// The address of the first element (host or device).
            pub fn data_address(&self) -> usize {
                self.data
            }

            /// The elements, for host buffers.
            pub fn as_slice(&self) -> Result<&[T]> {
                self.host("as_slice()")?;
                if self.is_empty() {
                    return Ok(&[]); // XLA may give an empty buffer a NULL address
                }
                // SAFETY: `len` aligned, initialised host elements, valid for `'a` (`new`).
                Ok(unsafe { std::slice::from_raw_parts(self.data as *const T, self.len()) })
            }

            /// An ndarray view of host buffers.
            #[cfg(feature = "ndarray")]
            pub fn as_array(&self) -> Result<ndarray::ArrayView<'_, T, ndarray::Dim<[usize; N]>>>
            where
                ndarray::Dim<[usize; N]>: ndarray::Dimension,
            {
                let elements = self.as_slice()?;
                Ok(ndarray::ArrayView::from_shape(dim(self.shape), elements).expect("C-order elements of the shape"))
            }

            /// What a CUDA kernel takes for the buffer (`amso::Indexer<T, N>` of amso.cuh):
            /// launch it on the op's stream.
            #[cfg(feature = "cuda")]
            pub fn device_indexer(&self) -> Result<crate::indexer::DeviceIndexer<'_, T, N>> {
                if !self.is_cuda() {
                    return Err(Error::InvalidArgument(format!(
                        "device_indexer() needs a CUDA buffer; this one is on {:?}: use as_slice() or as_array() on the host",
                        self.device
                    )));
                }
                Ok(crate::indexer::DeviceIndexer::new(self.data as u64, self.shape))
            }

            fn host(&self, what: &str) -> Result<()> {
                if self.is_cuda() {
                    return Err(Error::InvalidArgument(format!(
                        "{what} reads host buffers; this one is on CUDA device {}: use device_indexer() and a kernel \
                         launched on the op's stream",
                        self.device.id
                    )));
                }
                Ok(())
            }
        }
    };
}

common!(Buffer);
common!(BufferMut);

impl<T: Element, const N: usize> BufferMut<'_, T, N> {
    /// The elements, writable, for host buffers.
    pub fn as_slice_mut(&mut self) -> Result<&mut [T]> {
        self.host("as_slice_mut()")?;
        if self.is_empty() {
            return Ok(&mut []);
        }
        // SAFETY: as `as_slice`, and exclusive (`new`).
        Ok(unsafe { std::slice::from_raw_parts_mut(self.data as *mut T, self.len()) })
    }

    /// A writable ndarray view of host buffers.
    #[cfg(feature = "ndarray")]
    pub fn as_array_mut(&mut self) -> Result<ndarray::ArrayViewMut<'_, T, ndarray::Dim<[usize; N]>>>
    where
        ndarray::Dim<[usize; N]>: ndarray::Dimension,
    {
        let shape = self.shape;
        let elements = self.as_slice_mut()?;
        Ok(ndarray::ArrayViewMut::from_shape(dim(shape), elements).expect("C-order elements of the shape"))
    }

    /// What a CUDA kernel takes to write the buffer.
    #[cfg(feature = "cuda")]
    pub fn device_indexer_mut(&mut self) -> Result<crate::indexer::DeviceIndexer<'_, T, N>> {
        self.device_indexer()
    }
}

#[cfg(feature = "ndarray")]
fn dim<const N: usize>(shape: [usize; N]) -> ndarray::Dim<[usize; N]>
where
    ndarray::Dim<[usize; N]>: ndarray::Dimension,
{
    use ndarray::Dimension;
    let mut dim = ndarray::Dim::<[usize; N]>::zeros(N);
    dim.slice_mut().copy_from_slice(&shape);
    dim
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_buffers_read_and_write_in_c_order() {
        let input = [1.0f64, 2.0, 3.0, 4.0, 5.0, 6.0];
        let mut output = [0.0f64; 6];
        // SAFETY: both arrays outlive the buffers; the output is used by nothing else.
        let (x, mut y) = unsafe {
            (
                Buffer::<f64, 2>::new(input.as_ptr() as usize, [2, 3], Device::CPU),
                BufferMut::<f64, 2>::new(output.as_mut_ptr() as usize, [2, 3], Device::CPU),
            )
        };
        for (out, value) in y.as_slice_mut().unwrap().iter_mut().zip(x.as_slice().unwrap()) {
            *out = 2.0 * value;
        }
        assert_eq!(output, [2.0, 4.0, 6.0, 8.0, 10.0, 12.0]);
        assert_eq!(x.shape(), [2, 3]);
        assert_eq!(x.len(), 6);
    }

    #[test]
    fn device_buffers_refuse_host_views() {
        // SAFETY: never dereferenced (a device buffer's host views are refused).
        let x = unsafe { Buffer::<f32, 1>::new(0x1000, [4], Device::cuda(crate::DeviceId::ZERO)) };
        let error = x.as_slice().unwrap_err().to_string();
        assert!(error.contains("as_slice() reads host buffers") && error.contains("device_indexer()"), "{error}");
    }
}
