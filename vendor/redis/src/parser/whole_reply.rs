//! outbox's patch to redis 0.32.7 (see `VENDORED.md`): decoding a reply that is whole in the
//! read buffer without `combine`. `ValueCodec` (in `parser.rs`) measures the reply at the front
//! of its buffer with [`measure_whole`] and, when it is whole, decodes it with
//! [`decode_whole`], exactly as `combine`'s grammar (`value` in `parser.rs`) would; anything
//! else stays with `combine`, the only source of errors.

use std::str;

use super::{err_parser, MAX_RECURSE_DEPTH};
use crate::types::Value;

/// What [`measure_whole`] found at the start of a buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Measured {
    /// A whole value of the types decoded directly (`+ - : $ * _`), this many bytes long.
    Whole(usize),
    /// The start of such a value, cut short: more bytes may complete it.
    Incomplete,
    /// Something else (another RESP3 type, bytes `value` would refuse, nesting deeper than
    /// [`MAX_RECURSE_DEPTH`]): for `combine`.
    Other,
}

/// Measure the value at the start of `buf` without building it: no allocation, and a bulk
/// string is skipped by its length, so a reply that arrives in several reads is measured again
/// cheaply as it grows.
pub(super) fn measure_whole(buf: &[u8]) -> Measured {
    let mut at = 0;
    match measure_at(buf, &mut at, 1) {
        Ok(()) => Measured::Whole(at),
        Err(stop) => stop,
    }
}

/// Move `*at` past the value starting there, at nesting `count` (1 at the top, as in
/// `parser.rs`'s `value`).
fn measure_at(buf: &[u8], at: &mut usize, count: usize) -> Result<(), Measured> {
    if count > MAX_RECURSE_DEPTH {
        return Err(Measured::Other);
    }
    let kind = *buf.get(*at).ok_or(Measured::Incomplete)?;
    *at += 1;
    match kind {
        b'+' | b'-' | b'_' => line_at(buf, at).map(|_| ()),
        b':' => int_at(buf, at).map(|_| ()),
        b'$' => {
            let Some(size) = len_of(int_at(buf, at)?)? else {
                return Ok(());
            };
            let end = at.checked_add(size).ok_or(Measured::Other)?;
            match buf.get(end..end + 2) {
                None => Err(Measured::Incomplete),
                Some(b"\r\n") => {
                    *at = end + 2;
                    Ok(())
                }
                Some(_) => Err(Measured::Other),
            }
        }
        b'*' => {
            let Some(length) = len_of(int_at(buf, at)?)? else {
                return Ok(());
            };
            for _ in 0..length {
                measure_at(buf, at, count + 1)?;
            }
            Ok(())
        }
        _ => Err(Measured::Other),
    }
}

/// A bulk string's or an array's length line as a length: `None` for a negative one (nil).
fn len_of(n: i64) -> Result<Option<usize>, Measured> {
    if n < 0 {
        return Ok(None);
    }
    usize::try_from(n).map(Some).map_err(|_| Measured::Other)
}

/// The line starting at `*at` (up to the first `\r\n`) as UTF-8, as `value`'s `line` reads it;
/// `*at` moves past its `\r\n`.
fn line_at<'a>(buf: &'a [u8], at: &mut usize) -> Result<&'a str, Measured> {
    let rest = buf.get(*at..).ok_or(Measured::Incomplete)?;
    let mut from = 0;
    let end = loop {
        let cr = from
            + rest[from..]
                .iter()
                .position(|&b| b == b'\r')
                .ok_or(Measured::Incomplete)?;
        match rest.get(cr + 1) {
            Some(b'\n') => break cr,
            Some(_) => from = cr + 1,
            None => return Err(Measured::Incomplete),
        }
    };
    let line = str::from_utf8(&rest[..end]).map_err(|_| Measured::Other)?;
    *at += end + 2;
    Ok(line)
}

/// The integer line starting at `*at`, as `value`'s `int` reads it (`trim`, then `parse`),
/// with a shortcut for the form Redis writes: an optional `-` and up to 18 digits.
fn int_at(buf: &[u8], at: &mut usize) -> Result<i64, Measured> {
    if let Some((n, used)) = buf.get(*at..).and_then(plain_int) {
        *at += used;
        return Ok(n);
    }
    line_at(buf, at)?.trim().parse().map_err(|_| Measured::Other)
}

/// `-?[0-9]{1,18}\r\n` at the start of `bytes`: its value and length; `None` for anything else.
fn plain_int(bytes: &[u8]) -> Option<(i64, usize)> {
    let sign = usize::from(bytes.first() == Some(&b'-'));
    let digits = bytes[sign..]
        .iter()
        .take(19)
        .take_while(|b| b.is_ascii_digit())
        .count();
    if digits == 0 || digits > 18 || bytes.get(sign + digits..sign + digits + 2)? != b"\r\n" {
        return None;
    }
    let n = bytes[sign..sign + digits]
        .iter()
        .fold(0i64, |n, d| n * 10 + i64::from(d - b'0'));
    Some((if sign == 1 { -n } else { n }, sign + digits + 2))
}

/// Decode the value that [`measure_whole`] found whole at the start of `buf`, exactly as
/// `parser.rs`'s `value` decodes it (`None` only if it was not whole after all).
pub(super) fn decode_whole(buf: &[u8]) -> Option<Value> {
    decode_at(buf, &mut 0).ok()
}

/// The value starting at `*at`; `*at` moves past it.
fn decode_at(buf: &[u8], at: &mut usize) -> Result<Value, Measured> {
    let kind = *buf.get(*at).ok_or(Measured::Incomplete)?;
    *at += 1;
    Ok(match kind {
        b'+' => match line_at(buf, at)? {
            "OK" => Value::Okay,
            line => Value::SimpleString(line.into()),
        },
        b'-' => Value::ServerError(err_parser(line_at(buf, at)?)),
        b'_' => line_at(buf, at).map(|_| Value::Nil)?,
        b':' => Value::Int(int_at(buf, at)?),
        b'$' => match len_of(int_at(buf, at)?)? {
            None => Value::Nil,
            Some(size) => {
                let bytes = buf.get(*at..*at + size).ok_or(Measured::Incomplete)?;
                *at += size + 2;
                Value::BulkString(bytes.to_vec())
            }
        },
        b'*' => match len_of(int_at(buf, at)?)? {
            None => Value::Nil,
            Some(length) => {
                // Measured whole: every element is in `buf`, each at least 3 bytes long.
                let mut values = Vec::with_capacity(length.min(buf.len() / 3));
                for _ in 0..length {
                    values.push(decode_at(buf, at)?);
                }
                Value::Array(values)
            }
        },
        _ => return Err(Measured::Other),
    })
}

/// How many times a reply is measured as incomplete, one read after another, before it is left
/// to `combine`: measuring a reply again on each read costs more, the more reads it takes.
pub(super) const MEASURES_PER_REPLY: u32 = 8;
