//! Values the bundle never quotes, whoever chose them: what a URL carries besides where it
//! goes (its userinfo and its query's values: `?key=` as Gemini takes its key, `&code=`
//! as Azure Functions, `?token=`), and what a file or a client wrote that the bundle would
//! otherwise repeat inside a message (a broken configuration file's values, quoted by the
//! parser's error; a log line's quoted fields).

use super::redaction::REDACTED;

/// What a hidden quoted value reads as.
pub const HIDDEN: &str = "[value]";

/// Characters of a URL's scheme, read backwards from its `://`.
fn is_scheme_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.')
}

/// Where a URL written in free text ends: at white space, a quote, or an angle bracket.
fn ends_url(c: char) -> bool {
    c.is_whitespace() || matches!(c, '"' | '\'' | '`' | '<' | '>')
}

/// `text` with every URL's userinfo and query values replaced by [`REDACTED`]; the rest of
/// each URL (scheme, host, path, query keys, fragment) and of the text stays.
pub fn redact_urls(text: &str) -> String {
    if !text.contains("://") {
        return text.to_owned();
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("://") {
        let scheme_start = rest[..at]
            .char_indices()
            .rev()
            .take_while(|(_, c)| is_scheme_char(*c))
            .last()
            .map_or(at, |(index, _)| index);
        let after = &rest[at + 3..];
        let end = after.find(ends_url).unwrap_or(after.len());
        out.push_str(&rest[..at + 3]);
        if scheme_start == at {
            // No scheme: not a URL; go on after the separator.
            rest = after;
            continue;
        }
        out.push_str(&redacted_url_rest(&after[..end]));
        rest = &after[end..];
    }
    out.push_str(rest);
    out
}

/// A URL after its `scheme://`, without its userinfo's and query's values.
fn redacted_url_rest(url: &str) -> String {
    let authority_end = url.find(['/', '?', '#']).unwrap_or(url.len());
    let (authority, path) = url.split_at(authority_end);
    let mut out = match authority.rsplit_once('@') {
        Some((_, host)) => format!("{REDACTED}@{host}"),
        None => authority.to_owned(),
    };
    let (before_fragment, fragment) = match path.split_once('#') {
        Some((before, fragment)) => (before, Some(fragment)),
        None => (path, None),
    };
    match before_fragment.split_once('?') {
        Some((path, query)) => {
            out.push_str(path);
            out.push('?');
            let pairs: Vec<String> = query
                .split('&')
                .map(|pair| match pair.split_once('=') {
                    Some((key, _)) => format!("{key}={REDACTED}"),
                    None if pair.is_empty() => String::new(),
                    None => REDACTED.to_owned(),
                })
                .collect();
            out.push_str(&pairs.join("&"));
        }
        None => out.push_str(before_fragment),
    }
    if let Some(fragment) = fragment {
        out.push('#');
        out.push_str(fragment);
    }
    out
}

/// `text` with the contents of every quoted span (`"…"`, with `\"` inside, and `` `…` ``)
/// replaced by [`HIDDEN`]: where a parser's error or a log line quotes a value.
pub fn hide_quoted(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        out.push(c);
        if c != '"' && c != '`' {
            continue;
        }
        let mut closed = false;
        let mut escaped = false;
        for inner in chars.by_ref() {
            if escaped {
                escaped = false;
            } else if inner == '\\' && c == '"' {
                escaped = true;
            } else if inner == c {
                closed = true;
                break;
            }
        }
        out.push_str(HIDDEN);
        if closed {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_urls_userinfo_and_query_values_are_redacted() {
        for (text, expected) in [
            (
                "https://generativelanguage.googleapis.com/v1beta?key=AIza-planted",
                "https://generativelanguage.googleapis.com/v1beta?key=[redacted]",
            ),
            (
                "base http://fn.azurewebsites.net/api/x?code=planted&api-version=2024 failed",
                "base http://fn.azurewebsites.net/api/x?code=[redacted]&api-version=[redacted] failed",
            ),
            (
                "\"https://user:planted@host:8080/p?token=planted#frag\"",
                "\"https://[redacted]@host:8080/p?token=[redacted]#frag\"",
            ),
            (
                "redis://:pass@redis:6379/0",
                "redis://[redacted]@redis:6379/0",
            ),
            ("http://h/?planted", "http://h/?[redacted]"),
            ("http://h/path", "http://h/path"),
            ("no url here: a://", "no url here: a://"),
            ("://planted?x=1", "://planted?x=1"),
            (
                "two: http://a?k=1 and ws://u@b/",
                "two: http://a?k=[redacted] and ws://[redacted]@b/",
            ),
            ("é http://h?k=é é", "é http://h?k=[redacted] é"),
        ] {
            assert_eq!(redact_urls(text), expected, "{text}");
        }
    }

    #[test]
    fn quoted_values_are_hidden() {
        for (text, expected) in [
            (
                "invalid type: string \"sk-planted\", expected f64 at line 3",
                "invalid type: string \"[value]\", expected f64 at line 3",
            ),
            (
                "unknown variant `planted`, expected `a` or `b`",
                "unknown variant `[value]`, expected `[value]` or `[value]`",
            ),
            (
                "model_name=\"a \\\"quoted\\\" planted\" status=404",
                "model_name=\"[value]\" status=404",
            ),
            ("unclosed \"planted", "unclosed \"[value]"),
            ("nothing quoted", "nothing quoted"),
        ] {
            assert_eq!(hide_quoted(text), expected, "{text}");
        }
    }
}
