//! Classic pcap files (not pcapng), as tcpdump, dumpcap `-P` and Wireshark write them.
//!
//! Written here rather than taken from the `pcap-file` crate because the reader must work on a
//! byte slice without `std` (fuzzing, embedded use) and the format is 24 + 16 bytes of header.
//! The reader takes either byte order and microsecond or nanosecond timestamps; the writer
//! writes little-endian microsecond files.

use core::fmt;

/// Link type of Ethernet frames.
pub const LINKTYPE_ETHERNET: u32 = 1;
/// Link type of raw IPv4/IPv6 packets.
pub const LINKTYPE_RAW: u32 = 101;
/// Length of the file header.
pub const FILE_HEADER_LEN: usize = 24;
/// Length of a record header.
pub const RECORD_HEADER_LEN: usize = 16;
/// Snapshot length the writer announces.
pub const DEFAULT_SNAPLEN: u32 = 262_144;

const MAGIC_MICROS: u32 = 0xA1B2_C3D4;
const MAGIC_NANOS: u32 = 0xA1B2_3C4D;

/// What is wrong with a pcap file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PcapError {
    /// The file does not start with a classic pcap magic number (pcapng is not supported).
    #[error("not a classic pcap file (magic {0:#010x})")]
    NotPcap(u32),
    /// The file ends inside the file header.
    #[error("truncated pcap file header: {0} of 24 bytes")]
    TruncatedHeader(usize),
    /// The file ends inside a record.
    #[error("truncated pcap record at byte {offset}: need {need} bytes, have {have}")]
    TruncatedRecord {
        /// File offset of the record header.
        offset: usize,
        /// Bytes the record needs.
        need: usize,
        /// Bytes left in the file.
        have: usize,
    },
}

/// The file header's contents.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PcapHeader {
    /// Fields are big-endian.
    pub big_endian: bool,
    /// Timestamps have nanosecond resolution.
    pub nanos: bool,
    /// Major version (2).
    pub version_major: u16,
    /// Minor version (4).
    pub version_minor: u16,
    /// Snapshot length.
    pub snaplen: u32,
    /// Link type ([`LINKTYPE_ETHERNET`], ...).
    pub linktype: u32,
}

/// One captured packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PcapRecord<'a> {
    /// Seconds since the epoch.
    pub ts_sec: u32,
    /// Nanoseconds within the second.
    pub ts_nsec: u32,
    /// Length of the packet on the wire.
    pub orig_len: u32,
    /// The captured bytes.
    pub data: &'a [u8],
}

impl PcapRecord<'_> {
    /// Timestamp in nanoseconds since the epoch.
    pub fn timestamp_ns(&self) -> u64 {
        u64::from(self.ts_sec) * 1_000_000_000 + u64::from(self.ts_nsec)
    }
}

/// Reads records from a pcap file held in memory.
#[derive(Debug, Clone)]
pub struct PcapReader<'a> {
    data: &'a [u8],
    pos: usize,
    header: PcapHeader,
    failed: bool,
}

impl<'a> PcapReader<'a> {
    /// Reads the file header.
    pub fn new(data: &'a [u8]) -> Result<Self, PcapError> {
        if data.len() < 4 {
            return Err(PcapError::TruncatedHeader(data.len()));
        }
        let le = u32::from_le_bytes([data[0], data[1], data[2], data[3]]);
        let (big_endian, nanos) = match le {
            MAGIC_MICROS => (false, false),
            MAGIC_NANOS => (false, true),
            m if m.swap_bytes() == MAGIC_MICROS => (true, false),
            m if m.swap_bytes() == MAGIC_NANOS => (true, true),
            m => return Err(PcapError::NotPcap(m.swap_bytes())),
        };
        if data.len() < FILE_HEADER_LEN {
            return Err(PcapError::TruncatedHeader(data.len()));
        }
        let r16 = |at: usize| {
            let b = [data[at], data[at + 1]];
            if big_endian {
                u16::from_be_bytes(b)
            } else {
                u16::from_le_bytes(b)
            }
        };
        let header = PcapHeader {
            big_endian,
            nanos,
            version_major: r16(4),
            version_minor: r16(6),
            snaplen: read_u32(data, 16, big_endian),
            linktype: read_u32(data, 20, big_endian),
        };
        Ok(Self {
            data,
            pos: FILE_HEADER_LEN,
            header,
            failed: false,
        })
    }

