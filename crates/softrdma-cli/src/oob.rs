//! What the out-of-band exchanges of rdma-core's and perftest's tools have in common, as
//! the tools make them before they connect: the server's TCP listener (IPv6 and IPv4,
//! any address), and the text records (`ibv_*_pingpong`'s `LID:QPN:PSN:GID`, perftest's
//! key message: NUL-padded text of hex fields separated by colons). The layouts
//! themselves are their users' (`pingpong`, `perf::oob`).

use crate::error::CliError;
use std::net::{Ipv6Addr, SocketAddr, TcpListener};

/// The server's listener on TCP `port`: every address, IPv6 with IPv4 mapped where the
/// host allows it, else IPv4 alone.
pub(crate) fn listen(port: u16) -> Result<TcpListener, CliError> {
    TcpListener::bind(SocketAddr::new(Ipv6Addr::UNSPECIFIED.into(), port))
        .or_else(|_| TcpListener::bind(("0.0.0.0", port)))
        .map_err(|source| CliError::Io {
            what: format!("Couldn't listen to port {port}"),
            source,
        })
}

/// The text of record `m` (`what` names it in errors), its NUL padding dropped, and its
/// colon-separated fields.
pub(crate) fn fields<'a>(m: &'a [u8], what: &str) -> Result<(&'a str, Vec<&'a str>), CliError> {
    let text = std::str::from_utf8(m)
        .map_err(|_| CliError::Peer(format!("{what} is not text")))?
        .trim_end_matches('\0');
    Ok((text, text.split(':').collect()))
}

/// A hex field.
pub(crate) fn hex(x: &str) -> Result<u64, CliError> {
    u64::from_str_radix(x, 16).map_err(not_hex(x))
}

/// A hex field of at most 32 bits (a longer one is an error, not a truncation).
pub(crate) fn hex32(x: &str) -> Result<u32, CliError> {
    u32::from_str_radix(x, 16).map_err(not_hex(x))
}

/// The error of field `x`, which is not hex (or too long).
fn not_hex(x: &str) -> impl FnOnce(std::num::ParseIntError) -> CliError + '_ {
    move |source| CliError::ParseInt {
        text: x.into(),
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_and_hex() {
        let (t, f) = fields(b"0001:00abcd:\0\0", "rec").unwrap();
        assert_eq!((t, f), ("0001:00abcd:", vec!["0001", "00abcd", ""]));
        assert_eq!(hex("00abcd").unwrap(), 0xabcd);
        assert!(hex("xyz").is_err());
        assert!(hex32("123456789").is_err(), "no truncation");
        assert!(fields(&[0xff, 0xfe], "rec").is_err());
    }
}
