//! A minimal, strict CSV record splitter for workload files (RFC 4180 quoting on one line).
//!
//! Fields are separated by commas; a field may be wrapped in double quotes, inside which commas
//! are literal and `""` is one quote. Records may not span lines. This module only splits text;
//! it does not know what the columns mean ([`crate::sim::workload`] does).

/// Why a line could not be split into fields.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CsvError {
    /// A quoted field was still open at the end of the line.
    #[error("unterminated quoted field starting at column {0}")]
    Unterminated(usize),
    /// Text followed the closing quote of a quoted field.
    #[error("unexpected text after the closing quote at column {0}")]
    AfterQuote(usize),
}

/// Splits one line into its fields. Fields are trimmed of surrounding spaces unless quoted.
pub fn split_record(line: &str) -> Result<Vec<String>, CsvError> {
    let mut fields = Vec::new();
    let mut chars = line.char_indices().peekable();
    loop {
        // Skip leading spaces of the field.
        while let Some(&(_, ' ' | '\t')) = chars.peek() {
            chars.next();
        }
        let mut field = String::new();
        if let Some(&(start, '"')) = chars.peek() {
            chars.next();
            let mut closed = false;
            while let Some((_, c)) = chars.next() {
                if c == '"' {
                    if let Some(&(_, '"')) = chars.peek() {
                        chars.next();
                        field.push('"');
                    } else {
                        closed = true;
                        break;
                    }
                } else {
                    field.push(c);
                }
            }
            if !closed {
                return Err(CsvError::Unterminated(start + 1));
            }
            while let Some(&(_, ' ' | '\t')) = chars.peek() {
                chars.next();
            }
            match chars.next() {
                None => {
                    fields.push(field);
                    return Ok(fields);
                }
                Some((_, ',')) => fields.push(field),
                Some((i, _)) => return Err(CsvError::AfterQuote(i + 1)),
            }
        } else {
            loop {
                match chars.next() {
                    None => {
                        fields.push(field.trim_end().to_string());
                        return Ok(fields);
                    }
                    Some((_, ',')) => break,
                    Some((_, c)) => field.push(c),
                }
            }
            fields.push(field.trim_end().to_string());
        }
    }
}

/// Quotes `field` for output if it contains a comma, quote or leading/trailing space.
pub fn quote(field: &str) -> String {
    if field.contains([',', '"']) || field.trim() != field {
        format!("\"{}\"", field.replace('"', "\"\""))
    } else {
        field.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_plain_and_quoted_fields() {
        assert_eq!(split_record("a, b ,c").unwrap(), ["a", "b", "c"]);
        assert_eq!(split_record("a,,").unwrap(), ["a", "", ""]);
        assert_eq!(
            split_record(r#"1,"docker,linux", "say ""hi""" "#).unwrap(),
            ["1", "docker,linux", r#"say "hi""#]
        );
        assert_eq!(split_record("").unwrap(), [""]);
    }

    #[test]
    fn rejects_broken_quotes() {
        assert_eq!(split_record(r#"1,"open"#), Err(CsvError::Unterminated(3)));
        assert_eq!(split_record(r#""a"b,c"#), Err(CsvError::AfterQuote(4)));
    }

    #[test]
    fn quote_round_trips() {
        for s in ["plain", "a,b", r#"q"q"#, " pad"] {
            assert_eq!(split_record(&quote(s)).unwrap(), [s]);
        }
    }
}