    /// The file header.
    pub fn header(&self) -> &PcapHeader {
        &self.header
    }
}

fn read_u32(d: &[u8], at: usize, big_endian: bool) -> u32 {
    let b = [d[at], d[at + 1], d[at + 2], d[at + 3]];
    if big_endian {
        u32::from_be_bytes(b)
    } else {
        u32::from_le_bytes(b)
    }
}

impl<'a> Iterator for PcapReader<'a> {
    type Item = Result<PcapRecord<'a>, PcapError>;

    /// The next record; after an error, `None`.
    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.pos == self.data.len() {
            return None;
        }
        let offset = self.pos;
        let have = self.data.len() - offset;
        let truncated = |need| Some(Err(PcapError::TruncatedRecord { offset, need, have }));
        if have < RECORD_HEADER_LEN {
            self.failed = true;
            return truncated(RECORD_HEADER_LEN);
        }
        let be = self.header.big_endian;
        let ts_sec = read_u32(self.data, offset, be);
        let frac = read_u32(self.data, offset + 4, be);
        let incl = read_u32(self.data, offset + 8, be) as usize;
        let orig_len = read_u32(self.data, offset + 12, be);
        let need = RECORD_HEADER_LEN.saturating_add(incl);
        if have < need {
            self.failed = true;
            return truncated(need);
        }
        self.pos = offset + need;
        Some(Ok(PcapRecord {
            ts_sec,
            ts_nsec: if self.header.nanos {
                frac
            } else {
                frac.saturating_mul(1000)
            },
            orig_len,
            data: &self.data[offset + RECORD_HEADER_LEN..offset + need],
        }))
    }
}

/// The file header the writer emits: little-endian, microseconds, version 2.4.
pub fn file_header(linktype: u32, snaplen: u32) -> [u8; FILE_HEADER_LEN] {
    let mut h = [0u8; FILE_HEADER_LEN];
    h[0..4].copy_from_slice(&MAGIC_MICROS.to_le_bytes());
    h[4..6].copy_from_slice(&2u16.to_le_bytes());
    h[6..8].copy_from_slice(&4u16.to_le_bytes());
    h[16..20].copy_from_slice(&snaplen.to_le_bytes());
    h[20..24].copy_from_slice(&linktype.to_le_bytes());
    h
}

/// A record header for `incl_len` captured bytes of an `orig_len`-byte packet.
pub fn record_header(
    ts_sec: u32,
    ts_usec: u32,
    incl_len: u32,
    orig_len: u32,
) -> [u8; RECORD_HEADER_LEN] {
    let mut h = [0u8; RECORD_HEADER_LEN];
    h[0..4].copy_from_slice(&ts_sec.to_le_bytes());
    h[4..8].copy_from_slice(&ts_usec.to_le_bytes());
    h[8..12].copy_from_slice(&incl_len.to_le_bytes());
    h[12..16].copy_from_slice(&orig_len.to_le_bytes());
    h
}

/// Writes a classic pcap stream.
#[cfg(feature = "std")]
#[derive(Debug)]
pub struct PcapWriter<W: std::io::Write> {
    out: W,
    snaplen: u32,
}

#[cfg(feature = "std")]
impl<W: std::io::Write> PcapWriter<W> {
    /// Writes the file header.
    pub fn new(mut out: W, linktype: u32) -> std::io::Result<Self> {
        out.write_all(&file_header(linktype, DEFAULT_SNAPLEN))?;
        Ok(Self {
            out,
            snaplen: DEFAULT_SNAPLEN,
        })
    }

