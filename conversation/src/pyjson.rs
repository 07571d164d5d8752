//! Where Python's `json.loads` (CPython 3.12's C scanner, `Modules/_json.c`) reports the
//! first fault of a text, and with which message: FastAPI answers `json_invalid` at that
//! position, and serde_json reports another one for many faults (the end of a truncated
//! body, where Python names the string left open; the character after a bad escape,
//! where Python names the backslash).
//!
//! Only read once serde_json has refused a body: this walks the text as CPython's
//! scanner does, step for step, and builds nothing. Positions are byte offsets into the
//! UTF-8 text; every character the scanner tests is ASCII, so they fall where its
//! character positions do.

/// What the scanner found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Scan {
    /// Python reads the whole text.
    Valid,
    /// Python's first fault: its byte offset and message.
    Fault(usize, &'static str),
    /// Nested deeper than `limit` before any fault.
    TooDeep,
}

/// `StopIteration(idx)` of the C scanner, or a `JSONDecodeError` raised in place.
enum Stop {
    /// No term starts here: the caller's `JSONDecodeError("Expecting value", idx)`.
    NoValue(usize),
    Fault(usize, &'static str),
    TooDeep,
}

/// Python's first fault in `text`, nesting at most `limit` deep.
pub(crate) fn scan(text: &[u8], limit: usize) -> Scan {
    let scanner = Scanner { s: text, limit };
    let start = scanner.whitespace(0);
    let end = match scanner.term(start, 0) {
        Ok(end) => end,
        Err(Stop::NoValue(at)) => return Scan::Fault(at, "Expecting value"),
        Err(Stop::Fault(at, message)) => return Scan::Fault(at, message),
        Err(Stop::TooDeep) => return Scan::TooDeep,
    };
    let end = scanner.whitespace(end);
    if end == text.len() {
        Scan::Valid
    } else {
        Scan::Fault(end, "Extra data")
    }
}

struct Scanner<'a> {
    s: &'a [u8],
    limit: usize,
}

