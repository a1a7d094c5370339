//! RESP2, both ways: replies as a node sends them, and commands as clients send them. The same
//! codec reads a real redis-server's replies in the conformance test, so that both nodes' answers
//! are compared as values, not as rendered text.

use std::fmt;

/// One RESP2 reply.
#[derive(Clone, PartialEq, Eq)]
pub enum Reply {
    Status(String),
    Error(String),
    Int(i64),
    Bulk(Vec<u8>),
    Nil,
    Array(Vec<Reply>),
}

impl Reply {
    pub(crate) fn ok() -> Reply {
        Reply::Status("OK".into())
    }

    pub(crate) fn bulk(s: impl AsRef<[u8]>) -> Reply {
        Reply::Bulk(s.as_ref().to_vec())
    }

    pub(crate) fn err(s: impl Into<String>) -> Reply {
        Reply::Error(s.into())
    }

    /// Appends the wire form of the reply to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Reply::Status(s) => {
                out.push(b'+');
                out.extend_from_slice(s.as_bytes());
                out.extend_from_slice(b"\r\n");
            }
            Reply::Error(s) => {
                out.push(b'-');
                out.extend_from_slice(s.as_bytes());
                out.extend_from_slice(b"\r\n");
            }
            Reply::Int(i) => out.extend_from_slice(format!(":{i}\r\n").as_bytes()),
            Reply::Bulk(b) => {
                out.extend_from_slice(format!("${}\r\n", b.len()).as_bytes());
                out.extend_from_slice(b);
                out.extend_from_slice(b"\r\n");
            }
            Reply::Nil => out.extend_from_slice(b"$-1\r\n"),
            Reply::Array(items) => {
                out.extend_from_slice(format!("*{}\r\n", items.len()).as_bytes());
                for item in items {
                    item.encode(out);
                }
            }
        }
    }
}

impl fmt::Debug for Reply {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reply::Status(s) => write!(f, "+{s}"),
            Reply::Error(s) => write!(f, "-{s}"),
            Reply::Int(i) => write!(f, ":{i}"),
            Reply::Bulk(b) => write!(f, "{:?}", String::from_utf8_lossy(b)),
            Reply::Nil => write!(f, "nil"),
            Reply::Array(items) => f.debug_list().entries(items).finish(),
        }
    }
}

/// Encodes a command as a RESP array of bulk strings.
pub fn encode_command<A: AsRef<[u8]>>(args: &[A]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        let a = a.as_ref();
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// Why a buffer does not hold a complete frame.
#[derive(Debug, PartialEq, Eq)]
pub enum Incomplete {
    /// More bytes are needed.
    More,
    /// The bytes are not RESP.
    Bad(String),
}

fn line(buf: &[u8], at: usize) -> Result<(&[u8], usize), Incomplete> {
    let rest = &buf[at..];
    match rest.windows(2).position(|w| w == b"\r\n") {
        Some(i) => Ok((&rest[..i], at + i + 2)),
        None => Err(Incomplete::More),
    }
}

fn number(l: &[u8]) -> Result<i64, Incomplete> {
    std::str::from_utf8(l)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| Incomplete::Bad(format!("not a number: {:?}", String::from_utf8_lossy(l))))
}

/// Decodes one reply from the start of `buf`: the reply and the bytes it took.
pub fn decode_reply(buf: &[u8]) -> Result<(Reply, usize), Incomplete> {
    decode_at(buf, 0, 0)
}

fn decode_at(buf: &[u8], at: usize, depth: usize) -> Result<(Reply, usize), Incomplete> {
    if depth > 64 {
        return Err(Incomplete::Bad("nested too deep".into()));
    }
    if at >= buf.len() {
        return Err(Incomplete::More);
    }
    let (l, next) = line(buf, at + 1)?;
    let text = || String::from_utf8_lossy(l).into_owned();
    match buf[at] {
        b'+' => Ok((Reply::Status(text()), next)),
        b'-' => Ok((Reply::Error(text()), next)),
        b':' => Ok((Reply::Int(number(l)?), next)),
        b'$' => {
            let n = number(l)?;
            if n < 0 {
                return Ok((Reply::Nil, next));
            }
            let end = next + n as usize;
            if buf.len() < end + 2 {
                return Err(Incomplete::More);
            }
            Ok((Reply::Bulk(buf[next..end].to_vec()), end + 2))
        }
        b'*' => {
            let n = number(l)?;
            if n < 0 {
                return Ok((Reply::Nil, next));
            }
            let mut items = Vec::with_capacity(n as usize);
            let mut at = next;
            for _ in 0..n {
                let (item, after) = decode_at(buf, at, depth + 1)?;
                items.push(item);
                at = after;
            }
            Ok((Reply::Array(items), at))
        }
        c => Err(Incomplete::Bad(format!("unexpected type byte {c:?}"))),
    }
}

/// Decodes one command (an array of bulk strings) from the start of `buf`.
pub fn decode_command(buf: &[u8]) -> Result<(Vec<Vec<u8>>, usize), Incomplete> {
    match decode_reply(buf)? {
        (Reply::Array(items), n) => items
            .into_iter()
            .map(|i| match i {
                Reply::Bulk(b) => Ok(b),
                other => Err(Incomplete::Bad(format!(
                    "a command argument is not a bulk string: {other:?}"
                ))),
            })
            .collect::<Result<Vec<_>, _>>()
            .map(|args| (args, n)),
        (other, _) => Err(Incomplete::Bad(format!(
            "a command is not an array: {other:?}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_round_trip_and_partial_frames_ask_for_more() {
        let r = Reply::Array(vec![
            Reply::Int(-3),
            Reply::bulk("a\r\nb"),
            Reply::Nil,
            Reply::Status("OK".into()),
            Reply::err("ERR x"),
            Reply::Array(vec![]),
        ]);
        let mut wire = Vec::new();
        r.encode(&mut wire);
        assert_eq!(decode_reply(&wire), Ok((r, wire.len())));
        for cut in 0..wire.len() {
            assert_eq!(decode_reply(&wire[..cut]), Err(Incomplete::More), "{cut}");
        }
        let cmd = encode_command(&["SET", "k", "v"]);
        assert_eq!(
            decode_command(&cmd),
            Ok((
                vec![b"SET".to_vec(), b"k".to_vec(), b"v".to_vec()],
                cmd.len()
            ))
        );
    }
}
