//! The view boilerplate shared by every fixed-size header, and big-endian field access.
//!
//! A hand-written helper rather than `zerocopy`: the views must accept any `T: AsRef<[u8]>`
//! (owned, borrowed, mutable) at any alignment, with 24-bit fields and bit fields that zerocopy's
//! types do not express, and the whole crate must stay `forbid(unsafe_code)`.

/// Declares a checked view `$name<T>` over a header of `$len` bytes.
macro_rules! header_view {
    ($(#[$meta:meta])* $name:ident, $len:expr, $layer:expr) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub struct $name<T: AsRef<[u8]>> {
            buffer: T,
        }

        impl<T: AsRef<[u8]>> $name<T> {
            /// Length of this header in bytes.
            pub const LEN: usize = $len;

            /// Wraps `buffer` without checking it. Getters panic if it is shorter than
            /// [`Self::LEN`]; use [`Self::new_checked`] on untrusted input.
            pub const fn new_unchecked(buffer: T) -> Self {
                Self { buffer }
            }

            /// Wraps `buffer` after checking that it holds the whole header.
            pub fn new_checked(buffer: T) -> $crate::Result<Self> {
                let view = Self::new_unchecked(buffer);
                view.check_len()?;
                Ok(view)
            }

            /// Checks that the buffer holds the whole header.
            pub fn check_len(&self) -> $crate::Result<()> {
                $crate::Error::check_len($layer, $len, self.buffer.as_ref().len())
            }

            /// Gives the buffer back.
            pub fn into_inner(self) -> T {
                self.buffer
            }

            /// The header's bytes (the first [`Self::LEN`] bytes of the buffer).
            pub fn as_bytes(&self) -> &[u8] {
                &self.buffer.as_ref()[..$len]
            }
        }
    };
}

/// Declares a view's getters, and setters where named, of big-endian integer fields, each
/// at the start of its byte range: one line a field instead of a function each way.
macro_rules! be_accessors {
    ($view:ident { $($(#[$doc:meta])* $get:ident $(/ $set:ident)?: $ty:ty = $range:expr;)* }) => {
        impl<T: AsRef<[u8]>> $view<T> {
            $(
                $(#[$doc])*
                #[inline]
                pub fn $get(&self) -> $ty {
                    <$ty as $crate::macros::be::Int>::read(self.buffer.as_ref(), $range.start)
                }
            )*
        }

        impl<T: AsRef<[u8]> + AsMut<[u8]>> $view<T> {
            $($(
                #[doc = concat!("Sets [`", stringify!($get), "`](Self::", stringify!($get), ").")]
                #[inline]
                pub fn $set(&mut self, v: $ty) {
                    <$ty as $crate::macros::be::Int>::write(self.buffer.as_mut(), $range.start, v)
                }
            )?)*
        }
    };
}

pub(crate) mod be {
    //! Big-endian reads and writes at a byte offset. Callers have checked the length.

    #[inline]
    pub fn u16(b: &[u8], at: usize) -> u16 {
        u16::from_be_bytes([b[at], b[at + 1]])
    }
    #[inline]
    pub fn u24(b: &[u8], at: usize) -> u32 {
        u32::from_be_bytes([0, b[at], b[at + 1], b[at + 2]])
    }
    #[inline]
    pub fn u32(b: &[u8], at: usize) -> u32 {
        u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
    }
    #[inline]
    pub fn u64(b: &[u8], at: usize) -> u64 {
        let mut a = [0u8; 8];
        a.copy_from_slice(&b[at..at + 8]);
        u64::from_be_bytes(a)
    }
    #[inline]
    pub fn set_u16(b: &mut [u8], at: usize, v: u16) {
        b[at..at + 2].copy_from_slice(&v.to_be_bytes());
    }
    #[inline]
    pub fn set_u24(b: &mut [u8], at: usize, v: u32) {
        b[at..at + 3].copy_from_slice(&v.to_be_bytes()[1..]);
    }
    #[inline]
    pub fn set_u32(b: &mut [u8], at: usize, v: u32) {
        b[at..at + 4].copy_from_slice(&v.to_be_bytes());
    }
    #[inline]
    pub fn set_u64(b: &mut [u8], at: usize, v: u64) {
        b[at..at + 8].copy_from_slice(&v.to_be_bytes());
    }

    /// The integer widths a field can have, for code generic over them ([`be_accessors!`]).
    pub trait Int: Sized {
        /// Reads the integer at `at`.
        fn read(b: &[u8], at: usize) -> Self;
        /// Writes the integer at `at`.
        fn write(b: &mut [u8], at: usize, v: Self);
    }

    macro_rules! int {
        ($($t:ty = $get:ident / $set:ident;)*) => {$(
            impl Int for $t {
                #[inline]
                fn read(b: &[u8], at: usize) -> Self {
                    $get(b, at)
                }
                #[inline]
                fn write(b: &mut [u8], at: usize, v: Self) {
                    $set(b, at, v)
                }
            }
        )*};
    }

    int! {
        u16 = u16 / set_u16;
        u32 = u32 / set_u32;
        u64 = u64 / set_u64;
    }
}
