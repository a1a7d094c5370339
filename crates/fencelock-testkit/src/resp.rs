//! A tiny blocking RESP2 client, enough for test set-up and assertions
//! without a dependency on the `redis` crate.

use std::io::{self, BufRead, BufReader, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::time::Duration;

/// One decoded RESP2 reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Reply {
    Simple(String),
    Error(String),
    Integer(i64),
    Bulk(Vec<u8>),
    Nil,
    Array(Vec<Reply>),
}

impl Reply {
    /// The rendering `RedisNode::cli` returns: bulk content, integers as
    /// text, nil as `(nil)`, arrays newline-joined, errors as `Err`.
    pub(crate) fn render(&self) -> io::Result<String> {
        Ok(match self {
            Reply::Simple(s) => s.clone(),
            Reply::Error(e) => return Err(io::Error::other(format!("redis error: {e}"))),
            Reply::Integer(i) => i.to_string(),
            Reply::Bulk(b) => String::from_utf8_lossy(b).into_owned(),
            Reply::Nil => "(nil)".to_owned(),
            Reply::Array(items) => items
                .iter()
                .map(Reply::render)
                .collect::<io::Result<Vec<_>>>()?
                .join("\n"),
        })
    }
}

/// Encodes a command as a RESP array of bulk strings.
pub(crate) fn encode(args: &[&[u8]]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for arg in args {
        out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        out.extend_from_slice(arg);
        out.extend_from_slice(b"\r\n");
    }
    out
}

fn bad(msg: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.into())
}

/// Reads one reply. Nesting is bounded so a hostile stream cannot overflow
/// the stack.
pub(crate) fn decode(reader: &mut impl BufRead) -> io::Result<Reply> {
    decode_depth(reader, 0)
}

fn decode_depth(reader: &mut impl BufRead, depth: usize) -> io::Result<Reply> {
    if depth > 32 {
        return Err(bad("RESP reply nested too deeply"));
    }
    let mut line = Vec::new();
    reader.read_until(b'\n', &mut line)?;
    if line.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "connection closed before a reply",
        ));
    }
    if !line.ends_with(b"\r\n") {
        return Err(bad("RESP line without CRLF"));
    }
    line.truncate(line.len() - 2);
    let (kind, rest) = line.split_first().ok_or_else(|| bad("empty RESP line"))?;
    let text = String::from_utf8_lossy(rest).into_owned();
    let number = || -> io::Result<i64> {
        text.parse::<i64>()
            .map_err(|_| bad(format!("bad RESP length or integer {text:?}")))
    };
    match kind {
        b'+' => Ok(Reply::Simple(text.clone())),
        b'-' => Ok(Reply::Error(text.clone())),
        b':' => Ok(Reply::Integer(number()?)),
        b'$' => {
            let len = number()?;
            if len < 0 {
                return Ok(Reply::Nil);
            }
            let len = usize::try_from(len).map_err(|_| bad("bulk length too large"))?;
            let mut buf = vec![0; len + 2];
            reader.read_exact(&mut buf)?;
            if !buf.ends_with(b"\r\n") {
                return Err(bad("bulk string without CRLF"));
            }
            buf.truncate(len);
            Ok(Reply::Bulk(buf))
        }
        b'*' => {
            let len = number()?;
            if len < 0 {
                return Ok(Reply::Nil);
            }
            let len = usize::try_from(len).map_err(|_| bad("array length too large"))?;
            let mut items = Vec::with_capacity(len.min(1024));
            for _ in 0..len {
                items.push(decode_depth(reader, depth + 1)?);
            }
            Ok(Reply::Array(items))
        }
        other => Err(bad(format!("unknown RESP type byte {:?}", *other as char))),
    }
}

/// Sends one command to `127.0.0.1:port` on a fresh connection and reads
/// the reply, with `timeout` on connect, read and write.
pub(crate) fn command(port: u16, args: &[&[u8]], timeout: Duration) -> io::Result<Reply> {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let stream = TcpStream::connect_timeout(&addr, timeout)?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    stream.set_nodelay(true)?;
    (&stream).write_all(&encode(args))?;
    let mut reader = BufReader::new(&stream);
    decode(&mut reader).map_err(|e| {
        if e.kind() == io::ErrorKind::WouldBlock {
            // Linux reports a read timeout as EAGAIN; say what it means.
            io::Error::new(
                io::ErrorKind::TimedOut,
                format!("no reply from 127.0.0.1:{port} within {timeout:?}"),
            )
        } else {
            e
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(bytes: &[u8]) -> io::Result<Reply> {
        decode(&mut &bytes[..])
    }

    #[test]
    fn encodes_bulk_array() {
        assert_eq!(
            encode(&[b"SET", b"k", b""]),
            b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\n".to_vec()
        );
    }

    #[test]
    fn decodes_and_renders() {
        assert_eq!(parse(b"+OK\r\n").unwrap().render().unwrap(), "OK");
        assert_eq!(parse(b":-7\r\n").unwrap().render().unwrap(), "-7");
        assert_eq!(parse(b"$-1\r\n").unwrap().render().unwrap(), "(nil)");
        assert_eq!(parse(b"$2\r\nhi\r\n").unwrap().render().unwrap(), "hi");
        assert_eq!(
            parse(b"*3\r\n$1\r\na\r\n:2\r\n$-1\r\n")
                .unwrap()
                .render()
                .unwrap(),
            "a\n2\n(nil)"
        );
        assert!(parse(b"-ERR nope\r\n").unwrap().render().is_err());
    }

    #[test]
    fn rejects_garbage() {
        assert!(parse(b"?x\r\n").is_err());
        assert!(parse(b"$5\r\nab\r\n").is_err());
        assert!(parse(b"").is_err());
        assert!(parse(b"+OK\n").is_err());
    }
}