impl Scanner<'_> {
    fn at(&self, i: usize) -> Option<u8> {
        self.s.get(i).copied()
    }

    /// `[ \t\n\r]*` from `i`.
    fn whitespace(&self, mut i: usize) -> usize {
        while matches!(self.at(i), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            i += 1;
        }
        i
    }

    /// `scan_once_unicode`: the term at `i`; the index just past it.
    fn term(&self, i: usize, depth: usize) -> Result<usize, Stop> {
        let literal = |word: &[u8]| self.s[i..].starts_with(word).then_some(i + word.len());
        let found = match self.at(i) {
            None => return Err(Stop::NoValue(i)),
            Some(b'"') => return self.string(i + 1),
            Some(b'{') | Some(b'[') if depth >= self.limit => return Err(Stop::TooDeep),
            Some(b'{') => return self.object(i + 1, depth + 1),
            Some(b'[') => return self.array(i + 1, depth + 1),
            Some(b'n') => literal(b"null"),
            Some(b't') => literal(b"true"),
            Some(b'f') => literal(b"false"),
            Some(b'N') => literal(b"NaN"),
            Some(b'I') => literal(b"Infinity"),
            Some(b'-') => literal(b"-Infinity"),
            Some(_) => None,
        };
        match found {
            Some(end) => Ok(end),
            None => self.number(i),
        }
    }

    /// `_match_number_unicode`.
    fn number(&self, start: usize) -> Result<usize, Stop> {
        let digit = |i: usize| self.at(i).is_some_and(|b| b.is_ascii_digit());
        let last = self.s.len().saturating_sub(1);
        let mut i = start;
        if self.at(i) == Some(b'-') {
            i += 1;
            if i > last {
                return Err(Stop::NoValue(start));
            }
        }
        match self.at(i) {
            Some(b'1'..=b'9') => {
                i += 1;
                while digit(i) {
                    i += 1;
                }
            }
            Some(b'0') => i += 1,
            _ => return Err(Stop::NoValue(start)),
        }
        if i < last && self.at(i) == Some(b'.') && digit(i + 1) {
            i += 2;
            while digit(i) {
                i += 1;
            }
        }
        if i < last && matches!(self.at(i), Some(b'e' | b'E')) {
            let e_start = i;
            i += 1;
            if i < last && matches!(self.at(i), Some(b'-' | b'+')) {
                i += 1;
            }
            while digit(i) {
                i += 1;
            }
            if !digit(i - 1) {
                i = e_start;
            }
        }
        Ok(i)
    }

    /// `scanstring_unicode`, from just past the opening quote.
    fn string(&self, mut end: usize) -> Result<usize, Stop> {
        let begin = end - 1;
        let len = self.s.len();
        loop {
            let mut next = end;
            while next < len && !matches!(self.s[next], b'"' | b'\\') {
                if self.s[next] <= 0x1f {
                    return Err(Stop::Fault(next, "Invalid control character at"));
                }
                next += 1;
            }
            match self.at(next) {
                Some(b'"') => return Ok(next + 1),
                Some(_) => {}
                None => return Err(Stop::Fault(begin, "Unterminated string starting at")),
            }
            // A backslash.
            next += 1;
            let Some(escape) = self.at(next) else {
                return Err(Stop::Fault(begin, "Unterminated string starting at"));
            };
            if escape != b'u' {
                if !matches!(
                    escape,
                    b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't'
                ) {
                    return Err(Stop::Fault(next - 1, "Invalid \\escape"));
                }
                end = next + 1;
                continue;
            }
            next += 1;
            end = next + 4;
            if end >= len {
                return Err(Stop::Fault(next - 1, "Invalid \\uXXXX escape"));
            }
            let unit = self
                .hex4(next)
                .ok_or(Stop::Fault(end - 5, "Invalid \\uXXXX escape"))?;
            next = end;
            // A high surrogate and a second escape: read as a pair when it is one.
            if (0xD800..0xDC00).contains(&unit)
                && end + 6 < len
                && self.at(next) == Some(b'\\')
                && self.at(next + 1) == Some(b'u')
            {
                let second = end + 6;
                let low = self
                    .hex4(next + 2)
                    .ok_or(Stop::Fault(second - 5, "Invalid \\uXXXX escape"))?;
                if (0xDC00..0xE000).contains(&low) {
                    end = second;
                }
            }
        }
    }

    fn hex4(&self, at: usize) -> Option<u16> {
        let digits = std::str::from_utf8(self.s.get(at..at + 4)?).ok()?;
        if !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        u16::from_str_radix(digits, 16).ok()
    }

    /// `_parse_object_unicode`, from just past `{` (3.12: no trailing-comma message).
    fn object(&self, i: usize, depth: usize) -> Result<usize, Stop> {
        let mut i = self.whitespace(i);
        if self.at(i) == Some(b'}') {
            return Ok(i + 1);
        }
        loop {
            if self.at(i) != Some(b'"') {
                return Err(Stop::Fault(
                    i,
                    "Expecting property name enclosed in double quotes",
                ));
            }
            i = self.whitespace(self.string(i + 1)?);
            if self.at(i) != Some(b':') {
                return Err(Stop::Fault(i, "Expecting ':' delimiter"));
            }
            i = self.whitespace(i + 1);
            i = self.whitespace(self.term(i, depth)?);
            match self.at(i) {
                Some(b'}') => return Ok(i + 1),
                Some(b',') => i = self.whitespace(i + 1),
                _ => return Err(Stop::Fault(i, "Expecting ',' delimiter")),
            }
        }
    }

    /// `_parse_array_unicode`, from just past `[`.
    fn array(&self, i: usize, depth: usize) -> Result<usize, Stop> {
        let mut i = self.whitespace(i);
        if self.at(i) == Some(b']') {
            return Ok(i + 1);
        }
        loop {
            i = self.whitespace(self.term(i, depth)?);
            match self.at(i) {
                Some(b']') => return Ok(i + 1),
                Some(b',') => i = self.whitespace(i + 1),
                _ => return Err(Stop::Fault(i, "Expecting ',' delimiter")),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Scan, scan};

    /// Positions and messages as CPython 3.12's `json.loads` reports them.
    #[test]
    fn faults_where_python_reports_them() {
        let cases: [(&str, Scan); 16] = [
            (r#"{"a": 1}"#, Scan::Valid),
            (
                r#" [1, 2.5e3, -0, "x\u00e9", NaN, -Infinity, null] "#,
                Scan::Valid,
            ),
            (
                r#"{"abc"#,
                Scan::Fault(1, "Unterminated string starting at"),
            ),
            (r#"{"a": "b\q"}"#, Scan::Fault(8, "Invalid \\escape")),
            (r#"{"a": "\u12"}"#, Scan::Fault(8, "Invalid \\uXXXX escape")),
            (
                "{\"a\": \"b\nc\"}",
                Scan::Fault(8, "Invalid control character at"),
            ),
            (
                r#"{"a": 1,}"#,
                Scan::Fault(8, "Expecting property name enclosed in double quotes"),
            ),
            (r#"{"a" 1}"#, Scan::Fault(5, "Expecting ':' delimiter")),
            (
                r#"{"a": 1 "b": 2}"#,
                Scan::Fault(8, "Expecting ',' delimiter"),
            ),
            (r#"[1,]"#, Scan::Fault(3, "Expecting value")),
            (r#"[1.]"#, Scan::Fault(2, "Expecting ',' delimiter")),
            (r#"{"a": tru}"#, Scan::Fault(6, "Expecting value")),
            (r#"{"a": 1}}"#, Scan::Fault(8, "Extra data")),
            (
                "{{{{",
                Scan::Fault(1, "Expecting property name enclosed in double quotes"),
            ),
            ("", Scan::Fault(0, "Expecting value")),
            ("[[[[1]]]]", Scan::TooDeep),
        ];
        for (text, expected) in cases {
            assert_eq!(scan(text.as_bytes(), 3), expected, "{text:?}");
        }
    }
}