    /// Writes one packet captured at `ts` since the epoch, cut to the snapshot length.
    pub fn write_packet(&mut self, ts: std::time::Duration, data: &[u8]) -> std::io::Result<()> {
        let orig = u32::try_from(data.len()).unwrap_or(u32::MAX);
        let incl = orig.min(self.snaplen);
        let secs = u32::try_from(ts.as_secs()).unwrap_or(u32::MAX);
        self.out
            .write_all(&record_header(secs, ts.subsec_micros(), incl, orig))?;
        self.out.write_all(&data[..incl as usize])
    }

    /// Flushes what was written so far to the underlying writer.
    pub fn flush_inner(&mut self) -> std::io::Result<()> {
        self.out.flush()
    }

    /// Flushes and gives the writer back.
    pub fn into_inner(mut self) -> std::io::Result<W> {
        self.out.flush()?;
        Ok(self.out)
    }
}

impl fmt::Display for PcapHeader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "pcap {}.{}, link type {}, snaplen {}",
            self.version_major, self.version_minor, self.linktype, self.snaplen
        )
    }
}

#[cfg(all(test, feature = "std"))]
mod tests {
    use super::*;

    #[test]
    fn writer_output_reads_back() {
        let mut w = PcapWriter::new(Vec::new(), LINKTYPE_ETHERNET).unwrap();
        w.write_packet(std::time::Duration::new(5, 250_000), b"abc")
            .unwrap();
        w.write_packet(std::time::Duration::new(6, 0), b"").unwrap();
        let bytes = w.into_inner().unwrap();
        let r = PcapReader::new(&bytes).unwrap();
        assert_eq!(r.header().linktype, LINKTYPE_ETHERNET);
        assert_eq!((r.header().version_major, r.header().version_minor), (2, 4));
        let recs: Vec<_> = r.map(Result::unwrap).collect();
        assert_eq!(recs.len(), 2);
        assert_eq!(recs[0].data, b"abc");
        assert_eq!(recs[0].timestamp_ns(), 5_000_250_000);
        assert_eq!(recs[1].orig_len, 0);
    }

    #[test]
    fn damaged_files_are_errors() {
        assert_eq!(
            PcapReader::new(b"\x0a\x0d\x0d\x0a").unwrap_err(),
            PcapError::NotPcap(0x0a0d0d0a)
        );
        assert_eq!(
            PcapReader::new(&[0xd4, 0xc3]).unwrap_err(),
            PcapError::TruncatedHeader(2)
        );
        let mut bytes = file_header(LINKTYPE_ETHERNET, 100).to_vec();
        bytes.extend_from_slice(&record_header(0, 0, 10, 10));
        bytes.extend_from_slice(b"short");
        let mut r = PcapReader::new(&bytes).unwrap();
        assert!(matches!(
            r.next(),
            Some(Err(PcapError::TruncatedRecord {
                need: 26,
                have: 21,
                ..
            }))
        ));
        assert!(r.next().is_none());
    }

    #[test]
    fn big_endian_nanosecond_files_read() {
        let mut bytes = vec![0xa1, 0xb2, 0x3c, 0x4d, 0, 2, 0, 4];
        bytes.extend_from_slice(&[0; 8]);
        bytes.extend_from_slice(&65535u32.to_be_bytes());
        bytes.extend_from_slice(&1u32.to_be_bytes());
        bytes.extend_from_slice(&7u32.to_be_bytes());
        bytes.extend_from_slice(&9u32.to_be_bytes());
        bytes.extend_from_slice(&1u32.to_be_bytes());
        bytes.extend_from_slice(&1u32.to_be_bytes());
        bytes.push(0xEE);
        let mut r = PcapReader::new(&bytes).unwrap();
        assert!(r.header().big_endian && r.header().nanos);
        let rec = r.next().unwrap().unwrap();
        assert_eq!((rec.ts_sec, rec.ts_nsec, rec.data), (7, 9, &[0xEE][..]));
    }
}
