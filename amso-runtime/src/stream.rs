//! A CUDA stream as amso's API takes and reports it (a leaf: the errors name streams, and every
//! floor above passes them).

/// A CUDA stream, as amso's API takes and reports it: the legacy default stream, the
/// per-thread default stream, or a stream by its handle (`CUstream`). The values are the array
/// API standard's (`__dlpack__(stream=...)`): 1 the legacy default stream, 2 the per-thread
/// default stream, a larger value a handle.
///
/// The driver dereferences a handle, so a `Stream` made from one is a promise that the stream
/// is alive while amso uses it: making one is `unsafe`. The default streams are always safe,
/// and the streams amso reports (`stream()` of an array or a typed argument) are live streams
/// of their data's producer while that data lives.
///
/// An `i64` in memory (`repr(transparent)`), so the tables amso's copies in one process share
/// pass it as it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(transparent)]
pub struct Stream(i64);

impl Stream {
    /// The legacy default stream (`CU_STREAM_LEGACY`).
    pub const LEGACY: Stream = Stream(1);
    /// The per-thread default stream (`CU_STREAM_PER_THREAD`).
    pub const PER_THREAD: Stream = Stream(2);

    /// The stream with this handle (a `CUstream` as an address, `CudaStream::cu_stream()`);
    /// 0, the null stream, is the legacy default stream.
    ///
    /// # Safety
    /// `handle` is 0 or a stream that stays alive as long as amso is given this `Stream`
    /// (amso's calls queue work on it and query it through the driver).
    pub unsafe fn from_handle(handle: usize) -> Stream {
        match handle {
            0 => Stream::LEGACY,
            handle => Stream(handle as i64),
        }
    }

    /// The stream a protocol value names (`__dlpack__`'s `stream`, `__cuda_array_interface__`'s):
    /// 0 and 1 the legacy default stream, 2 the per-thread default stream, else a handle.
    /// Negative values name no stream and are refused where a stream is used.
    ///
    /// # Safety
    /// A handle (a value above 2) is a stream that stays alive as long as amso is given this
    /// `Stream`, as for [`from_handle`](Self::from_handle).
    pub unsafe fn from_protocol(value: i64) -> Stream {
        Stream::reported(value)
    }

    /// A stream amso or a producer reported for live data (an array's, a typed argument's).
    pub(crate) fn reported(value: i64) -> Stream {
        match value {
            0 => Stream::LEGACY,
            value => Stream(value),
        }
    }

    /// The protocol value: 1, 2 or the handle.
    pub fn protocol_value(self) -> i64 {
        self.0
    }
}

/// The handle in hex, as the driver's errors print streams.
impl std::fmt::LowerHex for Stream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::LowerHex::fmt(&self.0, f)
    }
}

impl Default for Stream {
    /// The legacy default stream.
    fn default() -> Stream {
        Stream::LEGACY
    }
}

#[cfg(test)]
mod tests {
    use super::Stream;

    #[test]
    fn streams_follow_the_protocol_values() {
        assert_eq!(Stream::default(), Stream::LEGACY);
        assert_eq!((Stream::LEGACY.protocol_value(), Stream::PER_THREAD.protocol_value()), (1, 2));
        // 0 is the null stream, which is the legacy default stream, by handle and by protocol.
        // SAFETY: these values are compared, never given to amso.
        unsafe {
            assert_eq!(Stream::from_handle(0), Stream::LEGACY);
            assert_eq!(Stream::from_protocol(0), Stream::LEGACY);
            assert_eq!(Stream::from_protocol(2), Stream::PER_THREAD);
            assert_eq!(Stream::from_handle(0x7f00_1000).protocol_value(), 0x7f00_1000);
            assert_eq!(Stream::from_protocol(-1).protocol_value(), -1, "kept, and refused where it is used");
        }
    }
}
